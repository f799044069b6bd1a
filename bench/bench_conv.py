"""Time caffecli's Convolution and Pooling layers on LeNet and CaffeNet shapes (forward and
backward), next to PyTorch CPU when it is installed.  Usage: python3 bench/bench_conv.py [batch]
"""
import sys
import time

import numpy

sys.path.insert(0, ".")
from caffecli.blob import Blob  # noqa: E402
from caffecli.proto import caffe_pb2  # noqa: E402
from caffecli.proto.io import parse_text  # noqa: E402
from caffecli.registry import create_layer  # noqa: E402

# (name, input shape, conv params: num_output, kernel, stride, pad, group)
LENET = [("lenet.conv1", (64, 1, 28, 28), 20, 5, 1, 0, 1),
         ("lenet.conv2", (64, 20, 12, 12), 50, 5, 1, 0, 1)]
CAFFENET = [("caffenet.conv1", (10, 3, 227, 227), 96, 11, 4, 0, 1),
            ("caffenet.conv2", (10, 96, 27, 27), 256, 5, 1, 2, 2),
            ("caffenet.conv3", (10, 256, 13, 13), 384, 3, 1, 1, 1),
            ("caffenet.conv4", (10, 384, 13, 13), 384, 3, 1, 1, 2),
            ("caffenet.conv5", (10, 384, 13, 13), 256, 3, 1, 1, 2)]


def best(fn, reps):
    fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def bench_caffecli(shape, m, k, s, p, g, reps):
    text = ('name: "c" type: "Convolution" convolution_param { num_output: %d kernel_size: %d '
            'stride: %d pad: %d group: %d weight_filler { type: "gaussian" std: 0.01 } }'
            % (m, k, s, p, g))
    layer = create_layer(parse_text(text, caffe_pb2.LayerParameter()))
    bottom, top = [Blob(shape)], [Blob()]
    bottom[0].data[...] = numpy.random.rand(*shape)
    layer.SetUp(bottom, top)
    top[0].diff[...] = numpy.random.rand(*top[0].shape)
    fwd = best(lambda: layer.Forward(bottom, top), reps)
    bwd = best(lambda: layer.Backward(top, [True], bottom), reps)
    return fwd, bwd


def bench_torch(shape, m, k, s, p, g, reps):
    try:
        import torch
    except ImportError:
        return None
    x = torch.rand(*shape, requires_grad=True)
    conv = torch.nn.Conv2d(shape[1], m, k, stride=s, padding=p, groups=g)
    y = conv(x)
    dy = torch.rand_like(y)

    def fb():
        out = conv(x)
        out.backward(dy)
    fwd = best(lambda: conv(x), reps)
    both = best(fb, reps)
    return fwd, both - fwd


def main():
    batch = int(sys.argv[1]) if len(sys.argv) > 1 else None
    reps = 5
    for name, shape, m, k, s, p, g in LENET + CAFFENET:
        if batch:
            shape = (batch,) + shape[1:]
        f, b = bench_caffecli(shape, m, k, s, p, g, reps)
        line = "%-16s caffecli fwd %7.2f ms bwd %7.2f ms" % (name, f * 1e3, b * 1e3)
        t = bench_torch(shape, m, k, s, p, g, reps)
        if t:
            line += " | torch fwd %7.2f ms bwd %7.2f ms | ratio %.2f" % (
                t[0] * 1e3, t[1] * 1e3, (f + b) / max(t[0] + t[1], 1e-9))
        print(line)


if __name__ == "__main__":
    main()
