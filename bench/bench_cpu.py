"""CPU speed in one run: caffecli against PyTorch CPU (and real Caffe when a ``caffe`` binary is
on PATH) on LeNet, CaffeNet, GoogLeNet and ResNet-50 forward-backward (with ``--nets``, CIFAR-10
quick and full at batch 100 and MobileNet v1 at batch 4 too: bench/nets holds its prototxt, the
depthwise net of the set); the machine's sgemm rate and each net's GEMM-only limit; the
peak of memory allocated during one iteration; an SGD update of CaffeNet's parameters against
torch.optim.SGD's, and a whole training iteration of CaffeNet (solver step against
forward-backward and optimizer step); CaffeNet's build + 244 MB weights load time; and
``caffecli --help``'s time. Prints the core count.

Run by hand from the repository root (PyTorch is not a dependency of caffecli):

    pip install torch             # the CPU wheel
    python bench/bench_cpu.py     # --nets lenet,caffenet --rounds 3 --iterations 3 --by-type

Both sides compute every gradient (inputs and parameters: force_backward on caffecli's net,
requires_grad on torch's input) from ones at the outputs, TRAIN phase, the nets' own batch
sizes. PyTorch runs a twin built from caffecli's own records of the net (same layers, shapes,
groups, pads, ceil-mode pooling), so both do the same work. Each side runs ``--iterations``
timed passes after a warm-up, in ``--rounds`` alternating rounds; the figures are medians. The
GEMM-only limit is the net's GEMM multiply-adds x 2 over the sgemm rate (a 2048^3 sgemm through
scipy's BLAS, as the layers call it): the time the products alone would take at that rate. The
rate is measured again in each of a net's rounds, and its median there sets that net's limit
(column ``sgemm``): a machine whose speed drifts during the run (a shared or throttled host)
moves both together. With more than one round, each net's line is followed by each round's own
ratio and multiple of the limit (that round's medians, that round's sgemm rate): their spread is
the host's noise.
"""
import argparse
import collections
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# ../shared beside the checkout, else the copy `make carry` puts in it (for a GPU host)
SHARED = next((p for p in (os.path.join(os.path.dirname(ROOT), "shared"),
                           os.path.join(ROOT, "shared")) if os.path.isdir(os.path.join(p, "zoo"))),
              os.path.join(os.path.dirname(ROOT), "shared"))
sys.path.insert(0, ROOT)
from caffecli import context  # noqa: E402  (before numpy: its BLAS reads caffecli's settings)
from caffecli.kernels import threads  # noqa: E402
from caffecli.kernels.threads import num_threads  # noqa: E402
from caffecli.net import Net, TRAIN  # noqa: E402
from caffecli.proto.io import read_net_param  # noqa: E402
import numpy  # noqa: E402

NETS = {
    "lenet": os.path.join(ROOT, "models", "lenet", "lenet.prototxt"),
    "caffenet": os.path.join(SHARED, "zoo", "bvlc_reference_caffenet__deploy.prototxt"),
    "googlenet": os.path.join(SHARED, "zoo", "bvlc_googlenet__deploy.prototxt"),
    "resnet50": os.path.join(SHARED, "nets", "KaimingHe__ResNet-50-deploy.prototxt"),
    "cifar10_quick": os.path.join(SHARED, "zoo", "cifar10__cifar10_quick.prototxt"),
    "cifar10_full": os.path.join(SHARED, "zoo", "cifar10__cifar10_full.prototxt"),
    "mobilenet": os.path.join(ROOT, "bench", "nets", "mobilenet_v1_deploy.prototxt"),
}
BATCH = {"cifar10_quick": 100, "cifar10_full": 100,   # their solvers' training batch (the
                                                      # deploy nets say 1)
         "mobilenet": 4}                              # a small batch (its deploy file says 1)


