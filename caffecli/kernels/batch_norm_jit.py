"""BatchNorm with the batch's statistics on the host as compiled loops (kernels/jit.py): the
forward in two passes over the data (each channel's mean, then x - mean with its variance;
then the quotient), the backward in two (each channel's two sums, then the gradient), where
the layer's numpy code (its reference) makes seven or eight.

Every sum adds its values one after another from zero, as Caffe's gemvs over short rows do
and as the layer's numpy code does (``cumsum`` along a row, ``sum(axis=0)`` across items):
each (item, channel) row's sum, scaled, then the items'; every elementwise step rounds where
numpy's does, so the values are the numpy code's bit for bit. Threads take disjoint channel
ranges (a channel's statistics cover every item), so the bits do not depend on the thread
count.
"""
import numpy

from .jit import prange
from .threads import for_native


def _row_sum(a, n, zero):
    """a[0] + ... + a[n - 1], one after another from zero (Caffe's gemv over a row of a few
    values adds them so: the golden BatchNorm cases match 2058 of 2196 values this way, 1951
    with numpy's pairwise sums)."""
    total = zero
    for i in range(n):
        total += a[i]
    return total


def _four_sums(a, b, c, d, n, zero):
    """``_row_sum`` of four rows at once: four chains of adds in flight, each in its order
    (a single chain waits on every add)."""
    ta, tb, tc, td = zero, zero, zero, zero
    for i in range(n):
        ta += a[i]
        tb += b[i]
        tc += c[i]
        td += d[i]
    return ta, tb, tc, td


def _item_sums(rows, count, zero, scale, total):
    """total + each of the first ``count`` rows' sums times ``scale``, added in row order:
    rows four at a time (``_four_sums``), then the rest one by one."""
    inner = rows.shape[1]
    o = 0
    while o + 4 <= count:
        sa, sb, sc, sd = _four_sums(rows[o], rows[o + 1], rows[o + 2], rows[o + 3], inner, zero)
        total += sa * scale
        total += sb * scale
        total += sc * scale
        total += sd * scale
        o += 4
    while o < count:
        total += _row_sum(rows[o], inner, zero) * scale
        o += 1
    return total


def _forward_moments(x, scale, zero, c0, c1, mean, var, centered):
    """For channels c0..c1 of x (items, channels, inner): mean[c] and the biased var[c] (each
    row's sum times ``scale``, 1 / values a channel, then the items') and centered = x - mean;
    rows four items at a time (``_item_sums``)."""
    items, inner = x.shape[0], x.shape[2]
    block = numpy.empty((4, inner), x.dtype)
    for c in range(c0, c1):
        mean[c] = _item_sums(x[:, c], items, zero, scale, zero)
        m = mean[c]   # read once: stores to ``centered`` might otherwise reach it
        total = zero
        for o0 in range(0, items, 4):
            count = min(4, items - o0)
            for k in range(count):
                row, into, squares = x[o0 + k, c], centered[o0 + k, c], block[k]
                for i in range(inner):
                    v = row[i] - m
                    into[i] = v
                    squares[i] = v * v
            total = _item_sums(block, count, zero, scale, total)
        var[c] = total


def _divide_copy(centered, std, c0, c1, y):
    """centered /= std[c] for channels c0..c1, and y = the quotient (the layer's top)."""
    for c in range(c0, c1):
        s = std[c]
        for o in range(centered.shape[0]):
            row, into = centered[o, c], y[o, c]
            for i in range(row.shape[0]):
                v = row[i] / s
                row[i] = v
                into[i] = v


def _backward_sums(y, dy, zero, one, c0, c1, dots, totals):
    """dots[c] = the sum of y * dy and totals[c] that of dy over channel c (rows, then items),
    four items at a time; the products of four items' rows go through a small buffer."""
    items, inner = y.shape[0], y.shape[2]
    products = numpy.empty((4, inner), y.dtype)
    for c in range(c0, c1):
        dot = zero
        for o0 in range(0, items, 4):
            count = min(4, items - o0)
            for k in range(count):
                row, grad, into = y[o0 + k, c], dy[o0 + k, c], products[k]
                for i in range(inner):
                    into[i] = row[i] * grad[i]
            dot = _item_sums(products, count, zero, one, dot)
        dots[c], totals[c] = dot, _item_sums(dy[:, c], items, zero, one, zero)


