"""Caffe's sums by gemv against a vector of ones (BatchNorm's and MVN's statistics), added in
the order OpenBLAS's x86 kernels (Haswell and later) add them, as numpy code: the reference
that kernels/caffe_gemv_jit.py's compiled loops follow bit for bit.

The first gemv (sgemv_t) sums each row of a (rows, n) matrix: its kernel for four rows at a
time keeps eight lanes (the first four values into lanes 0-3 where the length is 4 mod 8, then
eight at a time), adds lane k and k + 4, then pairwise; the SSE kernels for the last one or two
rows keep four lanes, then pairwise; blocks of 4096 values each add their sum times alpha to the
total, and the last n % 4 values come times alpha through the C compiler's fused multiply-adds.
The second gemv (sgemv_n) adds the items' totals: in order here, or as its scalar loops for
fewer than four channels do (pairs of items for two or three channels, fours for one); its
vector kernels' orders for four or more items on four or more channels are not followed. With
these the golden BatchNorm and MVN cases' values are Caffe's bits.
"""
import numpy

from .blas_steps import fused

BLOCK = 4096   # OpenBLAS's NBMAX: values of a row a kernel call sums


def _lanes(block, width):
    """Each row's sum of block (rows, a multiple of 4) in ``width`` (8 or 4) lanes, reduced as
    the kernels reduce them; each lane adds its values one after another from zero (a
    cumulative sum along the lanes' runs)."""
    rows, n = block.shape
    lanes = numpy.zeros((rows, 1, width), block.dtype)
    i = 0
    if width == 8 and n & 4:
        lanes[:, 0, :4] += block[:, :4]
        i = 4
    runs = block[:, i:].reshape(rows, -1, width)
    lanes = numpy.concatenate((lanes, runs), axis=1).cumsum(axis=1)[:, -1]
    if width == 8:
        lanes = lanes[:, 4:] + lanes[:, :4]
    return (lanes[:, 0] + lanes[:, 1]) + (lanes[:, 2] + lanes[:, 3])


def row_totals(rows, alpha):
    """alpha times each row's sum of rows (R, n), in the first gemv's order: the leading
    multiple of four rows by the eight-lane kernel, the rest by the four-lane ones."""
    r, n = rows.shape
    dt = rows.dtype.type
    alpha = dt(alpha)
    wide = numpy.arange(r) < r - r % 4
    body = n - n % 4
    y = numpy.zeros(r, rows.dtype)
    for s0 in range(0, body, BLOCK):
        block = rows[:, s0:min(body, s0 + BLOCK)]
        y = numpy.where(wide, _lanes(block, 8) * alpha + y, fused(alpha, _lanes(block, 4), y))
    tail = rows[:, body:]
    if n - body == 1:
        y = fused(alpha, tail[:, 0], y)
    elif n - body == 2:
        y = y + fused(alpha, tail[:, 0], tail[:, 1] * alpha)
    elif n - body == 3:
        y = y + fused(alpha, tail[:, 2], fused(alpha, tail[:, 0], tail[:, 1] * alpha))
    return y


def item_totals(t):
    """Each channel's total of t (items, channels), the items' row totals, in the second gemv's
    order (see the module's docstring)."""
    items, channels = t.shape
    y = numpy.zeros(channels, t.dtype)
    i = 0
    if channels < 4:
        while i + 4 <= items:
            if channels == 1:
                y += ((t[i] + t[i + 1]) + t[i + 2]) + t[i + 3]
            else:
                y += t[i] + t[i + 1]
                y += t[i + 2] + t[i + 3]
            i += 4
    for k in range(i, items):
        y += t[k]
    return y + t.dtype.type(0)


def channel_totals(values, alpha):
    """Caffe's two gemvs over values (items, channels, inner): alpha times each (item, channel)
    row's sum, then each channel's total over the items."""
    items, channels, inner = values.shape
    per_row = row_totals(values.reshape(items * channels, inner), alpha)
    return item_totals(per_row.reshape(items, channels))