def start_kernel_threads():
    """Start caffecli's kernel threads now and name them (torch loads first: its OpenMP
    runtime then starts under its own settings, as in a torch-only process)."""
    if threads.start():
        from caffecli.kernels.jit import numba
        return "numba's %s layer for 3+ parts, else caffecli's pool" % numba.threading_layer()
    return "caffecli's pool"


def machine():
    model = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f
                         if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return model, len(os.sched_getaffinity(0))


def blas_kernels():
    """The kernels each loaded OpenBLAS runs (numpy's and scipy's, which pick them once, at
    load: OPENBLAS_CORETYPE forces them; Haswell's AVX2 ones run at half the rate of the
    AVX-512 ones on an AVX-512 core), as "library: core"."""
    import ctypes
    found = []
    try:
        with open("/proc/self/maps") as f:
            libs = sorted({line.split()[-1] for line in f if "openblas" in line.split()[-1]})
    except OSError:
        return "?"
    for path in libs:
        lib = ctypes.CDLL(path)
        for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
                     "openblas_get_corename"):
            if hasattr(lib, name):
                getattr(lib, name).restype = ctypes.c_char_p
                found.append("%s: %s" % (os.path.basename(path).split("-")[0],
                                         getattr(lib, name)().decode()))
                break
    return ", ".join(found) or "?"


def median_time(fn, reps, warm=False):
    """Median seconds of ``reps`` calls of ``fn``; with ``warm``, after one untimed call, so
    that a round does not pay for the other side's idle threads still spinning on the cores
    (PyTorch's OpenMP pool, OpenBLAS's) or for its data left out of the caches."""
    if warm:
        fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def sgemm_gflops(n=2048, reps=5):
    from scipy.linalg import blas
    a = numpy.random.rand(n, n).astype(numpy.float32, order="F")
    b = numpy.random.rand(n, n).astype(numpy.float32, order="F")
    blas.sgemm(1.0, a, b)
    return 2.0 * n ** 3 / median_time(lambda: blas.sgemm(1.0, a, b), reps) / 1e9


# ---- caffecli ------------------------------------------------------------------------------
def caffecli_net(path, batch=None):
    """The net of ``path`` (TRAIN, every gradient, random inputs); ``batch`` sets the inputs'
    first dimension."""
    param = read_net_param(path)
    param.force_backward = True
    for lp in param.layer:
        if batch and lp.type == "Input":
            for shape in lp.input_param.shape:
                shape.dim[0] = batch
    context.set_random_seed(1)
    net = Net(param, TRAIN, log=False)
    for blob in net.input_blobs:
        blob.data[...] = numpy.random.rand(*blob.shape)
    for blob in net.output_blobs:   # the gradient PyTorch's side starts from (ones, not zeros)
        blob.diff[...] = 1
    return net


def caffecli_pass(net):
    net.forward_pass()
    net.backward_pass()


def peak_alloc_mb(net):
    """Peak of the arrays allocated during one forward-backward (the blobs already exist)."""
    tracemalloc.start()
    try:
        caffecli_pass(net)
        return tracemalloc.get_traced_memory()[1] / 2 ** 20
    finally:
        tracemalloc.stop()


def gemm_macs(net):
    """Multiply-adds of the GEMMs of one forward-backward with every gradient."""
    total = 0
    for rec in net.records:
        layer, kind = rec.layer, rec.layer.type
        if kind in ("Convolution", "Deconvolution"):
            out = rec.bottoms[0] if kind == "Deconvolution" else rec.tops[0]
            positions = out.count(layer.channel_axis + 1)
            conv_out = layer.conv_out
            macs = layer.num * conv_out * layer.kernel_dim * positions
        elif kind == "InnerProduct":
            macs = layer.M * layer.K * layer.num_output
        else:
            continue
        total += 3 * macs  # forward, weight gradient, input gradient
    return total


