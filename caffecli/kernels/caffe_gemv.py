"""Caffe's sums by gemv against a vector of ones (the bias gradients, BatchNorm's, MVN's and
Scale's statistics, Softmax's sum), its dot products (caffe_cpu_dot: Softmax's gradient, the
losses, gradient clipping's norm) and caffe_cpu_asum, added in the order OpenBLAS's x86 kernels
add them (a SKYLAKEX build on one thread), as numpy code: the reference that
kernels/caffe_gemv_jit.py's and softmax_jit.py's compiled loops follow bit for bit.

The first gemv (sgemv_t) sums each row of a (rows, n) matrix: its kernel for four rows at a
time keeps eight lanes (the first four values into lanes 0-3 where the length is 4 mod 8, then
eight at a time), adds lane k and k + 4, then pairwise; the SSE kernel for a pair of the last
rows keeps four lanes, then pairwise, and the kernel for an odd last row eight lanes, as the
four-row one; blocks of 4096 values each add their sum times alpha to the total, and the last
n % 4 values come times alpha through the C compiler's fused multiply-adds. SKYLAKEX builds
send rows of 2 to 8 values (on at most 16384 rows) to kernels of their own (``short_rows``).
The second gemv (sgemv_n) adds the items' totals:
SKYLAKEX builds send up to 48 items (but 4) on at most 16384 channels to a kernel of their own,
which sums in order; the generic path's scalar loops take the last channels % 4 channels
(pairs or fours of items where they are all), its vector kernels groups of 8, 4, 2 and 1 items
for the rest (``item_totals``). Both gemvs are scipy's own sgemv bit for bit on one thread
where its OpenBLAS runs SKYLAKEX kernels (tests/test_caffe_gemv.py; OpenBLAS's threads split
the rows of a large gemv), as the golden cases' values are Caffe's.
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


SHORT_MAX_ROWS = 16384   # rows of 2 to 8 values take SKYLAKEX's own kernels up to this many


def short_rows(rows, alpha, y):
    """y plus alpha times each row's sum of rows (R, 2 to 8 values) as OpenBLAS's SKYLAKEX
    kernels for that length add it (sgemv_kernel_t_2 .. _8), which take the rows in blocks of
    16, 8, 4, 2 and 1 with expressions of their own: p_j = a_j * alpha rounded, or alpha
    applied to the row's sum (fused or not), the sum in order, in pairs or halves, added to y
    after it or, for 6 and 7 values in the rows past the last multiple of four, each p_j onto
    y in turn."""
    r, n = rows.shape
    a = [rows[:, j] for j in range(n)]
    p = [v * alpha for v in a]
    i = numpy.arange(r)
    block = numpy.select([i < r & ~15, i < r & ~7, i < r & ~3, i < r & ~1], [0, 1, 2, 3], 4)

    def total(values):
        out = values[0]
        for v in values[1:]:
            out = out + v
        return out
    if n == 2:
        first = y + fused(alpha, a[1], p[0])
        return numpy.where(block == 0, first, y + (p[1] + p[0]))
    if n == 3:
        first = y + fused(alpha, a[2], fused(alpha, a[1], p[0]))
        fours = y + fused(alpha, a[2], fused(alpha, a[0], p[1]))
        return numpy.where(block <= 1, first, numpy.where(
            block == 2, fours, fused(alpha, (a[0] + a[1]) + a[2], y)))
    if n == 4:
        return numpy.where(block <= 2, ((p[0] + p[1]) + (p[2] + p[3])) + y, numpy.where(
            block == 3, fused(alpha, (a[0] + a[1]) + (a[2] + a[3]), y),
            fused(alpha, total(a), y)))
    if n == 8:
        def pair(j, k):
            return p[j] + p[k]
        return numpy.where(
            block <= 2, ((pair(0, 1) + pair(2, 3)) + (pair(4, 5) + pair(6, 7))) + y,
            numpy.where(block == 3, y + ((pair(0, 1) + pair(4, 5)) + (pair(2, 3) + pair(6, 7))),
                        y + (((pair(0, 4) + pair(1, 5)) + pair(2, 6)) + pair(3, 7))))
    chained = fused(total(a), alpha, y)
    if n == 5:
        return numpy.where(block <= 2, chained, y + total(p))
    if n == 6:
        halves = (a[0] + (a[1] + a[2])) * alpha + (a[3] + (a[4] + a[5])) * alpha
    else:
        halves = ((a[0] + a[1]) + (a[4] + a[5])) * alpha + ((a[2] + a[3]) + a[6]) * alpha
    one_by_one = y
    for v in p:
        one_by_one = one_by_one + v
    return numpy.where(block <= 1, chained, numpy.where(block == 2, halves + y, one_by_one))


def row_totals(rows, alpha, start=None):
    """alpha times each row's sum of rows (R, n), in the first gemv's order: the leading
    multiple of four rows by the four-row kernel (eight lanes; its sum times alpha added), a
    pair of the last rows by the two-row SSE kernel (four lanes), an odd last row by the one-row
    kernel (eight lanes; both fused multiply-adds into y); rows of 2 to 8 values by
    ``short_rows``. With ``start`` (R,): that gemv with beta 1, each block's and the tail's sum
    added to start's values as they come (the gemv adds into y itself)."""
    r, n = rows.shape
    dt = rows.dtype.type
    alpha = dt(alpha)
    wide = r - r % 4
    body = n - n % 4
    y = numpy.zeros(r, rows.dtype) if start is None else start.astype(rows.dtype, copy=True)
    if 2 <= n <= 8 and r <= SHORT_MAX_ROWS:
        return short_rows(rows, alpha, y)
    for s0 in range(0, body, BLOCK):
        block = rows[:, s0:min(body, s0 + BLOCK)]
        if wide:
            y[:wide] = _lanes(block[:wide], 8) * alpha + y[:wide]
        pair = wide + (r - wide) // 2 * 2
        if wide < pair:
            y[wide:pair] = fused(alpha, _lanes(block[wide:pair], 4), y[wide:pair])
        if pair < r:
            y[pair:] = fused(alpha, _lanes(block[pair:], 8), y[pair:])
    tail = rows[:, body:]
    if n - body == 1:
        y = fused(alpha, tail[:, 0], y)
    elif n - body == 2:
        y = y + fused(alpha, tail[:, 0], tail[:, 1] * alpha)
    elif n - body == 3:
        y = y + fused(alpha, tail[:, 2], fused(alpha, tail[:, 0], tail[:, 1] * alpha))
    return y


