"""ReLU on the host as compiled loops (kernels/jit.py): one pass each way, where numpy's
``maximum`` (NaN-aware) runs 3-7x slower than a copy and its backward builds a mask first.

Forward is Caffe's max(x, 0) + negative_slope * min(x, 0), with std::max and std::min as C++
has them (the first argument on a tie or a NaN), so even the sign of a zero is Caffe's: +0 for
a negative x under slope 0, where x * 0 would give -0 (printed '-0' by `caffe test`). Backward
multiplies dy by Caffe's step factor, (x > 0) + negative_slope * (x <= 0) (so an infinite dy
over x <= 0 gives NaN as there). Selects, not branches: the loops vectorize on random signs.
A blob computed in place (top is bottom) takes the kernels over one array: where two
arguments are the same array the compiled loop cannot vectorize.
layers/relu.py keeps the numpy code as the reference and for device arrays. ``sum_forward`` and
``split_backward`` are an Eltwise SUM of two bottoms and the ReLU in place after it, fused
(fusion.py), and ``split_bias_relu`` and ``split_images_first_relu`` a convolution's last pass
over its top with the ReLU after it: the same expressions, so the same bits.
"""
import numpy

from . import jit
from .jit import kernel, prange
from .threads import for_native


def _forward(x, slope, y):
    for i in range(x.size):
        v = x[i]
        y[i] = (0.0 if v < 0 else v) + slope * (0.0 if v > 0 else v)


def _forward_in_place(y, slope):
    for i in range(y.size):
        v = y[i]
        y[i] = (0.0 if v < 0 else v) + slope * (0.0 if v > 0 else v)


def _backward(x, dy, slope, dx):
    for i in range(x.size):
        v = x[i]
        dx[i] = dy[i] * ((v > 0) + (v <= 0) * slope)


def _backward_in_place(x, slope, d):
    for i in range(x.size):
        v = x[i]
        d[i] *= (v > 0) + (v <= 0) * slope


def _sum_forward(a, b, slope, y):
    for i in range(y.size):
        v = a[i] + b[i]
        y[i] = (0.0 if v < 0 else v) + slope * (0.0 if v > 0 else v)


def _split_backward(y, slope, d, da, db):
    for i in range(y.size):
        v = y[i]
        g = d[i] * ((v > 0) + (v <= 0) * slope)
        d[i] = g
        da[i] = g
        db[i] = g


def _bias_relu(y, bias, with_bias, slope, c0, c1):
    n, p = y.shape[0], y.shape[2]
    for i in range(n):
        for ch in range(c0, c1):
            row = y[i, ch]
            if with_bias:
                b = bias[ch]
                for t in range(p):
                    v = row[t] + b
                    row[t] = (0.0 if v < 0 else v) + slope * (0.0 if v > 0 else v)
            else:
                for t in range(p):
                    v = row[t]
                    row[t] = (0.0 if v < 0 else v) + slope * (0.0 if v > 0 else v)


def _images_first_relu(src, bias, with_bias, slope, c0, c1, y):
    n, p = y.shape[0], y.shape[2]
    for ch in range(c0, c1):
        for i in range(n):
            row, source = y[i, ch], src[ch, i]
            if with_bias:
                b = bias[ch]
                for t in range(p):
                    v = source[t] + b
                    row[t] = (0.0 if v < 0 else v) + slope * (0.0 if v > 0 else v)
            else:
                for t in range(p):
                    v = source[t]
                    row[t] = (0.0 if v < 0 else v) + slope * (0.0 if v > 0 else v)


def _forward_parts(bounds, x, slope, y):
    for p in prange(bounds.size - 1):
        a, b = bounds[p], bounds[p + 1]
        _forward(x[a:b], slope, y[a:b])


def _forward_in_place_parts(bounds, y, slope):
    for p in prange(bounds.size - 1):
        _forward_in_place(y[bounds[p]:bounds[p + 1]], slope)


def _backward_parts(bounds, x, dy, slope, dx):
    for p in prange(bounds.size - 1):
        a, b = bounds[p], bounds[p + 1]
        _backward(x[a:b], dy[a:b], slope, dx[a:b])


def _backward_in_place_parts(bounds, x, slope, d):
    for p in prange(bounds.size - 1):
        a, b = bounds[p], bounds[p + 1]
        _backward_in_place(x[a:b], slope, d[a:b])


def forward(x, slope, y=None):
    """y = relu(x) for flat (1-D) arrays, ``slope`` in the data's dtype; into x itself without
    y. Split across numba's threads."""
    if y is None:
        for_native(_forward_in_place_parts, x.size, x.size, x, slope, min_part=jit.PASS_MIN_PART)
    else:
        for_native(_forward_parts, x.size, x.size, x, slope, y, min_part=jit.PASS_MIN_PART)


def backward(x, dy, slope, dx=None):
    """dx = relu'(x) * dy for flat arrays (x: the bottom's data, or the top's where in place);
    into dy itself without dx. Split across numba's threads."""
    if dx is None:
        for_native(_backward_in_place_parts, x.size, x.size, x, slope, dy,
                   min_part=jit.PASS_MIN_PART)
    else:
        for_native(_backward_parts, x.size, x.size, x, dy, slope, dx, min_part=jit.PASS_MIN_PART)


def sum_forward(a, b, slope, y):
    """y = relu(a + b) for flat arrays: Eltwise SUM's forward, then ReLU's in place on y."""
    kernel(_sum_forward)(a, b, slope, y)


def split_backward(y, slope, d, da, db):
    """d = relu'(y) * d in place, copied into da and db: ReLU's backward in place on the
    Eltwise top (y its data, d its diff), then Eltwise SUM's (coefficients 1) to each bottom."""
    kernel(_split_backward)(y, slope, d, da, db)


def _bias_relu_parts(bounds, y, bias, with_bias, slope):
    for p in prange(bounds.size - 1):
        _bias_relu(y, bias, with_bias, slope, bounds[p], bounds[p + 1])


def _images_first_relu_parts(bounds, src, bias, with_bias, slope, y):
    for p in prange(bounds.size - 1):
        _images_first_relu(src, bias, with_bias, slope, bounds[p], bounds[p + 1], y)


def split_bias_relu(y, bias, slope):
    """y (n, C, P) = relu(y + bias) in place (``bias`` None: relu(y)): a convolution's bias and
    the ReLU after it in one pass, the same values as the two; channels split across the
    threads (parts of at least PASS_MIN_PART values: a cheap pass)."""
    for_native(_bias_relu_parts, y.shape[1], y.size, y, _no_bias(y) if bias is None else bias,
               bias is not None, slope, min_part=jit.PASS_MIN_PART)


def split_images_first_relu(src, bias, slope, y):
    """y (n, C, P) = relu(src (C, n, P) + bias) (``bias`` None: no bias): a chunk's product
    moved into place, its bias and the ReLU after it, in one pass; channels split across the
    threads."""
    for_native(_images_first_relu_parts, y.shape[1], y.size, src,
               _no_bias(y) if bias is None else bias, bias is not None, slope, y)


def _no_bias(like):
    return numpy.zeros(0, like.dtype)
