"""Per-layer forward/backward time of LRN, Deconvolution, BatchNorm+Scale and LSTM (with conv,
pool and InnerProduct as glue): ``caffecli time`` against the same layers in PyTorch CPU.

Run by hand from the repository root (PyTorch is not a dependency of caffecli):

    python bench/bench_layers.py                 # --iterations N, --batch N

caffecli is timed by caffecli.cli.time.run_time (what ``caffecli time`` runs) and the per-layer
lines of its log are parsed. PyTorch times each twin module alone on an input of the same shape:
forward, then backward with a random top gradient (input and parameter gradients), after one
warm-up pass, with the objects alive at the start frozen out of garbage collection (see
main). Both sides use every core (torch.set_num_threads(os.cpu_count()); numpy's BLAS
uses its default, all cores). Caffe's LSTM orders its gates i, f, o, g and has one bias; torch's
is i, f, g, o with two biases: the work is the same, only the timing is compared. LRN
ACROSS_CHANNELS divides alpha by local_size in both.
"""
import argparse
import gc
import io
import os
import re
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# The sequence: pool3's 16x32x8x8 features reshaped to T=16 x N=16 x D=128 (Caffe has no
# Permute, so the reshape relabels memory; only the shapes matter for timing).
NET = '''
name: "bench_layers"
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: %(n)d dim: 3
        dim: 64 dim: 64 } } }
layer { name: "cont" type: "DummyData" top: "cont" dummy_data_param {
        shape { dim: 16 dim: 16 } data_filler { type: "constant" value: 1 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" convolution_param {
        num_output: 32 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "lrn1" type: "LRN" bottom: "conv1" top: "lrn1"
        lrn_param { local_size: 5 alpha: 0.0001 beta: 0.75 } }
layer { name: "pool1" type: "Pooling" bottom: "lrn1" top: "pool1"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2" convolution_param {
        num_output: 64 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.05 } } }
layer { name: "bn2" type: "BatchNorm" bottom: "conv2" top: "bn2" }
layer { name: "scale2" type: "Scale" bottom: "bn2" top: "scale2" scale_param { bias_term: true } }
layer { name: "relu2" type: "ReLU" bottom: "scale2" top: "scale2" }
layer { name: "pool2" type: "Pooling" bottom: "scale2" top: "pool2"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "deconv3" type: "Deconvolution" bottom: "pool2" top: "deconv3" convolution_param {
        num_output: 32 kernel_size: 4 stride: 2 pad: 1
        weight_filler { type: "gaussian" std: 0.05 } } }
layer { name: "pool3" type: "Pooling" bottom: "deconv3" top: "pool3"
        pooling_param { pool: AVE kernel_size: 4 stride: 4 } }
layer { name: "seq" type: "Reshape" bottom: "pool3" top: "seq"
        reshape_param { shape { dim: 16 dim: 16 dim: -1 } } }
layer { name: "lstm4" type: "LSTM" bottom: "seq" bottom: "cont" top: "lstm4" recurrent_param {
        num_output: 256 weight_filler { type: "uniform" min: -0.05 max: 0.05 } } }
layer { name: "ip5" type: "InnerProduct" bottom: "lstm4" top: "ip5" inner_product_param {
        num_output: 10 axis: 2 weight_filler { type: "gaussian" std: 0.05 } } }
layer { name: "loss" type: "Reduction" bottom: "ip5" top: "loss"
        reduction_param { operation: SUMSQ } loss_weight: 1 }
'''

# caffecli layer names -> the row they are reported in (BatchNorm and Scale are one torch module)
ROWS = [("conv1", ["conv1"]), ("lrn1 LRN", ["lrn1"]), ("pool1", ["pool1"]), ("conv2", ["conv2"]),
        ("bn2+scale2 BatchNorm", ["bn2", "scale2"]), ("relu2", ["relu2"]),
        ("pool2", ["pool2"]), ("deconv3 Deconvolution", ["deconv3"]), ("pool3", ["pool3"]),
        ("lstm4 LSTM", ["lstm4"]), ("ip5", ["ip5"])]