# ---- PyTorch twin ----------------------------------------------------------------------------
def torch_twin(net, device="cpu"):
    """A function running caffecli ``net``'s layers in torch (on ``device``), and its
    parameters."""
    import torch
    import torch.nn.functional as F
    from caffecli.proto import caffe_pb2
    PP = caffe_pb2.PoolingParameter
    params, steps = [], []

    def weight(blob, fill=None):
        """A parameter of ``blob``'s shape: He's normal filler (std sqrt(2 / fan-in)), or the
        constant ``fill``. Scaled so that no activation of a deep net decays into subnormal
        numbers, which the CPU computes on many times slower (ResNet-50's pass took 1.0-1.3 s
        against about 0.25 s with every weight N(0, 0.01), its 53 Scale layers included)."""
        if fill is None:
            fan_in = blob.count // blob.shape[0]
            t = torch.randn(*blob.shape, device=device) * (2.0 / fan_in) ** 0.5
        else:
            t = torch.full(blob.shape, float(fill), device=device)
        t.requires_grad_(True)
        params.append(t)
        return t

    def conv(layer, lp):
        w = weight(layer.blobs[0])
        b = weight(layer.blobs[1], 0) if layer.bias_term else None
        return lambda x: F.conv2d(x, w, b, layer.stride, layer.pad, layer.dilation, layer.group)

    def ip(layer, lp):
        w = weight(layer.blobs[0])
        b = weight(layer.blobs[1], 0) if layer.bias_term else None
        return lambda x: F.linear(x.flatten(1), w, b)

    def pool(layer, lp):
        k, s, p = layer.kernel, layer.stride, layer.pad
        if lp.pooling_param.pool == PP.MAX:
            return lambda x: F.max_pool2d(x, k, s, p, ceil_mode=True)
        return lambda x: F.avg_pool2d(x, k, s, p, ceil_mode=True)

    def lrn(layer, lp):
        q = lp.lrn_param
        return lambda x: F.local_response_norm(x, q.local_size, q.alpha, q.beta, q.k)

    def batch_norm(layer, lp):
        c = layer.blobs[0].shape[0]
        mean, var = torch.zeros(c, device=device), torch.ones(c, device=device)
        return lambda x: F.batch_norm(x, mean, var, training=False, eps=lp.batch_norm_param.eps)

    def scale(layer, lp):
        c = layer.blobs[0].shape[0]
        w = weight(layer.blobs[0], 1).view(1, c, 1, 1)
        b = weight(layer.blobs[1], 0).view(1, c, 1, 1) if len(layer.blobs) > 1 else 0
        return lambda x: x * w + b

    make = {
        "Convolution": conv, "InnerProduct": ip, "Pooling": pool, "LRN": lrn,
        "BatchNorm": batch_norm, "Scale": scale,
        "ReLU": lambda layer, lp: F.relu,
        "Dropout": lambda layer, lp: lambda x: F.dropout(x, lp.dropout_param.dropout_ratio),
        "Softmax": lambda layer, lp: lambda x: F.softmax(x, dim=1),
        "Concat": lambda layer, lp: lambda *xs: torch.cat(xs, dim=1),
        "Eltwise": lambda layer, lp: lambda *xs: sum(xs[1:], xs[0]),
        "Split": lambda layer, lp: lambda x: (x,) * len(lp.top),
    }
    inputs = {}
    for rec in net.records:
        lp = rec.layer.layer_param
        if rec.layer.type == "Input":
            for name, blob in zip(lp.top, rec.tops):
                inputs[name] = torch.rand(*blob.shape, device=device, requires_grad=True)
            continue
        if rec.layer.type not in make:
            raise SystemExit("no torch twin for layer type %s" % rec.layer.type)
        steps.append((make[rec.layer.type](rec.layer, lp), list(lp.bottom), list(lp.top)))

    def run(keep_grads=False):
        blobs = dict(inputs)
        for fn, bottoms, tops in steps:
            out = fn(*(blobs[b] for b in bottoms))
            for name, value in zip(tops, out if isinstance(out, tuple) else (out,)):
                blobs[name] = value
        outputs = [blobs[name] for name in net.output_names]
        torch.autograd.backward(outputs, [torch.ones_like(o) for o in outputs])
        for p in (list(inputs.values()) if keep_grads else params + list(inputs.values())):
            p.grad = None
    run.params = params
    return run


