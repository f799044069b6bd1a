"""Caffe's gemv sums against ones in OpenBLAS's order (kernels/caffe_gemv.py, the numpy
reference) as compiled loops (kernels/jit.py): the row and item totals BatchNorm's kernels
(kernels/batch_norm_jit.py) and MVN's rows take, bit for bit the numpy code's."""
import numpy

from .jit import inlined, kernel, prange
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


@inlined
def _fma(a, b, c, box):
    """a * b + c rounded once to box's dtype (exact for float32 data: the product and sum in
    double, as kernels/blas_steps.py does; float64 data round twice)."""
    box[0] = numpy.float64(a) * numpy.float64(b) + numpy.float64(c)
    return box[0]


def row_kernel(row, rows, n=9):
    """Which sgemv_t kernel takes row ``row`` of a gemv's matrix of ``rows`` rows of n values:
    1, the four-row kernel (the leading multiple of four rows); 0, the two-row SSE kernel (a
    pair of the last rows); 2, the one-row kernel (an odd last row), which keeps eight lanes.
    Rows of 2 to 8 values on at most 16384 rows take SKYLAKEX's kernels for that length: 10 +
    the row's block (0: of 16 rows, 1: of 8, 2: of 4, 3: a pair, 4: the last; ``_short_row``)."""
    if 2 <= n <= 8 and rows <= 16384:
        if row < rows & ~15:
            return 10
        if row < rows & ~7:
            return 11
        if row < rows & ~3:
            return 12
        return 13 if row < rows & ~1 else 14
    wide = rows - rows % 4
    if row < wide:
        return 1
    return 2 if (rows - wide) & 1 and row == rows - 1 else 0


def _short_row(a, alpha, block, y, box):
    """y plus row a's (2 to 8 values) gemv sum times alpha as OpenBLAS's SKYLAKEX kernel for its
    length computes it in the row's ``block`` (caffe_gemv.short_rows' expressions; the vector
    of ones makes every a * x exact, alpha's products round)."""
    n = a.shape[0]
    if n == 2:
        if block == 0:
            return y + _fma(alpha, a[1], a[0] * alpha, box)
        return y + (a[1] * alpha + a[0] * alpha)
    if n == 3:
        if block <= 1:
            return y + _fma(alpha, a[2], _fma(alpha, a[1], a[0] * alpha, box), box)
        if block == 2:
            return y + _fma(a[2], alpha, _fma(a[0], alpha, a[1] * alpha, box), box)
        return _fma(alpha, (a[0] + a[1]) + a[2], y, box)
    if n == 4:
        if block <= 2:
            return ((a[0] * alpha + a[1] * alpha) + (a[2] * alpha + a[3] * alpha)) + y
        if block == 3:
            return _fma(alpha, (a[0] + a[1]) + (a[2] + a[3]), y, box)
        return _fma(alpha, ((a[0] + a[1]) + a[2]) + a[3], y, box)
    if n == 8:
        p0, p1, p2, p3 = a[0] * alpha, a[1] * alpha, a[2] * alpha, a[3] * alpha
        p4, p5, p6, p7 = a[4] * alpha, a[5] * alpha, a[6] * alpha, a[7] * alpha
        if block <= 2:
            return (((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))) + y
        if block == 3:
            return y + (((p0 + p1) + (p4 + p5)) + ((p2 + p3) + (p6 + p7)))
        return y + ((((p0 + p4) + (p1 + p5)) + (p2 + p6)) + (p3 + p7))
    if (n == 5 and block <= 2) or (n > 5 and block <= 1):
        total = a[0] + a[1]
        for j in range(2, n):
            total += a[j]
        return _fma(total, alpha, y, box)
    if n == 5:
        total = a[0] * alpha + a[1] * alpha
        for j in range(2, n):
            total += a[j] * alpha
        return y + total
    if block == 2:
        if n == 6:
            h0, h1 = a[0] + (a[1] + a[2]), a[3] + (a[4] + a[5])
        else:
            h0, h1 = (a[0] + a[1]) + (a[4] + a[5]), (a[2] + a[3]) + a[6]
        return (h0 * alpha + h1 * alpha) + y
    for j in range(n):
        y += a[j] * alpha
    return y


