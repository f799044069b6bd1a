"""BatchNorm with the batch's statistics on the host as compiled loops (kernels/jit.py): the
forward in two passes over the data (each channel's mean, then x - mean with its variance;
then the quotient), the backward in two (each channel's two sums, then the gradient), where
the layer's numpy code (its reference) makes seven or eight.

Every sum adds its values in the order of Caffe's two gemvs on OpenBLAS (kernels/caffe_gemv.py,
the layer's numpy code): each (item, channel) row in eight or four lanes, times alpha, then the
items'; every elementwise step rounds where numpy's does, so the values are the numpy code's bit
for bit, and the golden BatchNorm cases' Caffe's. Threads take disjoint channel ranges (a
channel's statistics cover every item), so the bits do not depend on the thread count.
"""
import numpy

from .caffe_gemv_jit import four_totals, gemv_items
from .jit import prange
from .threads import for_native


def _channel_total(rows, c, channels, alpha, zero, totals, box):
    """Channel c's gemv total of rows (items, inner): each item's row times alpha (four items
    at a time: ``four_totals``), then ``gemv_items``; totals: an (items,) buffer."""
    items = rows.shape[0]
    for o in range(0, items, 4):
        four_totals(rows[o:o + 4], min(4, items - o), o * channels + c, channels,
                    items * channels, alpha, zero, totals, o, box)
    return gemv_items(totals, c, channels, zero, zero)


def _forward_moments(x, scale, zero, c0, c1, mean, var, centered):
    """For channels c0..c1 of x (items, channels, inner): mean[c] and the biased var[c] as
    Caffe's gemvs sum them (``_channel_total``, alpha 1 / values a channel) and
    centered = x - mean, whose squares four items at a time go through a small buffer."""
    items, channels, inner = x.shape
    block = numpy.empty((4, inner), x.dtype)
    totals = numpy.empty(items, x.dtype)
    box = numpy.empty(1, x.dtype)
    for c in range(c0, c1):
        m = _channel_total(x[:, c], c, channels, scale, zero, totals, box)
        mean[c] = m
        for o in range(0, items, 4):
            count = min(4, items - o)
            for k in range(count):
                row, into, sq = x[o + k, c], centered[o + k, c], block[k]
                for i in range(inner):
                    v = row[i] - m
                    into[i] = v
                    sq[i] = v * v
            four_totals(block, count, o * channels + c, channels, items * channels, scale,
                        zero, totals, o, box)
        var[c] = gemv_items(totals, c, channels, zero, zero)


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
    """dots[c] = the sum of y * dy and totals[c] that of dy over channel c, as Caffe's gemvs
    sum them (``_channel_total``, alpha 1); the products of four items' rows go through a small
    buffer."""
    items, channels, inner = y.shape
    block = numpy.empty((4, inner), y.dtype)
    item_totals = numpy.empty(items, y.dtype)
    box = numpy.empty(1, y.dtype)
    for c in range(c0, c1):
        for o in range(0, items, 4):
            count = min(4, items - o)
            for k in range(count):
                row, grad, into = y[o + k, c], dy[o + k, c], block[k]
                for i in range(inner):
                    into[i] = row[i] * grad[i]
            four_totals(block, count, o * channels + c, channels, items * channels, one,
                        zero, item_totals, o, box)
        dots[c] = gemv_items(item_totals, c, channels, zero, zero)
        totals[c] = _channel_total(dy[:, c], c, channels, one, zero, item_totals, box)


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
