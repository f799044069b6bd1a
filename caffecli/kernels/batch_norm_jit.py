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

from .jit import prange
from .threads import for_native


def _lanes8(a, s0, s1, zero):
    """a[s0:s1] (a multiple of 4 long) summed as OpenBLAS's Haswell sgemv_t kernel sums a
    column of four it takes at once: eight lanes (the first four values into lanes 0-3 where
    the length is 4 mod 8, then eight at a time), lane k and k + 4 added, then pairwise."""
    l0 = l1 = l2 = l3 = l4 = l5 = l6 = l7 = zero
    i = s0
    if (s1 - s0) & 4:
        l0 += a[i]
        l1 += a[i + 1]
        l2 += a[i + 2]
        l3 += a[i + 3]
        i += 4
    while i < s1:
        l0 += a[i]
        l1 += a[i + 1]
        l2 += a[i + 2]
        l3 += a[i + 3]
        l4 += a[i + 4]
        l5 += a[i + 5]
        l6 += a[i + 6]
        l7 += a[i + 7]
        i += 8
    return ((l4 + l0) + (l5 + l1)) + ((l6 + l2) + (l7 + l3))


def _lanes4(a, s0, s1, zero):
    """a[s0:s1] (a multiple of 4 long) summed as OpenBLAS's SSE sgemv_t kernels for the last
    one or two columns do: four lanes, then pairwise."""
    l0 = l1 = l2 = l3 = zero
    for i in range(s0, s1, 4):
        l0 += a[i]
        l1 += a[i + 1]
        l2 += a[i + 2]
        l3 += a[i + 3]
    return (l0 + l1) + (l2 + l3)


def _fma(a, b, c, box):
    """a * b + c rounded once to box's dtype (exact for float32 data: the product and sum in
    double, as kernels/blas_steps.py does; float64 data round twice)."""
    box[0] = numpy.float64(a) * numpy.float64(b) + numpy.float64(c)
    return box[0]


def _gemv_row(a, alpha, wide, zero, box):
    """alpha times the sum of row a, as Caffe's gemv (OpenBLAS's sgemv_t, x86 Haswell kernels)
    takes each row of its (rows, n) matrix times a vector of ones: the first n - n % 4 values in
    blocks of 4096 (``_lanes8`` for rows in the leading multiple of four rows, ``wide``, else
    ``_lanes4``), each block's sum times alpha added to the total, then the last n % 4 values
    times alpha by the C compiler's fused multiply-adds."""
    n = a.shape[0]
    body = n - n % 4
    y = zero
    for s0 in range(0, body, 4096):
        s1 = min(body, s0 + 4096)
        if wide:
            y = _lanes8(a, s0, s1, zero) * alpha + y
        else:
            y = _fma(_lanes4(a, s0, s1, zero), alpha, y, box)
    return _tail(a, body, alpha, y, box)


def _tail(a, body, alpha, y, box):
    """y plus alpha times a's last n % 4 values (from ``body``), as the C loops after sgemv_t's
    kernels add them: fused multiply-adds as GCC contracts the expression."""
    n = a.shape[0]
    if n - body == 1:
        y = _fma(a[body], alpha, y, box)
    elif n - body == 2:
        y = y + _fma(a[body], alpha, a[body + 1] * alpha, box)
    elif n - body == 3:
        y = y + _fma(a[body + 2], alpha, _fma(a[body], alpha, a[body + 1] * alpha, box), box)
    return y