def _gemv_row(a, alpha, kind, start, zero, box):
    """start plus alpha times the sum of row a, as Caffe's gemv (OpenBLAS's sgemv_t, x86 Haswell
    kernels) adds each row of its (rows, n) matrix times a vector of ones into y: the first
    n - n % 4 values in blocks of 4096 (eight lanes, ``_lanes8``, for the four- and one-row
    kernels, ``kind`` 1 and 2; four, ``_lanes4``, for the two-row one, 0), each block's sum
    times alpha added to y (the four-row kernel's multiply and add, the others' fused
    multiply-add), then the last n % 4 values times alpha by the C compiler's fused
    multiply-adds; short rows (``kind`` 10 and up) by ``_short_row``."""
    if kind >= 10:
        return _short_row(a, alpha, kind - 10, start, box)
    n = a.shape[0]
    body = n - n % 4
    y = start
    for s0 in range(0, body, 4096):
        s1 = min(body, s0 + 4096)
        if kind == 1:
            y = _lanes8(a, s0, s1, zero) * alpha + y
        elif kind == 2:
            y = _fma(_lanes8(a, s0, s1, zero), alpha, y, box)
        else:
            y = _fma(_lanes4(a, s0, s1, zero), alpha, y, box)
    return _tail(a, body, alpha, y, box)


@inlined
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


@inlined
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


def _group_sum(t, i, width, paired, zero):
    """t[i:i + width] summed as the generic sgemv_n kernels sum a group of columns for one row:
    from zero in order, or even and odd columns apart, then added (``paired``)."""
    if not paired:
        total = zero + t[i]   # from zero: -0.0 becomes 0.0
        for k in range(i + 1, i + width):
            total += t[k]
        return total
    even, odd = zero + t[i], zero + t[i + 1]
    for k in range(i + 2, i + width, 2):
        even += t[k]
        odd += t[k + 1]
    return even + odd


def gemv_items(t, c, channels, start, zero):
    """start plus channel c's total of its items t (items,), as Caffe's gemv over the items
    (OpenBLAS's sgemv_n, one thread, ``channels`` rows) adds them into y: the compiled twin of
    caffe_gemv.item_totals for one channel."""
    n = t.shape[0]
    if not (n == 4 or n > 48 or channels > 16384):   # caffe_gemv.generic_path
        total = zero
        for k in range(n):
            total += t[k]
        return start + total
    body = channels - channels % 4
    if c >= body:
        total = zero
        i = 0
        if body == 0:
            while i + 4 <= n:
                if channels == 1:
                    total += ((t[i] + t[i + 1]) + t[i + 2]) + t[i + 3]
                else:
                    total += t[i] + t[i + 1]
                    total += t[i + 2] + t[i + 3]
                i += 4
        for k in range(i, n):
            total += t[k]
        return start + total
    last = body % 4096   # caffe_gemv.prefix_positions
    p0 = body - last
    paired = p0 <= c < p0 + (4 if last & 4 else 0) + (8 if last & 8 else 0)
    y = start
    i = 0
    while i + 8 <= n:
        y += _group_sum(t, i, 8, paired, zero)
        i += 8
    for width in (4, 2, 1):
        if n & width:
            y += _group_sum(t, i, width, paired and width == 4, zero)
            i += width
    return y + zero


@inlined
def four_totals(rows, count, g0, step, matrix_rows, alpha, zero, out, o0, box, add=False):
    """out[o0 + k] = ``_gemv_row`` of rows[k] for k < count (at most four), rows[k] being row
    g0 + k * step of the gemv's matrix of ``matrix_rows`` rows (its kernel: ``row_kernel``),
    from zero or, with ``add``, from out[o0 + k] (the gemv with beta 1); the four at once
    (``_lanes8_four``) where all are in the four-row kernel and each is one kernel call (4096
    values at most). Inlined with those it calls (but ``_gemv_row``): its calls cost more than
    four short rows' sums (BatchNorm's batch moments and gradient sums on 7x7 maps 0.77-0.86x
    the time, a convolution's bias gradient on 8x8 ones 0.72x)."""
    n = rows.shape[1]
    body = n - n % 4
    wide_rows = matrix_rows - matrix_rows % 4
    if (count == 4 and g0 + 3 * step < wide_rows and body <= 4096
            and row_kernel(g0, matrix_rows, n) == 1):
        sums = _lanes8_four(rows[0], rows[1], rows[2], rows[3], body, zero)
        for k in range(4):
            y = out[o0 + k] if add else zero
            y = sums[k] * alpha + y if body else y
            out[o0 + k] = _tail(rows[k], body, alpha, y, box)
        return
    for k in range(count):
        out[o0 + k] = _gemv_row(rows[k], alpha, row_kernel(g0 + k * step, matrix_rows, n),
                                out[o0 + k] if add else zero, zero, box)


