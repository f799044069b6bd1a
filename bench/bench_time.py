"""Forward-backward time of LeNet (batch 64) and CaffeNet (deploy, batch 10): ``caffecli time``
against the same nets in PyTorch, in one run; prints milliseconds and the ratios.

Run by hand from the repository root (PyTorch is not a dependency of caffecli):

    pip install torch==2.13.0        # CPU wheel
    python bench/bench_time.py       # --gpu 0 times both on a GPU; --iterations N; --nets lenet

caffecli is timed through its own command (``python -m caffecli time``), so the numbers are the
ones a user sees in the log ("Average Forward pass" etc.). PyTorch runs the same layers with the
same shapes, forward then backward of every parameter gradient, after one warm-up pass.
"""
import argparse
import os
import re
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(os.path.dirname(ROOT), "shared", "zoo")
NETS = {
    "lenet": (os.path.join(ROOT, "models", "lenet", "lenet.prototxt"), 50),
    "caffenet": (os.path.join(ZOO, "bvlc_reference_caffenet__deploy.prototxt"), 5),
}
AVERAGES = {"forward": "Average Forward pass", "backward": "Average Backward pass",
            "forward_backward": "Average Forward-Backward"}


def caffecli_time(model, iterations, gpu=None):
    """Averages (ms) parsed from ``caffecli time``'s log."""
    cmd = [sys.executable, "-m", "caffecli", "time", "-model", model,
           "-iterations", str(iterations)]
    if gpu is not None:
        cmd += ["-gpu", str(gpu)]
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit("caffecli time failed:\n" + proc.stderr[-3000:])
    out = {}
    for key, label in AVERAGES.items():
        m = re.search(re.escape(label) + r": ([\d.e+-]+) ms", proc.stderr)
        out[key] = float(m.group(1))
    return out


def torch_lenet(nn):
    return nn.Sequential(
        nn.Conv2d(1, 20, 5), nn.MaxPool2d(2, 2), nn.Conv2d(20, 50, 5), nn.MaxPool2d(2, 2),
        nn.Flatten(), nn.Linear(800, 500), nn.ReLU(inplace=True), nn.Linear(500, 10),
        nn.Softmax(dim=1)), (64, 1, 28, 28)


def torch_caffenet(nn):
    return nn.Sequential(
        nn.Conv2d(3, 96, 11, stride=4), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, ceil_mode=True), nn.LocalResponseNorm(5, 1e-4, 0.75),
        nn.Conv2d(96, 256, 5, padding=2, groups=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, ceil_mode=True), nn.LocalResponseNorm(5, 1e-4, 0.75),
        nn.Conv2d(256, 384, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(384, 384, 3, padding=1, groups=2), nn.ReLU(inplace=True),
        nn.Conv2d(384, 256, 3, padding=1, groups=2), nn.ReLU(inplace=True),
        nn.MaxPool2d(3, 2, ceil_mode=True), nn.Flatten(),
        nn.Linear(9216, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, 4096), nn.ReLU(inplace=True), nn.Dropout(0.5),
        nn.Linear(4096, 1000), nn.Softmax(dim=1)), (10, 3, 227, 227)


def torch_time(name, iterations, gpu=None):
    """Average forward, backward and forward-backward ms of the PyTorch twin of ``name``."""
    import torch
    from torch import nn
    device = torch.device("cuda:%d" % gpu) if gpu is not None else torch.device("cpu")
    model, shape = {"lenet": torch_lenet, "caffenet": torch_caffenet}[name](nn)
    model = model.to(device).train()
    x = torch.randn(*shape, device=device)

    def sync():
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    def one():
        sync()
        t0 = time.perf_counter()
        y = model(x)
        sync()
        t1 = time.perf_counter()
        y.backward(torch.ones_like(y))
        sync()
        t2 = time.perf_counter()
        return t1 - t0, t2 - t1, t2 - t0

    one()  # warm-up, as caffe time's untimed first pass
    runs = [one() for _ in range(iterations)]
    return {k: 1000 * sum(r[i] for r in runs) / iterations
            for i, k in enumerate(("forward", "backward", "forward_backward"))}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nets", default="lenet,caffenet", help="comma-separated: lenet,caffenet")
    parser.add_argument("--iterations", type=int, default=None,
                        help="timed iterations per net (default: lenet 50, caffenet 5)")
    parser.add_argument("--gpu", type=int, default=None, help="time on this GPU (both sides)")
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        raise SystemExit("PyTorch is needed for the comparison: pip install torch==2.13.0")
    where = "GPU %d" % args.gpu if args.gpu is not None else \
        "CPU, %d torch threads" % torch.get_num_threads()
    print("caffecli time vs PyTorch %s (%s); milliseconds per iteration" % (
        torch.__version__, where))
    print("%-9s %-17s %10s %10s %8s" % ("net", "pass", "caffecli", "pytorch", "ratio"))
    for name in args.nets.split(","):
        model, default_iters = NETS[name]
        iters = args.iterations or default_iters
        ours = caffecli_time(model, iters, args.gpu)
        theirs = torch_time(name, iters, args.gpu)
        for key in ("forward", "backward", "forward_backward"):
            ratio = ours[key] / theirs[key] if theirs[key] else float("inf")
            print("%-9s %-17s %10.2f %10.2f %7.2fx" % (name, key, ours[key], theirs[key], ratio))
    print("ratio = caffecli / pytorch (above 1: caffecli is slower)")


if __name__ == "__main__":
    main()