def generic_path(n, m=0):
    """Whether OpenBLAS's sgemv_n takes its generic kernels for n summed columns into m rows:
    exactly 4 columns, more than 48, or more than 16384 rows; a SKYLAKEX build sends the rest
    to its own small kernel, which sums each row's columns in order from zero and adds the total
    to y."""
    return n == 4 or n > 48 or m > 16384


def _generic_group(t, paired):
    """A group of 8 or 4 columns t (k, rows) as the generic path's kernels sum them for each
    row: from zero in order, or, for the rows where ``paired`` (the first 4 and 8 rows of a
    call), even and odd columns in two accumulators added at the end."""
    zero = t.dtype.type(0)
    total = zero + t[0]
    for k in range(1, len(t)):
        total = total + t[k]
    if paired.any():
        even, odd = zero + t[0], zero + t[1]
        for k in range(2, len(t), 2):
            even, odd = even + t[k], odd + t[k + 1]
        total = numpy.where(paired, even + odd, total)
    return total


def item_totals(t, start=None):
    """y = start (or zeros) plus each channel's total of t (..., items, channels) as OpenBLAS's
    sgemv_n, on one thread, adds the columns of Caffe's gemv into y (channels are its rows).
    The SKYLAKEX small kernel (``generic_path`` false): items in order from zero, the total
    added to y. The generic path: fewer than four leftover channels (channels % 4) sum from
    zero and add to y, one after another but, where they are all the channels (the matrix's
    leading dimension), items two at a time for two or three channels and four at a time for
    one; the leading multiple of four channels take groups of 8 items, then 4, 2 and 1, each
    group summed (``_generic_group``; the 8- and 4-item kernels pair even and odd items for the
    first 4 and 8 channels of their call, ``prefix_positions``) and added to y in turn."""
    items, channels = t.shape[-2:]
    zero = t.dtype.type(0)
    shape = t.shape[:-2] + (channels,)
    y = numpy.zeros(shape, t.dtype) if start is None else \
        numpy.broadcast_to(start, shape).astype(t.dtype)
    if not generic_path(items, channels):
        total = numpy.zeros(shape, t.dtype)
        for k in range(items):
            total += t[..., k, :]
        return y + total
    body = channels - channels % 4
    if body < channels:
        rest, i = t[..., body:], 0
        total = numpy.zeros(shape[:-1] + (channels - body,), t.dtype)
        while body == 0 and i + 4 <= items:
            if channels == 1:
                total += ((rest[..., i, :] + rest[..., i + 1, :]) + rest[..., i + 2, :]) \
                    + rest[..., i + 3, :]
            else:
                total += rest[..., i, :] + rest[..., i + 1, :]
                total += rest[..., i + 2, :] + rest[..., i + 3, :]
            i += 4
        for k in range(i, items):
            total += rest[..., k, :]
        y[..., body:] += total
    if body:
        p0, p1 = prefix_positions(body)
        paired = numpy.zeros(body, bool)
        paired[p0:p1] = True
        i = 0
        for width in [8] * (items // 8) + [w for w in (4, 2, 1) if items & w]:
            group = numpy.moveaxis(t[..., i:i + width, :body], -2, 0)
            y[..., :body] += _generic_group(group, paired if width >= 4 else paired[:0])
            i += width
    return y + zero


def channel_totals(values, alpha):
    """Caffe's two gemvs over values (items, channels, inner): alpha times each (item, channel)
    row's sum, then each channel's total over the items."""
    items, channels, inner = values.shape
    per_row = row_totals(values.reshape(items * channels, inner), alpha)
    return item_totals(per_row.reshape(items, channels))


def _rounded(v, dtype):
    return v.astype(dtype).astype(numpy.float64)


def channel_dots(a, b):
    """OpenBLAS's sdot of a[i, :, k] and b[i, :, k] over the channels of (outer, C, inner)
    arrays, as Caffe's Softmax gradient takes it (caffe_cpu_strided_dot): a double total of
    the data type's products, returned in the data's type. With a stride (inner > 1) the
    products come in pairs, the first fused into the second (GCC's contraction); unit stride
    (inner 1) adds the last C % 32 products one by one, then the kernel's sum of the first
    C - C % 32 (``_sdot_kernel``). The golden Softmax gradients are these bits."""
    dt, wide = a.dtype, numpy.float64
    c = a.shape[1]
    total = numpy.zeros((a.shape[0], a.shape[2]), wide)
    if a.shape[2] > 1 or c < 32:
        pairs = c - c % 2 if a.shape[2] > 1 else 0
        for j in range(0, pairs, 2):
            second = (a[:, j + 1] * b[:, j + 1]).astype(wide)
            total += _rounded(a[:, j].astype(wide) * b[:, j].astype(wide) + second, dt)
        for j in range(pairs, c):
            total += (a[:, j] * b[:, j]).astype(wide)
        return total.astype(dt)
    n1 = c - c % 32
    for j in range(n1, c):
        total += (a[:, j] * b[:, j]).astype(wide)
    total += _sdot_kernel(a[:, :n1, 0], b[:, :n1, 0]).astype(wide)[:, None]
    return total.astype(dt)


def _sdot_kernel(a, b):
    """OpenBLAS's SKYLAKEX sdot kernel over rows of (rows, n), n a multiple of 32: four
    16-lane fused accumulators over blocks of 64, folded to 8 lanes, four 8-lane ones over a
    last block of 32, added ((0 + 1) + 2) + 3, the halves added, then pairwise."""
    dt, wide = a.dtype, numpy.float64
    rows, n = a.shape
    n64 = n - n % 64
    acc = numpy.zeros((rows, 64), dt)
    for s in range(0, n64, 64):
        acc = _rounded(a[:, s:s + 64].astype(wide) * b[:, s:s + 64] + acc, dt).astype(dt)
    eight = (acc.reshape(rows, 4, 2, 8)[:, :, 0] + acc.reshape(rows, 4, 2, 8)[:, :, 1])
    for s in range(n64, n, 32):
        block = (a[:, s:s + 32].astype(wide) * b[:, s:s + 32]).reshape(rows, 4, 8)
        eight = _rounded(block + eight, dt).astype(dt)
    lanes = ((eight[:, 0] + eight[:, 1]) + eight[:, 2]) + eight[:, 3]
    half = lanes[:, :4] + lanes[:, 4:]
    return (half[:, 0] + half[:, 1]) + (half[:, 2] + half[:, 3])


def dot(a, b):
    """cblas_sdot of two vectors as Caffe's caffe_cpu_dot calls it (unit stride; OpenBLAS on
    one thread): ``channel_dots``' order, returned in the data's type."""
    return channel_dots(a.reshape(1, -1, 1), b.reshape(1, -1, 1))[0, 0]


def asum(x):
    """cblas_sasum of a vector as Caffe's caffe_cpu_asum calls it, in the order of OpenBLAS's
    generic x86 kernel (kernel/x86_64/sasum.c, the one the golden HingeLoss and Reduction cases
    show; later SKYLAKEX builds have a kernel of their own): four accumulators, each taking
    values k and k + 4 of every 8, the last n % 8 values in a fifth, then added in order
    (((0 + 1) + 2) + 3) + 4, all in the data's type."""
    a = numpy.abs(x.reshape(-1))
    dt = a.dtype.type
    n8 = a.size - a.size % 8
    sums = numpy.zeros(4, a.dtype)
    for s0 in range(0, n8, 8):
        sums = sums + a[s0:s0 + 4]
        sums = sums + a[s0 + 4:s0 + 8]
    rest = dt(0)
    for i in range(n8, a.size):
        rest = rest + a[i]
    return dt((((sums[0] + sums[1]) + sums[2]) + sums[3]) + rest)


def channel_sums(e):
    """Caffe's Softmax sum over the channels of e (outer, C, inner) at each position: its gemv
    (OpenBLAS's sgemv_n with a row a position and a column a channel, beta 0), in the order
    ``item_totals`` follows."""
    return item_totals(e)


def prefix_positions(body):
    """The positions (p0, p1) that sgemv_n's four-column kernel takes in its first 4 and 8 rows
    (channels 0 + 2 and 1 + 3): those of the last block of rows (blocks of 4096 of the leading
    multiple of four), as far as it has 4 and 8 of them."""
    last = body % BLOCK
    return body - last, body - last + (4 if last & 4 else 0) + (8 if last & 8 else 0)
