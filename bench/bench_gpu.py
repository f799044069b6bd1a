"""caffecli on one GPU against PyTorch on the same card, in one run: forward-backward of LeNet
(batch 64), CaffeNet (128, 256) and GoogLeNet (32), and the MNIST demo's training throughput.

Run by hand from the repository root on a machine with an NVIDIA GPU (PyTorch with CUDA and
cupy installed; neither is a dependency of caffecli's core):

    python bench/bench_gpu.py                # --gpu 0 --nets lenet:64,caffenet:128 --rounds 5

Both sides run the same layers with the same shapes (PyTorch's twin is built from caffecli's own
layer records, as in bench_cpu.py), TRAIN phase, every gradient including the inputs', after
warm-up passes; every timed pass ends with a device synchronize. PyTorch is timed twice: strict
FP32 (TF32 off for cuDNN and matmul: the arithmetic caffecli does) and with its defaults.
caffecli is timed eagerly with its default engines (Convolution and Deconvolution on cuDNN's
graphs through nvidia-cudnn-frontend, kernels/cudnn_engines.py; a line above the table says
when the frontend is missing), in the "graph" column the same through Net.forward_backward with
CAFFECLI_CUDA_GRAPHS=1 (the pass captured once as a CUDA graph and replayed), and in the "caffe
eng" column eagerly with CAFFECLI_CUDNN=0 (caffecli's own device code only). The demo rows
train models/lenet/lenet_solver.prototxt (eagerly, then with graphs) on the LMDBs ``make demo``
writes (data/mnist) for ``--demo-iterations`` and projects the 10,000 iterations of the solver.
``CAFFECLI_STANDIN_GPU=1 python bench/bench_gpu.py --torch-device cpu`` runs the whole script
without a GPU (a smoke test of the script, not a measurement). ``CAFFECLI_DEVICE_KERNELS=0``
times caffecli without its device kernels (kernels/cuda/: the array code instead), to see what
they gain.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_cpu  # noqa: E402  (puts the checkout on sys.path)
from caffecli import backend, context, engines, glog  # noqa: E402

ROOT = bench_cpu.ROOT
DEFAULT_NETS = "lenet:64,caffenet:128,caffenet:256,googlenet:32"


def timed_ms(step, sync, warmup, reps):
    """Median milliseconds of ``step`` (each pass synchronized) after ``warmup`` passes."""
    for _ in range(warmup):
        step()
    sync()
    return 1000 * bench_cpu.median_time(lambda: (step(), sync()), reps)


def with_graphs(on):
    os.environ["CAFFECLI_CUDA_GRAPHS"] = "1" if on else "0"


def with_cudnn(on):
    os.environ["CAFFECLI_CUDNN"] = "1" if on else "0"


def caffecli_ms(name, batch, gpu, warmup, reps, graphs=False, cudnn=True):
    """Eager passes, or with ``graphs`` Net.forward_backward's captured graph replayed; without
    ``cudnn`` on caffecli's own device code only."""
    saved = os.environ.get("CAFFECLI_CUDNN")
    with_cudnn(cudnn)
    context.set_mode_cpu()
    net = bench_cpu.caffecli_net(bench_cpu.NETS[name], batch)
    context.set_device(gpu)
    context.set_mode_gpu()
    with_graphs(graphs)
    step = net.forward_backward if graphs else (lambda: bench_cpu.caffecli_pass(net))
    try:
        return timed_ms(step, backend.synchronize, max(warmup, 3), reps)
    finally:
        with_graphs(False)
        if saved is None:
            os.environ.pop("CAFFECLI_CUDNN")
        else:
            os.environ["CAFFECLI_CUDNN"] = saved
        context.set_mode_cpu()