def _row_totals(rows, alpha, zero, r0, r1, out):
    """out[r] = alpha times row r's sum in the gemv's order, for rows r0..r1 of rows (R, n)."""
    box = numpy.empty(1, rows.dtype)
    for o in range(r0, r1, 4):
        four_totals(rows[o:min(o + 4, r1)], min(4, r1 - o), o, 1, rows.shape[0], alpha, zero,
                    out, o, box)


def _row_totals_parts(bounds, rows, alpha, zero, out):
    for p in prange(bounds.size - 1):
        _row_totals(rows, alpha, zero, 4 * bounds[p], min(rows.shape[0], 4 * bounds[p + 1]),
                    out)


def row_totals(rows, alpha, out):
    """out (R,) = alpha times each row's sum of rows (R, n), C-ordered host arrays, in the
    order of caffe_gemv.row_totals (bit for bit); rows split across the threads in fours."""
    dt = rows.dtype.type
    for_native(_row_totals_parts, -(-rows.shape[0] // 4), rows.size, rows, dt(alpha), dt(0), out)
    return out


# ---- Caffe's bias gradients: gemv into the diff (beta 1) ---------------------------------------
def _image_rows(x, one, zero, q0, q1, out, moved, move):
    """out[c] += each x[o, c]'s ``_gemv_row`` in image order, for channels 4 q0 .. 4 q1 of x
    (items, channels, inner): Caffe's gemv of each item's (channels, inner) rows into the diff
    (a convolution's, per image). With ``move``, each row is copied to moved[c, o] too (the
    GEMMs' channels-first layout), in the same pass."""
    items, channels = x.shape[0], x.shape[1]
    box = numpy.empty(1, x.dtype)
    for q in range(q0, q1):
        c0 = 4 * q
        count = min(4, channels - c0)
        for o in range(items):
            rows = x[o, c0:c0 + count]
            if move:
                for k in range(count):
                    row, into = rows[k], moved[c0 + k, o]
                    for i in range(row.shape[0]):
                        into[i] = row[i]
            four_totals(rows, count, c0, 1, channels, one, zero, out, c0, box, True)


def _image_rows_parts(bounds, x, one, zero, out, moved, move):
    for p in prange(bounds.size - 1):
        _image_rows(x, one, zero, bounds[p], bounds[p + 1], out, moved, move)


def add_image_rows(x, out, moved=None):
    """out (channels,) += Caffe's gemv(NoTrans) of each item's rows of x (items, channels,
    inner) against ones, item after item (beta 1; numpy's caffe_gemv.row_totals with a start,
    bit for bit); with ``moved`` (channels, items, inner), x's rows copied there as they are
    read. Host arrays, C-ordered; channels split across the threads in fours."""
    dt = x.dtype.type
    move = moved is not None
    for_native(_image_rows_parts, -(-x.shape[1] // 4), x.size, x, dt(1), dt(0), out,
               moved if move else numpy.empty((1, 1, 1), x.dtype), move)
    return out


def _item_columns(t, zero, c0, c1, out):
    """out[c] = ``gemv_items`` of t[:, c] from out[c], for channels c0..c1 of t (items,
    channels): the paired and leftover channels one by one, the others a row of t at a time
    (the same sums, vectorized across the channels)."""
    n, channels = t.shape
    generic = n == 4 or n > 48 or channels > 16384   # caffe_gemv.generic_path
    body, p0, p1 = channels, 0, 0
    if generic:
        body = channels - channels % 4
        last = body % 4096   # caffe_gemv.prefix_positions
        p0 = body - last
        p1 = p0 + (4 if last & 4 else 0) + (8 if last & 8 else 0)
    for c in range(c0, c1):
        if c >= body or p0 <= c < p1:
            out[c] = gemv_items(t[:, c], c, channels, out[c], zero)
    v1 = min(c1, body)
    if v1 <= c0:
        return
    acc = numpy.empty(v1 - c0, t.dtype)
    if not generic:
        for c in range(c0, v1):
            acc[c - c0] = zero
        for k in range(n):
            row = t[k]
            for c in range(c0, v1):
                acc[c - c0] += row[c]
        for c in range(c0, v1):
            out[c] = out[c] + acc[c - c0]
        return
    i = 0
    while i < n:
        r = n - i
        w = 8 if r >= 8 else (4 if r & 4 else (2 if r & 2 else 1))
        row = t[i]
        for c in range(c0, v1):
            acc[c - c0] = zero + row[c]
        for k in range(i + 1, i + w):
            row = t[k]
            for c in range(c0, v1):
                acc[c - c0] += row[c]
        for c in range(c0, v1):
            if not p0 <= c < p1:
                out[c] = out[c] + acc[c - c0]
        i += w
    for c in range(c0, v1):
        if not p0 <= c < p1:
            out[c] = out[c] + zero


def _item_columns_parts(bounds, t, zero, out):
    for p in prange(bounds.size - 1):
        _item_columns(t, zero, bounds[p], bounds[p + 1], out)


def add_item_totals(t, out):
    """out (channels,) += Caffe's gemv(CblasTrans) of t (items, channels) against ones (beta 1;
    numpy's caffe_gemv.item_totals with a start, bit for bit): an inner product's bias
    gradient. Host arrays; channels split across the threads."""
    for_native(_item_columns_parts, t.shape[1], t.size, t, t.dtype.type(0), out)
    return out


# ---- Caffe's caffe_cpu_dot and caffe_cpu_asum (cblas_sdot, cblas_sasum) ----------------------
def sdot_kernel(a, b, lanes):
    """OpenBLAS's SKYLAKEX sdot kernel over a, b (a multiple of 32 long; caffe_gemv's
    ``_sdot_kernel``): four 16-lane fused accumulators over blocks of 64, folded to 8 lanes,
    four 8-lane ones over a last block of 32, added ((0 + 1) + 2) + 3, the halves added, then
    pairwise; lanes: a scratch of the data type, 64 long at least."""
    n = a.shape[0]
    n64 = n - n % 64
    for l in range(64):
        lanes[l] = 0
    for s in range(0, n64, 64):
        for l in range(64):
            lanes[l] = numpy.float64(a[s + l]) * numpy.float64(b[s + l]) + numpy.float64(lanes[l])
    for j in range(4):
        for l in range(8):
            lanes[8 * j + l] = lanes[16 * j + l] + lanes[16 * j + 8 + l]
    for s in range(n64, n, 32):
        for l in range(32):
            lanes[l] = numpy.float64(a[s + l]) * numpy.float64(b[s + l]) + numpy.float64(lanes[l])
    for l in range(8):
        lanes[l] = ((lanes[l] + lanes[8 + l]) + lanes[16 + l]) + lanes[24 + l]
    for l in range(4):
        lanes[l] = lanes[l] + lanes[4 + l]
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])


def _dot(a, b, lanes):
    n = a.shape[0]
    n1 = n - n % 32
    total = 0.0
    for j in range(n1, n):
        total += a[j] * b[j]
    if n1:
        total += sdot_kernel(a[:n1], b[:n1], lanes)
    return total


def dot(a, b):
    """caffe_gemv.dot of two C-ordered host vectors (OpenBLAS's sdot as Caffe calls it: the
    tail's products, then the kernel's sum, in a double total), in the data's type."""
    a, b = a.reshape(-1), b.reshape(-1)
    return a.dtype.type(kernel(_dot)(a, b, numpy.empty(64, a.dtype)))


def _asum(x, zero):
    n8 = x.shape[0] - x.shape[0] % 8
    s0 = s1 = s2 = s3 = rest = zero
    for i in range(0, n8, 8):
        s0 += abs(x[i])
        s1 += abs(x[i + 1])
        s2 += abs(x[i + 2])
        s3 += abs(x[i + 3])
        s0 += abs(x[i + 4])
        s1 += abs(x[i + 5])
        s2 += abs(x[i + 6])
        s3 += abs(x[i + 7])
    for i in range(n8, x.shape[0]):
        rest += abs(x[i])
    return (((s0 + s1) + s2) + s3) + rest


def asum(x):
    """caffe_gemv.asum of a C-ordered host vector (OpenBLAS's generic sasum order)."""
    x = x.reshape(-1)
    if x.size == 0:
        return x.dtype.type(0)
    return x.dtype.type(kernel(_asum)(x, x.dtype.type(0)))


# ---- Caffe's Scale backward sums (scale_layer.cpp and its Bias layer) ------------------------
def scale_row_sums(g, x, o, c, outer, dim, bias_y, prod, t, ones, lanes, zero, one, box):
    """Row (o, c) of a Scale's backward, dy row g and input row x: returns the Bias layer's
    gemv total for channel c after this row (``bias_y`` before it); t[o] = the scale's first
    sum of the product g * x (rounded to the data's type first, as caffe_mul): the product
    itself for one value a row, its sdot with ones where the whole blob is one row, else its
    gemv row total over the (outer * dim, inner) matrix. prod: scratch of the row's length."""
    n = g.shape[0]
    bias_y = _gemv_row(g, one, row_kernel(c, dim, n), bias_y, zero, box)
    for i in range(n):
        prod[i] = g[i] * x[i]
    if n == 1:
        t[o] = prod[0]
    elif outer * dim == 1:
        t[o] = _dot(prod, ones[:n], lanes)
    else:
        t[o] = _gemv_row(prod, one, row_kernel(o * dim + c, outer * dim, n), zero, zero, box)
    return bias_y


@inlined
def plain_rows(o, c, outer, dim, n):
    """Whether row (o, c) of a Scale's backward takes ``plain_row_sums``: rows of 9 to 4099
    values (one block) that the four-row kernel sums in both gemv calls."""
    return (9 <= n <= 4099 and row_kernel(c, dim, n) == 1
            and row_kernel(o * dim + c, outer * dim, n) == 1)


@inlined
def _plain_tail(a, b, o, c, body, y, times):
    """y plus the last n % 4 values of row (o, c) of a (``times``: of a * b, each product
    rounded) as ``_tail`` adds them with alpha 1 (each multiply by one exact, so its fused
    multiply-adds are plain adds)."""
    n = a.shape[2]
    if n == body:
        return y
    v0 = a[o, c, body] * b[o, c, body] if times else a[o, c, body]
    if n - body == 1:
        return y + v0
    v1 = a[o, c, body + 1] * b[o, c, body + 1] if times else a[o, c, body + 1]
    if n - body == 2:
        return y + (v0 + v1)
    v2 = a[o, c, body + 2] * b[o, c, body + 2] if times else a[o, c, body + 2]
    return y + (v2 + (v0 + v1))


@inlined
def plain_row_sums(g, x, o, c, bias_y, zero):
    """``scale_row_sums``' two gemv totals for row (o, c) of (outer, channels, n) g and x, a
    ``plain_rows`` row, in one pass: (bias_y plus g's sum, g * x's sum from zero), each as
    ``_lanes8`` then ``_tail`` order them (each product rounded first, as caffe_mul's).
    Inlined and indexed in place, without views: ``scale_row_sums``' calls spent about 400 ns a
    row counting references to the arrays they pass, several times the sums' own work on
    ResNet-50's 7x7 rows of 49 values."""
    n = g.shape[2]
    body = n - n % 4
    l0 = l1 = l2 = l3 = l4 = l5 = l6 = l7 = zero
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = zero
    i = 0
    if body & 4:
        l0, l1, l2, l3 = l0 + g[o, c, 0], l1 + g[o, c, 1], l2 + g[o, c, 2], l3 + g[o, c, 3]
        m0, m1 = m0 + g[o, c, 0] * x[o, c, 0], m1 + g[o, c, 1] * x[o, c, 1]
        m2, m3 = m2 + g[o, c, 2] * x[o, c, 2], m3 + g[o, c, 3] * x[o, c, 3]
        i = 4
    while i < body:
        l0, l1 = l0 + g[o, c, i], l1 + g[o, c, i + 1]
        l2, l3 = l2 + g[o, c, i + 2], l3 + g[o, c, i + 3]
        l4, l5 = l4 + g[o, c, i + 4], l5 + g[o, c, i + 5]
        l6, l7 = l6 + g[o, c, i + 6], l7 + g[o, c, i + 7]
        m0, m1 = m0 + g[o, c, i] * x[o, c, i], m1 + g[o, c, i + 1] * x[o, c, i + 1]
        m2, m3 = m2 + g[o, c, i + 2] * x[o, c, i + 2], m3 + g[o, c, i + 3] * x[o, c, i + 3]
        m4, m5 = m4 + g[o, c, i + 4] * x[o, c, i + 4], m5 + g[o, c, i + 5] * x[o, c, i + 5]
        m6, m7 = m6 + g[o, c, i + 6] * x[o, c, i + 6], m7 + g[o, c, i + 7] * x[o, c, i + 7]
        i += 8
    bias_y = (((l4 + l0) + (l5 + l1)) + ((l6 + l2) + (l7 + l3))) + bias_y
    total = (((m4 + m0) + (m5 + m1)) + ((m6 + m2) + (m7 + m3))) + zero
    return _plain_tail(g, x, o, c, body, bias_y, False), _plain_tail(g, x, o, c, body, total, True)


def scale_store(t, c, outer, dim, inner, learned, diff, ones, lanes, zero):
    """Channel c's scale gradient from its rows' sums t (outer,), stored as Caffe's Scale layer
    stores it: added to a learned scale's diff (``learned``) or written, except that one outer
    item (a single product row, or one value a channel) is written directly; over several outer
    items by sdot with ones (one channel) or the gemv over the items."""
    if outer * dim == 1 and inner > 1:
        diff[c] = diff[c] + t[0] if learned else t[0]
    elif outer == 1:
        diff[c] = t[0]
    elif dim == 1:
        lanes[0] = _dot(t, ones[:outer], lanes)   # the dot in the data's type, as returned
        diff[c] = diff[c] + lanes[0] if learned else lanes[0]
    else:
        diff[c] = gemv_items(t, c, dim, diff[c] if learned else zero, zero)


# ---- the same gemv per image, its parts summed apart and added in image order ----------------
def row_part_count(n):
    """How many sums one row of n values adds into y in Caffe's gemv (alpha 1), at most: a
    block sum per 4096 values of its leading multiple of four, and the tail's expression; a
    short row's values one by one (``_short_row``'s last blocks for 6 and 7 values)."""
    body = n - n % 4
    return max(-(-body // 4096) + (1 if n > body else 0), n if n <= 8 else 0)


def row_parts(a, kind, zero, parts, box):
    """The sums ``_gemv_row`` (alpha 1) adds into y for row a, in order, into parts (the rest
    -0.0, which adds nothing to any y): each block's lanes (``row_kernel``'s ``kind``), then
    the tail's expression; a short row's sum, or its values where its kernel adds them to y one
    by one. With alpha 1 each addition is y plus the part, one rounding, so adding the parts to
    y in order later is the gemv's own arithmetic (images summed apart in parallel, added in
    image order)."""
    n = a.shape[0]
    for k in range(parts.shape[0]):
        parts[k] = -zero
    if kind >= 10:
        if n in (6, 7) and kind >= 13:
            for k in range(n):
                parts[k] = a[k]
        else:
            box[0] = 1.0   # one in the data's type (zero + 1 would widen float32)
            parts[0] = _short_row(a, box[0], kind - 10, -zero, box)
        return
    body = n - n % 4
    k = 0
    for s0 in range(0, body, 4096):
        s1 = min(body, s0 + 4096)
        parts[k] = _lanes4(a, s0, s1, zero) if kind == 0 else _lanes8(a, s0, s1, zero)
        k += 1
    _tail_part(a, body, zero, parts, k, box)


def matrix_row_parts(rows, zero, parts, box):
    """``row_parts`` of every row of one gemv's matrix rows (m, n) into parts (m, K): the
    leading multiple of four rows four at a time (``_lanes8_four``) where each is one block."""
    m, n = rows.shape
    body = n - n % 4
    wide = m - m % 4
    c = 0
    if body and body <= 4096 and row_kernel(0, m, n) == 1:
        while c < wide:
            sums = _lanes8_four(rows[c], rows[c + 1], rows[c + 2], rows[c + 3], body, zero)
            for k in range(4):
                parts[c + k, 0] = sums[k]
                if n > body:
                    _tail_part(rows[c + k], body, zero, parts[c + k], 1, box)
                for j in range(2 if n > body else 1, parts.shape[1]):
                    parts[c + k, j] = -zero
            c += 4
    for r in range(c, m):
        row_parts(rows[r], row_kernel(r, m, n), zero, parts[r], box)


def _tail_part(a, body, zero, parts, k, box):
    """parts[k] = the tail expression of row a's last n % 4 values (alpha 1): ``_tail`` added
    to -0.0, which leaves it as it is."""
    if a.shape[0] > body:
        box[0] = 1.0   # one in the data's type (zero + 1 would widen float32)
        parts[k] = _tail(a, body, box[0], -zero, box)


def add_parts(parts, out):
    """out[c] += parts[i, c, :] one after another, image i after image (Caffe's per-image
    gemvs into the diff, from ``row_parts``)."""
    for c in range(out.shape[0]):
        y = out[c]
        for i in range(parts.shape[0]):
            for k in range(parts.shape[2]):
                y = y + parts[i, c, k]
        out[c] = y
