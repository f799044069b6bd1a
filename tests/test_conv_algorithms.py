"""Convolution and Deconvolution on seeded random geometries (1-3 spatial axes, groups, strides,
pads, dilations, several bottoms), each with a random setting of the limits by which the layers
choose their algorithm (Winograd, image by image, the input gradient by image or by output
position, batched columns in chunks, wide grids one image a chunk, 1x1 as plain products),
against a direct sum over the kernel's offsets: forward, input, weight and bias gradients.
Depthwise layers (one input channel a group) plane by plane too."""
import itertools
import random

import numpy
import pytest
from google.protobuf import text_format

from caffecli.blob import Blob
from caffecli.layers import _base_conv, convolution
from caffecli.layers.convolution import ConvolutionLayer
from caffecli.layers.deconvolution import DeconvolutionLayer
from caffecli.proto import caffe_pb2

pytestmark = pytest.mark.devices  # the GPU mode runs its own algorithms on the same cases

CP = caffe_pb2.ConvolutionParameter
SEED = 20261128
CASES = 160
# each limit's default first, then values that force an algorithm on or off
LIMITS = {
    (convolution, "WINOGRAD_MIN_TILES"): [64, 1, 1 << 40],
    (convolution, "WINOGRAD_MIN_CHANNELS"): [16, 1],
    (convolution, "WINOGRAD_MAX_OVERHANG"): [1.2, 1 << 40],
    (_base_conv, "IMAGE_MAX_INNER"): [128, 0, 1 << 40],
    (_base_conv, "IMAGE_MAX_COLUMNS"): [1 << 17, 1 << 40],
    (_base_conv, "COL_CHUNK_ELEMENTS"): [1 << 25, 1, 200, 5000],
    (convolution, "DOWN_MAX_MACS"): [1 << 24, 0, 1 << 40],
    (convolution, "DOWN_MAX_FILTER_BYTES"): [1 << 18, 0, 1 << 40],
    (convolution, "NARROW_MAX_ROWS"): [32, 1 << 40],
    (convolution, "NARROW_MAX_COLUMNS"): [1 << 22, 0],
    (convolution, "POSITION_MIN_CHANNELS"): [8, 1, 1 << 40],
    (convolution, "POSITION_MAX_PLANE"): [1 << 16, 0, 1 << 40],
    (convolution, "BY_IMAGE_MIN_GRID"): [2048, 1, 1 << 40],
    (convolution, "BY_IMAGE_MIN_GRID_WIDE"): [512, 1],
    (convolution, "BY_IMAGE_MIN_ROWS"): [128, 1],
    (convolution, "DEPTHWISE_MIN_GROUPS"): [2, 1, 1 << 40],
}


def offsets(kernel):
    return itertools.product(*[range(k) for k in kernel])


def window(offset, dilation, stride, out):
    """The input positions that kernel ``offset`` meets, one per output position (padded)."""
    return tuple(slice(o * d, o * d + s * (n - 1) + 1, s)
                 for o, d, s, n in zip(offset, dilation, stride, out))


def padded(x, pad):
    out = numpy.zeros(x.shape[:2] + tuple(s + 2 * p for s, p in zip(x.shape[2:], pad)))
    out[(Ellipsis,) + tuple(slice(p, p + s) for s, p in zip(x.shape[2:], pad))] = x
    return out


def direct(x, w, g, stride, pad, dilation, out, dy=None):
    """y = x convolved with w (K, C/g, *kernel), or with ``dy`` (n, K, *out) the input and
    weight gradients (dx, dw), each as a sum over the kernel's offsets in float64."""
    xp = padded(x, pad)
    c, k = x.shape[1] // g, w.shape[0] // g
    y = numpy.zeros((x.shape[0], w.shape[0]) + tuple(out))
    dxp, dw = numpy.zeros_like(xp), numpy.zeros(w.shape)
    spatial = list(range(2, 2 + len(out)))
    for o in offsets(w.shape[2:]):
        at = (slice(None), slice(None)) + window(o, dilation, stride, out)
        for j in range(g):
            part = (slice(None), slice(j * c, j * c + c)) + at[2:]
            taps = w[(slice(j * k, j * k + k), slice(None)) + o]
            if dy is None:
                y[:, j * k:j * k + k] += numpy.tensordot(xp[part], taps, ([1], [1])).transpose(
                    [0, len(out) + 1] + [a - 1 for a in spatial])
                continue
            grad = dy[:, j * k:j * k + k]
            dw[(slice(j * k, j * k + k), slice(None)) + o] += numpy.tensordot(
                grad, xp[part], ([0] + spatial, [0] + spatial))
            dxp[part] += numpy.tensordot(grad, taps, ([1], [0])).transpose(
                [0, len(out) + 1] + [a - 1 for a in spatial])
    if dy is None:
        return y
    crop = (Ellipsis,) + tuple(slice(p, p + s) for s, p in zip(x.shape[2:], pad))
    return dxp[crop], dw