def _gradient(y, dy, dots, totals, factor, std, c0, c1, dx):
    """dx = ((y * dot + total) * factor + dy) / std per channel, rounded step by step."""
    for c in range(c0, c1):
        dot, total, s = dots[c], totals[c], std[c]
        for o in range(y.shape[0]):
            row, grad, into = y[o, c], dy[o, c], dx[o, c]
            for i in range(row.shape[0]):
                into[i] = ((row[i] * dot + total) * factor + grad[i]) / s


def _gradient_in_place(y, d, dots, totals, factor, std, c0, c1):
    """``_gradient`` where dx is dy (an in-place BatchNorm): one array read and written."""
    for c in range(c0, c1):
        dot, total, s = dots[c], totals[c], std[c]
        for o in range(y.shape[0]):
            row, grad = y[o, c], d[o, c]
            for i in range(row.shape[0]):
                grad[i] = ((row[i] * dot + total) * factor + grad[i]) / s


# ---- every channel, split across the threads (threads.for_native) ----------------------------
def _forward_moments_parts(bounds, x, scale, zero, mean, var, centered):
    for p in prange(bounds.size - 1):
        _forward_moments(x, scale, zero, bounds[p], bounds[p + 1], mean, var, centered)


def _divide_copy_parts(bounds, centered, std, y):
    for p in prange(bounds.size - 1):
        _divide_copy(centered, std, bounds[p], bounds[p + 1], y)


def _backward_sums_parts(bounds, y, dy, zero, one, dots, totals):
    for p in prange(bounds.size - 1):
        _backward_sums(y, dy, zero, one, bounds[p], bounds[p + 1], dots, totals)


def _gradient_parts(bounds, y, dy, dots, totals, factor, std, dx):
    for p in prange(bounds.size - 1):
        _gradient(y, dy, dots, totals, factor, std, bounds[p], bounds[p + 1], dx)


def _gradient_in_place_parts(bounds, y, d, dots, totals, factor, std):
    for p in prange(bounds.size - 1):
        _gradient_in_place(y, d, dots, totals, factor, std, bounds[p], bounds[p + 1])


def moments(x, centered):
    """The batch's mean and biased variance per channel of x (items, channels, inner), as the
    layer's numpy code computes them, and centered = x - mean."""
    channels, dt = x.shape[1], x.dtype.type
    mean, var = numpy.empty(channels, x.dtype), numpy.empty(channels, x.dtype)
    scale = dt(1.0 / (x.shape[0] * x.shape[2]))
    for_native(_forward_moments_parts, channels, 2 * x.size, x, scale, dt(0), mean, var,
               centered)
    return mean, var


def normalize(centered, std, y):
    """centered /= std (per channel, (channels,)) and y = the result."""
    for_native(_divide_copy_parts, centered.shape[1], centered.size, centered, std, y)


def backward(y, dy, std, dx):
    """dx = BatchNorm's gradient given the normalized y, dy and the std per channel, all
    (items, channels, inner) but std; dx may be dy itself."""
    channels, dt = y.shape[1], y.dtype.type
    dots, totals = numpy.empty(channels, y.dtype), numpy.empty(channels, y.dtype)
    for_native(_backward_sums_parts, channels, 2 * y.size, y, dy, dt(0), dt(1), dots, totals)
    factor = dt(-1.0 / (y.shape[0] * y.shape[2]))
    if numpy.may_share_memory(dx, dy):   # the same blob's diff (in place)
        for_native(_gradient_in_place_parts, channels, y.size, y, dy, dots, totals, factor,
                   std)
    else:
        for_native(_gradient_parts, channels, y.size, y, dy, dots, totals, factor, std, dx)
