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


def _prelu(x, slope, zero, c0, c1, y):
    """prelu_layer.cpp: std::max(x, 0) + slope[c] * std::min(x, 0) for channels c0..c1 of x
    (n, C, P); ``slope`` (C,) or (1,) shared."""
    shared = slope.size == 1
    for i in range(x.shape[0]):
        for c in range(c0, c1):
            s = slope[0] if shared else slope[c]
            row, out = x[i, c], y[i, c]
            for t in range(row.size):
                v = row[t]
                out[t] = (zero if v < zero else v) + s * (zero if zero < v else v)


def _prelu_backward(x, dy, slope, zero, one, c0, c1, slope_diff, dx, want_slope, want_input):
    """For channels c0..c1 of (n, C, P) arrays: slope_diff[c] += dy * x * (x <= 0), one value
    after another in Caffe's order (its CPU loop), and dx = dy * ((x > 0) + slope[c] * (x <=
    0)); ``want_slope`` only for a slope per channel (a shared one's sum is
    ``_shared_slope_sum``'s)."""
    shared = slope.size == 1
    for c in range(c0, c1):
        s = slope[0] if shared else slope[c]
        total = slope_diff[c] if want_slope else zero
        for i in range(x.shape[0]):
            row, grad = x[i, c], dy[i, c]
            if want_slope:
                for t in range(row.size):
                    v = row[t]
                    total += grad[t] * v * (one if v <= zero else zero)
            if want_input:
                out = dx[i, c]
                for t in range(row.size):
                    v = row[t]
                    out[t] = grad[t] * ((one if v > zero else zero)
                                        + s * (one if v <= zero else zero))
        if want_slope:
            slope_diff[c] = total


def _shared_slope_sum(x, dy, zero, one, slope_diff):
    """slope_diff[0] += dy * x * (x <= 0) over flat arrays, one value after another."""
    total = slope_diff[0]
    for t in range(x.size):
        v = x[t]
        total += dy[t] * v * (one if v <= zero else zero)
    slope_diff[0] = total


def _prelu_parts(bounds, x, slope, zero, y):
    for p in prange(bounds.size - 1):
        _prelu(x, slope, zero, bounds[p], bounds[p + 1], y)


def _prelu_backward_parts(bounds, x, dy, slope, zero, one, slope_diff, dx, want_slope,
                          want_input):
    for p in prange(bounds.size - 1):
        _prelu_backward(x, dy, slope, zero, one, bounds[p], bounds[p + 1], slope_diff, dx,
                        want_slope, want_input)


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


def prelu(x, slope, y):
    """y = PReLU of x (n, C, P) with ``slope`` (C,) or (1,) shared; channels split across the
    threads."""
    for_native(_prelu_parts, x.shape[1], x.size, x, slope, x.dtype.type(0), y,
               min_part=jit.PASS_MIN_PART)


def prelu_backward(x, dy, slope, slope_diff, dx):
    """PReLU's gradients of (n, C, P) arrays: slope_diff ((C,) or (1,) shared) += each value's
    share in Caffe's order unless None, dx unless None; channels split across the threads (a
    shared slope's sum is one chain over every value: one thread)."""
    t = x.dtype.type
    shared = slope.size == 1
    if slope_diff is not None and shared:
        kernel(_shared_slope_sum)(x.reshape(-1), dy.reshape(-1), t(0), t(1), slope_diff)
    want_slope = slope_diff is not None and not shared
    if want_slope or dx is not None:
        for_native(_prelu_backward_parts, x.shape[1], x.size, x, dy, slope, t(0), t(1),
                   slope_diff if want_slope else numpy.zeros(1, x.dtype),
                   x if dx is None else dx, want_slope, dx is not None,
                   min_part=jit.PASS_MIN_PART)


def _no_bias(like):
    return numpy.zeros(0, like.dtype)