# ---- real Caffe, load time, --help --------------------------------------------------------------
def caffe_ms(path, iterations):
    """Average Forward-Backward of ``caffe time`` (its own backward rules), or None."""
    exe = shutil.which("caffe")
    if exe is None:
        return None
    proc = subprocess.run([exe, "time", "-model", path, "-iterations", str(iterations)],
                          capture_output=True, text=True)
    for line in proc.stderr.splitlines():
        if "Average Forward-Backward:" in line:
            return float(line.split(":")[-1].split()[0])
    return None


LOAD_SCRIPT = """
import sys, time
sys.path.insert(0, %r)
from caffecli.net import Net, TEST
import caffecli.weights, caffecli.layers.convolution, caffecli.layers.inner_product
t = time.perf_counter()
Net(%r, TEST, log=False, weights=%r)
print(time.perf_counter() - t)
"""


def caffenet_weights(directory):
    """CaffeNet deploy's parameters with random values, saved as a .caffemodel (244 MB)."""
    path = os.path.join(directory, "caffenet_random.caffemodel")
    net = Net(NETS["caffenet"], TRAIN, log=False)
    rng = numpy.random.default_rng(0)
    for layer in net.layers:
        for blob in layer.blobs:
            blob.data = rng.standard_normal(blob.shape, dtype=numpy.float32) * 0.01
    net.save(path)
    return path


def load_seconds(weights, reps=5):
    runs = []
    for _ in range(reps):
        out = subprocess.run([sys.executable, "-c", LOAD_SCRIPT % (ROOT, NETS["caffenet"],
                                                                   weights)],
                             capture_output=True, text=True, check=True)
        runs.append(float(out.stdout))
    return statistics.median(runs)


def help_seconds(reps=5):
    exe = shutil.which("caffecli", path=os.path.dirname(sys.executable)) or shutil.which(
        "caffecli")
    cmd = [exe, "--help"] if exe else [sys.executable, "-m", "caffecli", "--help"]
    return median_time(lambda: subprocess.run(cmd, capture_output=True, check=True), reps)


# ---- main ---------------------------------------------------------------------------------------
def layer_pass_by_type(net, running=None):
    """One forward + backward run layer by layer: the seconds spent in each layer type, and
    how much a ``running`` total of seconds (a one-item list some timer adds to) grew in each
    layer type meanwhile, as two Counters."""
    spent, counted = collections.Counter(), collections.Counter()
    running = running or [0.0]
    steps = [(rec, True) for rec in net.records] + [(rec, False) for rec in reversed(net.records)]
    for rec, forward in steps:
        t, before = time.perf_counter(), running[0]
        if forward:
            rec.layer.Forward(rec.bottoms, rec.tops)
        else:
            rec.layer.Backward(rec.tops, [True] * len(rec.bottoms), rec.bottoms)
        spent[rec.layer.type] += time.perf_counter() - t
        counted[rec.layer.type] += running[0] - before
    return spent, counted


def by_layer_type(net, reps=3):
    """Milliseconds of one forward + backward spent in each layer type (medians of ``reps``),
    largest first: where a net's time goes."""
    runs = [layer_pass_by_type(net)[0] for _ in range(reps)]
    kinds = sorted(runs[0], key=lambda k: -runs[0][k])
    return [(k, 1e3 * statistics.median(r[k] for r in runs)) for k in kinds]


def sgd_param(**net):
    """The SGD solver both sides' updates follow: momentum 0.9, L2 weight decay 5e-4."""
    from caffecli.proto import caffe_pb2
    param = caffe_pb2.SolverParameter(base_lr=0.01, momentum=0.9, weight_decay=5e-4,
                                      lr_policy="fixed", type="SGD", display=0)
    for field, value in net.items():
        getattr(param, field).CopyFrom(value)
    return param


