"""MAX and AVE pooling kernels on the host: caffecli's compiled loops (kernels/pooling_jit.py)
against its numpy reference (kernels/pooling.py) and PyTorch's max_pool2d / avg_pool2d
(ceil mode, padding counted in AVE as Caffe does), one thread each, on the pools of LeNet,
CaffeNet, GoogLeNet, ResNet-50 and CIFAR-10 quick.

Run by hand from the repository root (PyTorch is optional: without it its column is "-"):

    python bench/bench_pooling.py            # --reps N
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
os.environ.setdefault("OMP_NUM_THREADS", "1")   # one thread: the kernels, not the split
from caffecli.kernels import pooling, pooling_jit  # noqa: E402
from bench_cpu import machine  # noqa: E402
import numpy  # noqa: E402

SHAPES = [  # (name, input shape, kernel, stride, pad)
    ("LeNet pool1", (64, 20, 24, 24), 2, 2, 0),
    ("LeNet pool2", (64, 50, 8, 8), 2, 2, 0),
    ("CaffeNet pool1", (10, 96, 55, 55), 3, 2, 0),
    ("CaffeNet pool2", (10, 256, 27, 27), 3, 2, 0),
    ("ResNet-50 pool1", (1, 64, 112, 112), 3, 2, 1),
    ("GoogLeNet 3x3/1", (32, 192, 28, 28), 3, 1, 1),
    ("GoogLeNet 3x3/2", (32, 480, 14, 14), 3, 2, 0),
    ("CIFAR-10 pool2", (100, 32, 16, 16), 3, 2, 0),
]


def ms(fn, reps):
    fn()
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    return 1e3 * (time.perf_counter() - start) / reps


def torch_pools():
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return torch


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args(argv)
    torch = torch_pools()
    print("machine: %s, %d cores (one thread used); torch %s"
          % (*machine(), torch.__version__ if torch else "absent"))
    print("%-16s %-4s %9s %9s %9s %8s" % ("pool", "kind", "compiled", "numpy", "pytorch",
                                          "ratio"))
    for name, shape, k, s, p in SHAPES:
        geo = pooling.geometry([k, k], [s, s], [p, p], shape[2:])
        x = numpy.random.RandomState(0).rand(*shape).astype(numpy.float32)
        top = numpy.empty(shape[:2] + tuple(geo.out_hw), numpy.float32)
        arg = numpy.empty(top.shape, numpy.int32)
        rows = [("MAX", lambda: pooling_jit.max_pool(x, geo, top, arg),
                 lambda: pooling.max_pool(numpy, x, geo)),
                ("AVE", lambda: pooling_jit.ave_pool(x, geo, top),
                 lambda: pooling.ave_pool(numpy, x, geo))]
        for kind, compiled, reference in rows:
            peer = "-"
            ratio = "-"
            mine = ms(compiled, args.reps)
            if torch is not None:
                t = torch.from_numpy(x)
                pool = (torch.nn.functional.max_pool2d if kind == "MAX" else
                        lambda a, *r, **kw: torch.nn.functional.avg_pool2d(
                            a, *r, count_include_pad=True, **kw))
                theirs = ms(lambda: pool(t, k, s, p, ceil_mode=True), args.reps)
                peer, ratio = "%9.3f" % theirs, "%7.2fx" % (mine / theirs)
            print("%-16s %-4s %9.3f %9.3f %9s %8s" % (name, kind, mine,
                                                     ms(reference, args.reps), peer, ratio))
    print("milliseconds per forward; ratio = compiled / pytorch")


if __name__ == "__main__":
    main()