def torch_ms(name, batch, device, warmup, reps, strict):
    import torch
    saved = (torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
    if strict:
        torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    try:
        run = bench_cpu.torch_twin(bench_cpu.caffecli_net(bench_cpu.NETS[name], batch), device)
        sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        return timed_ms(run, sync, warmup, reps)
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved


def demo_throughput(gpu, iterations, graphs=False):
    """Iterations per second of the MNIST demo's solver on the GPU (its forward-backward as a
    CUDA graph with ``graphs``), or None without its data."""
    from caffecli.proto.io import read_net_param, read_solver_param
    from caffecli.solvers import get_solver
    solver_file = os.path.join(ROOT, "models", "lenet", "lenet_solver.prototxt")
    param = read_solver_param(solver_file)
    net = read_net_param(os.path.join(ROOT, param.net))
    for lp in net.layer:
        if lp.type == "Data":
            lp.data_param.source = os.path.join(ROOT, lp.data_param.source)
            if not os.path.isdir(lp.data_param.source):
                return None
    param.ClearField("net")
    param.net_param.CopyFrom(net)
    param.max_iter, param.display, param.test_interval = iterations, 0, iterations + 1
    param.snapshot, param.snapshot_after_train = 0, False
    param.test_initialization = False
    glog.set_flags(min_level=1)                        # the table, not the solver's log
    param.solver_mode = param.GPU
    param.device_id = gpu
    solver = get_solver(param)
    context.set_device(gpu)
    context.set_mode_gpu()
    with_graphs(graphs)
    try:
        solver.step(20)                                   # warm-up: allocations, first copies
        backend.synchronize()
        t = time.perf_counter()
        solver.step(iterations - 20)
        backend.synchronize()
        return (iterations - 20) / (time.perf_counter() - t)
    finally:
        with_graphs(False)
        context.set_mode_cpu()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--nets", default=DEFAULT_NETS, help="name:batch,... (%s)" % DEFAULT_NETS)
    parser.add_argument("--rounds", type=int, default=20, help="timed passes per net and side")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--demo-iterations", type=int, default=1000)
    parser.add_argument("--torch-device", default=None, help="default: cuda:<gpu>")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        raise SystemExit("PyTorch is needed for the comparison: pip install torch")
    reason = backend.unavailable_reason(args.gpu)
    if reason:
        raise SystemExit("caffecli cannot use GPU %d: %s" % (args.gpu, reason))
    device = args.torch_device or "cuda:%d" % args.gpu
    props = backend.device_properties(args.gpu)
    name = props.get("name", b"?")
    print("device: %s (GPU %d); torch %s on %s; %s" % (
        name.decode() if isinstance(name, bytes) else name, args.gpu, torch.__version__, device,
        ", ".join("%s %s" % kv for kv in backend.software_versions())))
    print("cuDNN engines: %s" % (engines.cudnn_missing() or "on (nvidia-cudnn-frontend)"))
    print("forward-backward, every gradient, FP32; ms per iteration, medians of %d"
          % args.rounds)
    print("%-10s %6s %10s %12s %7s %12s %7s %10s %7s %10s %7s" % (
        "net", "batch", "caffecli", "torch fp32", "ratio", "torch dflt", "ratio", "graph",
        "ratio", "caffe eng", "ratio"))
    for item in args.nets.split(","):
        net, batch = item.split(":")
        batch = int(batch)
        ours = caffecli_ms(net, batch, args.gpu, args.warmup, args.rounds)
        graphed = caffecli_ms(net, batch, args.gpu, args.warmup, args.rounds, graphs=True)
        own = caffecli_ms(net, batch, args.gpu, args.warmup, args.rounds, cudnn=False)
        strict = torch_ms(net, batch, device, args.warmup, args.rounds, strict=True)
        default = torch_ms(net, batch, device, args.warmup, args.rounds, strict=False)
        print("%-10s %6d %10.2f %12.2f %6.2fx %12.2f %6.2fx %10.2f %6.2fx %10.2f %6.2fx" % (
            net, batch, ours, strict, ours / strict, default, ours / default, graphed,
            graphed / strict, own, own / strict))
    for graphs in (False, True):
        rate = demo_throughput(args.gpu, args.demo_iterations, graphs)
        if rate is None:
            print("MNIST demo: skipped (no data/mnist LMDBs: run make demo first)")
            break
        print("MNIST demo (LeNet, batch 64, SGD%s): %.0f iterations/s; 10,000 iterations ~ "
              "%.1f s" % (", CUDA graph" if graphs else "", rate, 10000 / rate))
    print("ratio = caffecli / pytorch (above 1: caffecli is slower); the graph's and caffe "
          "eng's ratios are against strict FP32")


if __name__ == "__main__":
    main()