def _lanes8_four(a, b, c, d, n, zero):
    """``_lanes8`` of four rows' first n values at once: four chains of vector adds in flight
    (a single row's chain waits on every add)."""
    a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = zero
    b0 = b1 = b2 = b3 = b4 = b5 = b6 = b7 = zero
    c0 = c1 = c2 = c3 = c4 = c5 = c6 = c7 = zero
    d0 = d1 = d2 = d3 = d4 = d5 = d6 = d7 = zero
    i = 0
    if n & 4:   # from zero, as the kernel's lanes are: -0.0 becomes 0.0
        a0, a1, a2, a3 = zero + a[0], zero + a[1], zero + a[2], zero + a[3]
        b0, b1, b2, b3 = zero + b[0], zero + b[1], zero + b[2], zero + b[3]
        c0, c1, c2, c3 = zero + c[0], zero + c[1], zero + c[2], zero + c[3]
        d0, d1, d2, d3 = zero + d[0], zero + d[1], zero + d[2], zero + d[3]
        i = 4
    while i < n:
        a0 += a[i]
        a1 += a[i + 1]
        a2 += a[i + 2]
        a3 += a[i + 3]
        a4 += a[i + 4]
        a5 += a[i + 5]
        a6 += a[i + 6]
        a7 += a[i + 7]
        b0 += b[i]
        b1 += b[i + 1]
        b2 += b[i + 2]
        b3 += b[i + 3]
        b4 += b[i + 4]
        b5 += b[i + 5]
        b6 += b[i + 6]
        b7 += b[i + 7]
        c0 += c[i]
        c1 += c[i + 1]
        c2 += c[i + 2]
        c3 += c[i + 3]
        c4 += c[i + 4]
        c5 += c[i + 5]
        c6 += c[i + 6]
        c7 += c[i + 7]
        d0 += d[i]
        d1 += d[i + 1]
        d2 += d[i + 2]
        d3 += d[i + 3]
        d4 += d[i + 4]
        d5 += d[i + 5]
        d6 += d[i + 6]
        d7 += d[i + 7]
        i += 8
    return (((a4 + a0) + (a5 + a1)) + ((a6 + a2) + (a7 + a3)),
            ((b4 + b0) + (b5 + b1)) + ((b6 + b2) + (b7 + b3)),
            ((c4 + c0) + (c5 + c1)) + ((c6 + c2) + (c7 + c3)),
            ((d4 + d0) + (d5 + d1)) + ((d6 + d2) + (d7 + d3)))


def _gemv_items(t, channels, zero):
    """A channel's total of its items' row totals t (items,), as Caffe's second gemv (OpenBLAS's
    sgemv_n over the items) adds them: one after another from zero; where the net has fewer than
    four channels, as that gemv's scalar loops for them do (two items at a time for two or three
    channels, four for one). Its vector kernels' orders for four or more items on four or more
    channels (items split by parity, or by groups of eight) are not followed."""
    n = t.shape[0]
    y = zero
    i = 0
    if channels < 4:
        while i + 4 <= n:
            if channels == 1:
                y += ((t[i] + t[i + 1]) + t[i + 2]) + t[i + 3]
            else:
                y += t[i] + t[i + 1]
                y += t[i + 2] + t[i + 3]
            i += 4
    for k in range(i, n):
        y += t[k]
    return zero + y


def _four_totals(rows, count, first, c, channels, alpha, zero, totals, box):
    """totals[first + k] = ``_gemv_row`` of rows[k] for k < count (at most four rows: items
    first.. of channel c), the four at once (``_lanes8_four``) where all are in the leading
    multiple of four rows and each is one kernel call (4096 values at most)."""
    n = rows.shape[1]
    body = n - n % 4
    wide_rows = totals.shape[0] * channels - (totals.shape[0] * channels) % 4
    if count == 4 and (first + 3) * channels + c < wide_rows and body <= 4096:
        sums = _lanes8_four(rows[0], rows[1], rows[2], rows[3], body, zero)
        for k in range(4):
            y = sums[k] * alpha + zero if body else zero
            totals[first + k] = _tail(rows[k], body, alpha, y, box)
        return
    for k in range(count):
        totals[first + k] = _gemv_row(rows[k], alpha, (first + k) * channels + c < wide_rows,
                                      zero, box)


def _channel_total(rows, c, channels, alpha, zero, totals, box):
    """Channel c's gemv total of rows (items, inner): each item's ``_gemv_row`` times alpha
    (four items at a time), then ``_gemv_items``; totals: an (items,) buffer."""
    items = rows.shape[0]
    for o in range(0, items, 4):
        _four_totals(rows[o:o + 4], min(4, items - o), o, c, channels, alpha, zero, totals, box)
    return _gemv_items(totals, channels, zero)


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
            _four_totals(block, count, o, c, channels, scale, zero, totals, box)
        var[c] = _gemv_items(totals, channels, zero)


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
            _four_totals(block, count, o, c, channels, one, zero, item_totals, box)
        dots[c] = _gemv_items(item_totals, channels, zero)
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