def caffecli_layer_times(batch, iterations):
    """{layer name: (forward ms, backward ms)} from run_time's per-layer log lines."""
    from caffecli import glog
    from caffecli.cli.time import run_time
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "net.prototxt")
        with open(model, "w") as f:
            f.write(NET % {"n": batch})
        log = io.StringIO()
        glog.set_stream(log)
        try:
            total = run_time(model, iterations)
        finally:
            glog.set_stream(None)
    times = {}
    for m in re.finditer(r"\]\s+(\S+)\s+(forward|backward): ([\d.e+-]+) ms\.", log.getvalue()):
        times.setdefault(m.group(1), {})[m.group(2)] = float(m.group(3))
    return {k: (v["forward"], v["backward"]) for k, v in times.items()}, total


def torch_layer_times(batch, iterations):
    """{row: (forward ms, backward ms)} for each twin module alone."""
    import torch
    from torch import nn
    torch.manual_seed(0)
    n = batch
    twins = {
        "conv1": (nn.Conv2d(3, 32, 3, padding=1), (n, 3, 64, 64)),
        "lrn1 LRN": (nn.LocalResponseNorm(5, 1e-4, 0.75, 1.0), (n, 32, 64, 64)),
        "pool1": (nn.MaxPool2d(2, 2), (n, 32, 64, 64)),
        "conv2": (nn.Conv2d(32, 64, 3, padding=1), (n, 32, 32, 32)),
        "bn2+scale2 BatchNorm": (nn.BatchNorm2d(64), (n, 64, 32, 32)),
        "relu2": (nn.ReLU(), (n, 64, 32, 32)),
        "pool2": (nn.MaxPool2d(2, 2), (n, 64, 32, 32)),
        "deconv3 Deconvolution": (nn.ConvTranspose2d(64, 32, 4, stride=2, padding=1),
                                  (n, 64, 16, 16)),
        "pool3": (nn.AvgPool2d(4, 4), (n, 32, 32, 32)),
        "lstm4 LSTM": (nn.LSTM(128, 256), (16, 16, 128)),
        "ip5": (nn.Linear(256, 10), (16, 16, 256)),
    }
    out = {}
    for row, (module, shape) in twins.items():
        module.train()
        x = torch.randn(*shape, requires_grad=True)

        y = module(x)  # warm-up; fixes the top gradient's shape
        dy = torch.randn_like(y[0] if isinstance(y, tuple) else y)
        (y[0] if isinstance(y, tuple) else y).backward(dy)

        def one():
            t0 = time.perf_counter()
            y = module(x)
            y = y[0] if isinstance(y, tuple) else y
            t1 = time.perf_counter()
            y.backward(dy)
            t2 = time.perf_counter()
            return t1 - t0, t2 - t1
        runs = [one() for _ in range(iterations)]
        out[row] = tuple(1000 * sum(r[i] for r in runs) / iterations for i in (0, 1))
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--batch", type=int, default=16)
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        raise SystemExit("PyTorch is needed for the comparison: pip install torch==2.13.0")
    torch.set_num_threads(os.cpu_count())
    # torch's import leaves ~150K objects to Python's collector; a collection then lands, at
    # the same allocation every iteration, inside one caffecli layer's timing (+4 ms there)
    gc.collect()
    gc.freeze()
    ours, total = caffecli_layer_times(args.batch, args.iterations)
    theirs = torch_layer_times(args.batch, args.iterations)
    print("batch %d, 3x64x64 input, %d iterations; CPU, %d cores, torch %s with %d threads; "
          "milliseconds per iteration" % (args.batch, args.iterations, os.cpu_count(),
                                          torch.__version__, torch.get_num_threads()))
    print("%-22s %10s %10s %10s %10s %7s" % ("layer", "ours fwd", "ours bwd", "torch fwd",
                                             "torch bwd", "ratio"))
    for row, names in ROWS:
        f = sum(ours[k][0] for k in names)
        b = sum(ours[k][1] for k in names)
        tf, tb = theirs[row]
        print("%-22s %10.2f %10.2f %10.2f %10.2f %6.2fx" % (row, f, b, tf, tb,
                                                           (f + b) / (tf + tb)))
    print("caffecli whole net: forward %.1f ms, backward %.1f ms (run_time averages)"
          % (total["forward"], total["backward"]))
    print("ratio = caffecli (fwd + bwd) / torch (fwd + bwd); above 1: caffecli is slower")


if __name__ == "__main__":
    main()