def torch_sgd(tensors):
    """torch.optim.SGD over ``tensors`` as ``sgd_param``, its fastest kind (fused, else
    foreach), and that kind; its first step is taken."""
    import torch
    for kind in ("fused", "foreach"):
        try:
            optimizer = torch.optim.SGD(tensors, lr=0.01, momentum=0.9, weight_decay=5e-4,
                                        **{kind: True})
            optimizer.step()
            return optimizer, kind
        except (RuntimeError, TypeError):   # a PyTorch without a fused CPU SGD
            continue
    raise SystemExit("torch.optim.SGD has neither a fused nor a foreach step here")


def iteration_ms(name, rounds, iterations):
    """Milliseconds of one training iteration of bench net ``name`` (medians of alternating
    rounds): caffecli's solver step (ClearParamDiffs, forward-backward, SGD update) against
    PyTorch's forward-backward and SGD step, its gradients then dropped (zero_grad's
    default); and torch's optimizer kind."""
    from caffecli.solvers import get_solver
    net_param = read_net_param(NETS[name])
    net_param.force_backward = True
    solver = get_solver(sgd_param(net_param=net_param))
    for blob in solver.net.input_blobs:
        blob.data[...] = numpy.random.rand(*blob.shape)
    twin = torch_twin(solver.net)
    twin(keep_grads=True)
    optimizer, kind = torch_sgd(twin.params)

    def torch_iteration():
        twin(keep_grads=True)
        optimizer.step()
        optimizer.zero_grad()
    ours, theirs = [], []
    for _ in range(rounds):
        ours.append(median_time(lambda: solver.step(1), iterations, warm=True))
        theirs.append(median_time(torch_iteration, iterations, warm=True))
    return statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3, kind


