"""Device operations per pass, counted on the stand-in device: on a GPU each is a kernel
launch or a Python-level array call (views are not counted), so this is the eager GPU path's
overhead measured without a GPU. Prints, for LeNet's training iteration and the
forward-backward of CaffeNet, GoogLeNet and ResNet-50 (batch 2, every input's gradient), the
count with caffecli's device kernels off (CAFFECLI_DEVICE_KERNELS=0: the array code) and on,
and the layer types with the most operations.

    python bench/device_ops.py [--nets lenet-train,caffenet,googlenet,resnet50] [--top 5]

Not a speed benchmark (nothing is timed; bench/bench_gpu.py times the GPU against PyTorch).
"""
import argparse
import collections
import os
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cpu  # noqa: E402  (puts the checkout on sys.path)

VIEWS = {"getitem", "reshape", "transpose", "ascontiguousarray"}


def count(name):
    """{(layer type and pass, operation): count} of one pass of ``name``, in this process."""
    from caffecli import context, layer, standin
    from caffecli.solvers import sgd
    counts, where = collections.Counter(), ["solver"]
    call = standin._call

    def counting(fn, args, kwargs):
        op = getattr(fn, "__name__", str(fn))
        if op == "__call__":                       # a ufunc
            op = getattr(getattr(fn, "__self__", None), "__name__", op)
        if op not in VIEWS and threading.current_thread() is threading.main_thread():
            counts[(where[0], op)] += 1
        return call(fn, args, kwargs)
    standin._call = counting

    def tagged(cls, method, tag):
        original = getattr(cls, method)

        def run(self, *args, **kwargs):
            old = where[0]
            where[0] = tag(self)
            try:
                return original(self, *args, **kwargs)
            finally:
                where[0] = old
        setattr(cls, method, run)
    tagged(layer.Layer, "forward_terms", lambda self: self.type + " forward")
    tagged(layer.Layer, "Backward", lambda self: self.type + " backward")
    tagged(sgd.SGDSolver, "update_params", lambda self: "solver update")
    context.set_mode_gpu()
    if name == "lenet-train":
        step = lenet_training_step()
    else:
        step = deploy_net(bench_cpu.NETS[name]).engine.forward_backward
    step()
    step()
    counts.clear()
    step()
    return counts


def lenet_training_step():
    """One iteration of BVLC's LeNet solver over a small random LMDB (its loader thread's
    uploads are not counted: they are not the training thread's)."""
    import caffecli
    import numpy
    from caffecli.data import db
    from caffecli.proto import caffe_pb2
    from caffecli.proto.io import read_net_param, read_solver_param
    source = os.path.join(tempfile.mkdtemp(), "db")
    rs = numpy.random.RandomState(0)
    with db.open_writer(source, "lmdb") as writer:
        for i in range(64):
            datum = caffe_pb2.Datum(channels=1, height=28, width=28, label=int(rs.randint(10)),
                                    data=rs.randint(0, 256, (28, 28), numpy.uint8).tobytes())
            writer.put("%08d" % i, datum.SerializeToString())
    lenet = os.path.join(bench_cpu.ROOT, "models", "lenet")
    net = read_net_param(os.path.join(lenet, "lenet_train_test.prototxt"))
    for lp in net.layer:
        if lp.type == "Data":
            lp.data_param.source, lp.data_param.batch_size = source, 16
    param = read_solver_param(os.path.join(lenet, "lenet_solver.prototxt"))
    param.ClearField("net")
    param.net_param.CopyFrom(net)
    for field in ("test_iter", "test_interval", "snapshot", "snapshot_prefix"):
        param.ClearField(field)
    param.display, param.snapshot_after_train = 0, False
    solver = caffecli.get_solver(param)
    return lambda: solver.step(1)


def deploy_net(path):
    """The deploy net at batch 2 in TRAIN phase, every gradient computed."""
    import caffecli
    from caffecli.proto.io import read_net_param
    param = read_net_param(path)
    for lp in param.layer:
        if lp.type == "Input":
            lp.input_param.shape[0].dim[0] = 2
    for shape in param.input_shape:
        shape.dim[0] = 2
    param.force_backward = True
    return caffecli.Net(param, caffecli.TRAIN, log=False)


def report(name, top):
    """Run ``count`` in a child process per setting (kernels off, on) and print both."""
    rows = []
    for kernels in ("0", "1"):
        env = dict(os.environ, CAFFECLI_STANDIN_GPU="1", CAFFECLI_DEVICE_KERNELS=kernels,
                   GLOG_minloglevel="2")
        out = subprocess.run([sys.executable, __file__, "--child", name, "--top", str(top)],
                             env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit("%s: %s" % (name, out.stderr.strip().splitlines()[-1]))
        rows.append(out.stdout.splitlines())
    off, on = int(rows[0][0]), int(rows[1][0])
    print("%-12s %6d -> %5d device operations per pass (%.1fx fewer)" % (
        name, off, on, off / max(on, 1)))
    for line in rows[1][1:]:
        print("    " + line)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nets", default="lenet-train,caffenet,googlenet,resnet50")
    parser.add_argument("--top", type=int, default=5, help="layer types listed per net")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        counts = count(args.child)
        per = collections.Counter()
        for (where, _), n in counts.items():
            per[where] += n
        print(sum(counts.values()))
        for where, n in per.most_common(args.top):
            ops = sorted(((op, c) for (w, op), c in counts.items() if w == where),
                         key=lambda item: -item[1])
            print("%5d %-26s %s" % (n, where, ", ".join("%s %d" % o for o in ops[:6])))
        return
    print("caffecli device operations per pass on the stand-in device (CAFFECLI_DEVICE_KERNELS="
          "0 -> 1); the top layer types are with kernels on")
    for name in args.nets.split(","):
        report(name, args.top)


if __name__ == "__main__":
    main()