def expected(kind, x, w, b, dy, geometry, out):
    """(y, dx, dw, db) of one bottom; a Deconvolution's forward is the input gradient of the
    convolution from its top's shape back to its bottom's, with the same weights."""
    g, stride, pad, dilation = geometry
    if kind == "Convolution":
        y = direct(x, w, g, stride, pad, dilation, out)
        dx, dw = direct(x, w, g, stride, pad, dilation, out, dy)
    else:
        y = direct(numpy.zeros(dy.shape), w, g, stride, pad, dilation, x.shape[2:], x)[0]
        dx = direct(dy, w, g, stride, pad, dilation, x.shape[2:])
        dw = direct(dy, w, g, stride, pad, dilation, x.shape[2:], x)[1]
    if b is not None:
        y = y + b.reshape((1, -1) + (1,) * (y.ndim - 2))
    return y, dx, dw, dy.sum(axis=(0,) + tuple(range(2, dy.ndim)))


def draw(case):
    """A case's layer parameter, bottom shape, bottom count, limits, dtype and output shape:
    the first geometry drawn from the case's seed whose output is not empty."""
    r = random.Random(SEED + case)
    while True:
        found = _draw(r)
        if found is not None:
            return found


def _draw(r):
    """One draw from ``r``: draw's tuple, or None where the output would be empty."""
    nd = r.choice([2, 2, 2, 2, 1, 3])
    kind = r.choice(["Convolution"] * 3 + ["Deconvolution"])
    g = r.choice([1, 1, 2, 3])
    channels, num_output = g * r.choice([1, 2, 3, 8, 16, 17]), g * r.choice([1, 2, 5, 16, 20])
    kernel = [r.choice([1, 1, 2, 3, 3, 3, 5]) for _ in range(nd)]
    stride = [r.choice([1, 1, 1, 2, 3]) for _ in range(nd)] if r.random() < 0.5 else [1] * nd
    pad = [r.choice([0, 0, 1, 2, 3]) for _ in range(nd)]
    dilation = [r.choice([1, 1, 1, 2]) for _ in range(nd)]
    family = r.choice(["any"] * 5 + ["3x3"] * 3 + ["1x1"] * 2)   # Winograd's and 1x1's shapes
    if family != "any":
        kernel = [3 if family == "3x3" else 1] * nd
        stride, dilation = [1] * nd, [1] * nd
        pad = [r.choice([0, 1, 2]) for _ in range(nd)] if family == "3x3" else [0] * nd
    size = [r.randint(1, 14 if nd < 3 else 6) for _ in range(nd)]
    shape = (r.choice([1, 1, 2, 3, 5, 8]), channels) + tuple(size)
    extent = [d * (k - 1) + 1 for d, k in zip(dilation, kernel)]
    if kind == "Convolution":
        out = [(s + 2 * p - e) // t + 1 for s, p, e, t in zip(size, pad, extent, stride)]
    else:
        out = [t * (s - 1) + e - 2 * p for s, p, e, t in zip(size, pad, extent, stride)]
    if min(out) < 1:
        return None
    lp = caffe_pb2.LayerParameter(name="conv", type=kind)
    p = lp.convolution_param
    p.num_output, p.group, p.bias_term = num_output, g, r.random() < 0.8
    p.engine = r.choice([CP.DEFAULT, CP.DEFAULT, CP.CAFFE])
    if nd == 2 and r.random() < 0.5:
        p.kernel_h, p.kernel_w = kernel
        p.stride_h, p.stride_w = stride
        p.pad_h, p.pad_w = pad
        p.dilation.extend(dilation)
    else:
        for field, values in ((p.kernel_size, kernel), (p.stride, stride), (p.pad, pad),
                              (p.dilation, dilation)):
            field.extend(values[:1] if len(set(values)) == 1 else values)
    limits = {key: r.choice(values) for key, values in LIMITS.items()}
    dtype = r.choice([numpy.float64, numpy.float64, numpy.float32])
    return lp, shape, r.choice([1, 1, 2]), limits, dtype, out


def build(lp, shape, bottoms, limits, dtype, monkeypatch):
    for (module, name), value in limits.items():
        monkeypatch.setattr(module, name, value)
    layer = (ConvolutionLayer if lp.type == "Convolution" else DeconvolutionLayer)(lp)
    bottom = [Blob(shape, dtype) for _ in range(bottoms)]
    top = [Blob((1,), dtype) for _ in range(bottoms)]
    layer.SetUp(bottom, top)
    return layer, bottom, top


def run(layer, bottom, top, seed):
    """Forward and backward on seeded values (the parameters' diffs from zero); the top
    gradients."""
    rs = numpy.random.RandomState(seed)
    for b in bottom:
        b.data[...] = rs.randn(*b.shape)
    for blob in layer.blobs:
        blob.data[...] = rs.randn(*blob.shape)
        blob.diff[...] = 0
    layer.Forward(bottom, top)
    grads = [rs.randn(*t.shape) for t in top]
    for t, dy in zip(top, grads):
        t.diff[...] = dy
    layer.Backward(top, [True] * len(bottom), bottom)
    return grads


def assert_direct_sums(layer, bottom, top, grads, rel):
    """The layer's top, bottom diffs and parameter diffs after ``run`` against ``expected``."""
    w = layer.blobs[0].data.astype(numpy.float64)
    b = layer.blobs[1].data.astype(numpy.float64) if layer.bias_term else None
    geometry = (layer.group, layer.stride, layer.pad, layer.dilation)
    out = top[0].shape[layer.channel_axis + 1:]   # a Convolution's output grid
    dw_total, db_total = 0, 0
    for blob, t, dy in zip(bottom, top, grads):
        y, dx, dw, db = expected(layer.type, blob.data.astype(numpy.float64), w, b, dy,
                                 geometry, out)
        assert_near(t.data, y, rel, "top")
        assert_near(blob.diff, dx, rel, "bottom diff")
        dw_total, db_total = dw_total + dw, db_total + db
    assert_near(layer.blobs[0].diff, dw_total, rel, "weight diff")
    if layer.bias_term:
        assert_near(layer.blobs[1].diff, db_total, rel, "bias diff")


@pytest.mark.parametrize("case", range(CASES))
def test_every_algorithm_computes_the_direct_sums(case, device_mode, monkeypatch):
    lp, shape, bottoms, limits, dtype, out = draw(case)
    layer, bottom, top = build(lp, shape, bottoms, limits, dtype, monkeypatch)
    grads = run(layer, bottom, top, case)
    assert_direct_sums(layer, bottom, top, grads, 1e-10 if dtype == numpy.float64 else 2e-5)


def assert_near(got, want, rel, what):
    scale = max(1.0, float(numpy.abs(want).max()))
    err = float(numpy.abs(got - want).max())
    assert got.shape == want.shape and err <= rel * scale, "%s: off by %g of %g" % (
        what, err, scale)


def test_the_cases_take_every_algorithm(monkeypatch):
    """The seeded cases reach each CPU algorithm at least once, so none goes untested."""
    taken = set()
    for case in range(CASES):
        with monkeypatch.context() as m:
            layer = build(*draw(case)[:5], m)[0]
        chunked = layer.chunk < layer.num
        for name in ("winograd", "by_image", "down_by_image", "by_position", "pointwise",
                     "wide_by_image", "depthwise"):
            if getattr(layer, name, False):
                taken.add(name + (" in chunks" if chunked else ""))
        taken.add(("columns", layer.type, "in chunks" if chunked else "whole"))
    want = {"winograd", "winograd in chunks", "by_image", "down_by_image", "by_position",
            "pointwise", "pointwise in chunks", "wide_by_image in chunks", "depthwise",
            ("columns", "Convolution", "whole"),
            ("columns", "Convolution", "in chunks"), ("columns", "Deconvolution", "whole"),
            ("columns", "Deconvolution", "in chunks")}
    assert want <= taken, sorted(want - taken, key=str)


@pytest.mark.parametrize("spec,shape,wide", [
    ("num_output: 96 kernel_size: 11 stride: 4", (2, 3, 227, 227), True),   # CaffeNet's conv1
    ("num_output: 256 kernel_size: 5 pad: 2 group: 2", (2, 96, 27, 27), True),   # its conv2
    ("num_output: 64 kernel_size: 1", (2, 64, 56, 56), True),      # ResNet-50's res2 1x1s
    ("num_output: 128 kernel_size: 1", (2, 512, 28, 28), True),    # and res3's
    ("num_output: 128 kernel_size: 1", (2, 256, 28, 28), False),   # GoogLeNet's inception_3b
    ("num_output: 96 kernel_size: 5 pad: 2", (2, 32, 28, 28), False),
    ("num_output: 256 kernel_size: 1", (2, 1024, 14, 14), False),  # ResNet-50's res4
])
def test_wide_grids_run_one_image_a_chunk(spec, shape, wide):
    """A Convolution whose one image's products are wide (a grid of 2048 positions, or of 512
    with filters of 128 rows and 65536 values a group) runs them image by image, a chunk of one;
    narrower ones keep a chunk of the whole batch."""
    lp = caffe_pb2.LayerParameter(name="conv", type="Convolution")
    text_format.Merge(spec, lp.convolution_param)
    layer = ConvolutionLayer(lp)
    layer.SetUp([Blob(shape, numpy.float32)], [Blob((1,), numpy.float32)])
    assert not (layer.winograd or layer.by_image)
    assert layer.wide_by_image == wide and layer.chunk == (1 if wide else 2)