def update_ms(path, reps=5):
    """Milliseconds of one SGD update (momentum 0.9, L2 weight decay 5e-4) of the parameters of
    the net at ``path``: caffecli's solver update and torch.optim.SGD's step on tensors of the
    same shapes and gradients, its fastest kind (fused, else foreach); the parameter count and
    that kind. caffecli also leaves the update in each diff, as Caffe does: one more array
    written than PyTorch writes."""
    import torch
    from caffecli.solvers import get_solver
    solver = get_solver(sgd_param(net_param=read_net_param(path)))
    tensors = []
    for p in solver.net.learnable_params:
        p.diff[...] = numpy.random.RandomState(0).randn(*p.shape) * 1e-3
        t = torch.from_numpy(p.data.copy()).requires_grad_()
        t.grad = torch.from_numpy(p.diff.copy())
        tensors.append(t)
    optimizer, kind = torch_sgd(tensors)
    ours = median_time(solver.apply_update, reps, warm=True)
    theirs = median_time(optimizer.step, reps, warm=True)
    count = sum(p.count for p in solver.net.learnable_params)
    return ours * 1e3, theirs * 1e3, count, kind


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nets", default="lenet,caffenet,googlenet,resnet50",
                        help="of " + ",".join(NETS) + " (the CIFAR-10 nets at batch 100, "
                        "MobileNet at 4); "
                        "NET:BATCH sets another batch (resnet50:8)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds per net")
    parser.add_argument("--iterations", type=int, default=3, help="timed passes per round")
    parser.add_argument("--by-type", action="store_true",
                        help="also print each net's milliseconds per layer type")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        raise SystemExit("PyTorch is needed for the comparison: pip install torch (CPU wheel)")
    from caffecli import glog
    glog.set_min_level(2)   # the nets' and the solver's set-up lines would bury the table
    kernel_threads = start_kernel_threads()
    model, cores = machine()
    torch.set_num_threads(num_threads())  # as caffecli's: OMP_NUM_THREADS, else the affinity
    rate = sgemm_gflops()
    print("machine: %s, %d cores (OMP_NUM_THREADS=%s); torch %s, %d threads; caffecli's "
          "compiled kernels on %s" % (model, cores, os.environ.get("OMP_NUM_THREADS", "unset"),
                                      torch.__version__, torch.get_num_threads(), kernel_threads))
    print("sgemm rate: %.1f GFLOP/s (2048^3, scipy BLAS); OpenBLAS kernels %s "
          "(OPENBLAS_CORETYPE=%s)" % (rate, blas_kernels(),
                                      os.environ.get("OPENBLAS_CORETYPE", "unset")))
    print("forward-backward, every gradient; ms per iteration, medians of %d rounds x %d"
          % (args.rounds, args.iterations))
    print("%-13s %6s %10s %10s %7s %10s %8s %7s %9s %10s" % (
        "net", "batch", "caffecli", "pytorch", "ratio", "GEMM-only", "x limit", "sgemm",
        "peak MB", "caffe"))
    for spec in args.nets.split(","):
        name, _, size = spec.partition(":")
        if name not in NETS or (size and not size.isdigit()):
            raise SystemExit("no net %r: --nets takes NET or NET:BATCH, NET of %s"
                             % (spec, ",".join(NETS)))
        batch = int(size) if size else BATCH.get(name)
        net = caffecli_net(NETS[name], batch)
        twin = torch_twin(net)
        caffecli_pass(net)
        twin()
        ours, theirs, rates = [], [], []
        for _ in range(args.rounds):
            ours += [median_time(lambda: caffecli_pass(net), args.iterations, warm=True)]
            theirs += [median_time(twin, args.iterations, warm=True)]
            rates += [sgemm_gflops(reps=3)]
        mine, other = statistics.median(ours) * 1e3, statistics.median(theirs) * 1e3
        net_rate = statistics.median(rates)
        limit = 2.0 * gemm_macs(net) / (net_rate * 1e9) * 1e3
        real = None if batch is not None else caffe_ms(NETS[name], args.iterations)
        print("%-13s %6d %10.1f %10.1f %6.2fx %10.1f %7.2fx %7.0f %9.1f %10s" % (
            name, net.input_blobs[0].shape[0], mine, other, mine / other, limit, mine / limit,
            net_rate, peak_alloc_mb(net), "-" if real is None else "%.1f" % real))
        if args.rounds > 1:   # each round's own figures: how far the host's drift moves them
            macs2 = 2.0 * gemm_macs(net)
            print("    by round: ratio %s; x limit %s" % (
                " ".join("%.2f" % (a / b) for a, b in zip(ours, theirs)),
                " ".join("%.2f" % (a / (macs2 / (r * 1e9))) for a, r in zip(ours, rates))))
        if args.by_type:
            print("    " + ", ".join("%s %.0f" % kv for kv in by_layer_type(net) if kv[1] >= 1))
    ours, theirs, count, kind = update_ms(NETS["caffenet"])
    print("SGD update of CaffeNet's %.1fM parameters (momentum, weight decay): caffecli %.1f ms, "
          "pytorch %.1f ms (torch.optim.SGD, %s), %.2fx" % (count / 1e6, ours, theirs, kind,
                                                            ours / theirs))
    if "caffenet" in args.nets.split(","):
        ours, theirs, kind = iteration_ms("caffenet", args.rounds, args.iterations)
        print("training iteration of CaffeNet: caffecli %.1f ms (solver step: ClearParamDiffs, "
              "forward-backward, update), pytorch %.1f ms (forward-backward, SGD %s step, "
              "zero_grad), %.2fx" % (ours, theirs, kind, ours / theirs))
    with tempfile.TemporaryDirectory() as tmp:
        weights = caffenet_weights(tmp)
        print("CaffeNet deploy + %.0f MB weights, build and load: %.3f s (median of 5)"
              % (os.path.getsize(weights) / 1e6, load_seconds(weights)))
    print("caffecli --help: %.3f s (median of 5)" % help_seconds())
    print("ratio = caffecli / pytorch; x limit = caffecli / GEMM-only limit at the sgemm rate "
          "(GFLOP/s) measured in that net's rounds")


if __name__ == "__main__":
    main()
