"""Winograd's minimal filtering F(2x2, 3x3) for stride-1 3x3 convolutions on the host
(Lavin & Gray, "Fast Algorithms for Convolutional Neural Networks", 2015).

Each 2x2 block of outputs comes from a 4x4 input tile: V = B^T d B per tile, U = G g G^T per
filter, M = U . V summed over input channels (16 GEMMs, one per tile position), Y = A^T M A.
That is 16 multiplies per 4 outputs instead of 36, so the GEMM work falls 2.25x, for
transforms that are additions only. The input gradient is the same algorithm on dy (the
filters turned, pad 2 - pad); the weight gradient sums (A e A^T) . (B^T d B) over the tiles,
reusing the forward's input tiles, and takes G^T (.) G once per filter. The transforms are
compiled loops (kernels/jit.py). The 16 GEMMs (per group) run at once across the threads, each
on its own thread's BLAS (``products``): one after another, each split over every core by
OpenBLAS, they ran below its rate on these shapes (2-core EPYC, a forward-backward pass:
CaffeNet 267 -> 256 ms, ResNet-50 197 -> 188 ms, GoogLeNet level). Results differ from im2col's
by float32 rounding (about 1e-6 of the largest output), which is why only ``engine: DEFAULT``
layers take this path and ``engine: CAFFE`` keeps Caffe's im2col arithmetic.
The filters' transforms (U, the turned filters' U, the weight gradient's G^T (.) G) are
compiled too, with the sums the GEMMs over the 9 taps made: their bits, without the turned
filters' copy (2-core Xeon: CaffeNet's pass 0.98x, its conv3's turned transform 2.2 -> 1.3 ms).
"""
import numpy

from . import blas_blocks, blas_threads, jit
from .blas_blocks import blocked_product
from .gemm import gemm, gemm_stack
from .jit import prange
from .threads import for_native

PRODUCT_MIN_PART = 1 << 20  # multiply-adds of a thread's share of the products at least


def _input_tiles(x, pad_h, pad_w, th, tw, c0, c1, v):
    """v[:, c, (i, ty, tx)] = B^T d B of each 4x4 tile d of x (n, C, H, W) zero-padded, for
    channels c0..c1; tile (ty, tx) starts at row 2 ty - pad_h, column 2 tx - pad_w. A tile row's
    four input rows are first copied into a zero-bordered buffer, so the loops over tiles have
    no bounds checks and vectorize."""
    n, h, w = x.shape[0], x.shape[2], x.shape[3]
    rows = numpy.zeros((4, 2 * tw + 2), x.dtype)
    t = numpy.empty((4, 2 * tw + 2), x.dtype)
    for c in range(c0, c1):
        for i in range(n):
            for ty in range(th):
                for a in range(4):
                    yy = 2 * ty - pad_h + a
                    for b in range(2 * tw + 2):
                        xx = b - pad_w
                        rows[a, b] = x[i, c, yy, xx] if 0 <= yy < h and 0 <= xx < w else 0
                for b in range(2 * tw + 2):        # B^T d, every column at once
                    t[0, b] = rows[0, b] - rows[2, b]
                    t[1, b] = rows[1, b] + rows[2, b]
                    t[2, b] = rows[2, b] - rows[1, b]
                    t[3, b] = rows[1, b] - rows[3, b]
                p = (i * th + ty) * tw
                for a in range(4):                 # (B^T d) B
                    for tx in range(tw):
                        b = 2 * tx
                        v[4 * a, c, p + tx] = t[a, b] - t[a, b + 2]
                        v[4 * a + 1, c, p + tx] = t[a, b + 1] + t[a, b + 2]
                        v[4 * a + 2, c, p + tx] = t[a, b + 2] - t[a, b + 1]
                        v[4 * a + 3, c, p + tx] = t[a, b + 1] - t[a, b + 3]


def _output_tiles(m, th, tw, k0, k1, y):
    """y[:, k] (n, K, oh, ow) = A^T M A of each tile of m (16, K, n * th * tw), for channels
    k0..k1, cropped where the last tiles overhang. The transform runs over all of an image's
    tiles at once (long loops that vectorize) into a small buffer, whose values then go to
    their places in the image's rows."""
    n, oh, ow = y.shape[0], y.shape[2], y.shape[3]
    q = th * tw
    out = numpy.empty((2, 2, q), m.dtype)           # (row in tile, column parity, tile)
    for k in range(k0, k1):
        for i in range(n):
            base = i * q
            for p in range(q):
                s0 = m[0, k, base + p] + m[4, k, base + p] + m[8, k, base + p]
                s1 = m[1, k, base + p] + m[5, k, base + p] + m[9, k, base + p]
                s2 = m[2, k, base + p] + m[6, k, base + p] + m[10, k, base + p]
                s3 = m[3, k, base + p] + m[7, k, base + p] + m[11, k, base + p]
                d0 = m[4, k, base + p] - m[8, k, base + p] - m[12, k, base + p]
                d1 = m[5, k, base + p] - m[9, k, base + p] - m[13, k, base + p]
                d2 = m[6, k, base + p] - m[10, k, base + p] - m[14, k, base + p]
                d3 = m[7, k, base + p] - m[11, k, base + p] - m[15, k, base + p]
                out[0, 0, p] = s0 + s1 + s2
                out[0, 1, p] = s1 - s2 - s3
                out[1, 0, p] = d0 + d1 + d2
                out[1, 1, p] = d1 - d2 - d3
            for ty in range(th):
                for a in range(min(2, oh - 2 * ty)):
                    yy, p0 = 2 * ty + a, ty * tw
                    for tx in range(ow // 2):
                        y[i, k, yy, 2 * tx] = out[a, 0, p0 + tx]
                        y[i, k, yy, 2 * tx + 1] = out[a, 1, p0 + tx]
                    if ow % 2:
                        y[i, k, yy, ow - 1] = out[a, 0, p0 + tw - 1]


def _gradient_tiles(dy, th, tw, k0, k1, e):
    """e[:, k, (i, ty, tx)] = A e A^T of each 2x2 block e of dy (n, K, oh, ow), zero past its
    edge, for channels k0..k1: the weight gradient's transform of the output gradient. An image's
    blocks are first sorted by row and column parity into a small buffer; the transform then
    writes four of the sixteen planes at a time over all the image's tiles (all sixteen at once
    run 2.5x slower: the planes lie a multiple of 4 KiB apart and evict each other)."""
    n, oh, ow = dy.shape[0], dy.shape[2], dy.shape[3]
    q = th * tw
    d = numpy.zeros((2, 2, q), dy.dtype)            # (row in block, column parity, tile)
    for k in range(k0, k1):
        for i in range(n):
            for ty in range(th):
                for a in range(2):
                    yy = 2 * ty + a
                    if yy >= oh:
                        for p in range(ty * tw, ty * tw + tw):
                            d[a, 0, p] = 0
                            d[a, 1, p] = 0
                        continue
                    p0 = ty * tw
                    for tx in range(ow // 2):
                        d[a, 0, p0 + tx] = dy[i, k, yy, 2 * tx]
                        d[a, 1, p0 + tx] = dy[i, k, yy, 2 * tx + 1]
                    if ow % 2:
                        d[a, 0, p0 + tw - 1] = dy[i, k, yy, ow - 1]
                        d[a, 1, p0 + tw - 1] = 0
            base = i * q
            for a in range(4):                     # A e, row a, then (A e) A^T: four planes
                for p in range(q):                 # at a time, for every tile of the image
                    if a == 0:
                        te, to = d[0, 0, p], d[0, 1, p]
                    elif a == 1:
                        te, to = d[0, 0, p] + d[1, 0, p], d[0, 1, p] + d[1, 1, p]
                    elif a == 2:
                        te, to = d[0, 0, p] - d[1, 0, p], d[0, 1, p] - d[1, 1, p]
                    else:
                        te, to = -d[1, 0, p], -d[1, 1, p]
                    e[4 * a, k, base + p] = te
                    e[4 * a + 1, k, base + p] = te + to
                    e[4 * a + 2, k, base + p] = te - to
                    e[4 * a + 3, k, base + p] = -to


def _filter_rows(taps, starts, cols, coef, dest, zero, r0, r1, u):
    """u[dest[i], grp, r, :] = G g G^T at tile position i of the filters taps[grp, r, :] (each
    9 taps), for rows r0..r1 of the flattened (group, row) axes: position i's nonzero terms
    coef[q] * tap[cols[q]], q in starts[i]..starts[i + 1], added one after another from zero,
    a row of filters at a time (the terms are exact: the coefficients are signed powers of 2,
    so these are the sums a GEMM over the 9 taps makes)."""
    rows, width = u.shape[2], u.shape[3]
    tmp = numpy.empty((9, width), taps.dtype)
    for gr in range(r0, r1):
        grp, r = gr // rows, gr % rows
        for j in range(9):
            for s in range(width):
                tmp[j, s] = taps[grp, r, s, j]
        for i in range(16):
            out = u[dest[i], grp, r]
            for s in range(width):
                out[s] = zero
            for q in range(starts[i], starts[i + 1]):
                c, j = coef[q], cols[q]
                for s in range(width):
                    out[s] = out[s] + c * tmp[j, s]


def _filter_gradient_rows(w_hat, starts, rows_of, coef, zero, k0, k1, wdiff):
    """wdiff[k, :, j] += the sum over tile positions i of G's (i, j) coefficient times
    w_hat[i, k, :], for filters k0..k1: position i's terms for tap j (rows_of[q], coef[q], q in
    starts[j]..starts[j + 1]) added one after another from zero, then into the diff."""
    width = w_hat.shape[2]
    acc = numpy.empty((9, width), w_hat.dtype)
    for k in range(k0, k1):
        for j in range(9):
            for s in range(width):
                acc[j, s] = zero
            for q in range(starts[j], starts[j + 1]):
                c, i = coef[q], rows_of[q]
                for s in range(width):
                    acc[j, s] = acc[j, s] + c * w_hat[i, k, s]
        for s in range(width):
            for j in range(9):
                wdiff[k, s, j] = wdiff[k, s, j] + acc[j, s]


def tiles(out_hw):
    """Tile rows and columns covering an output of ``out_hw``."""
    return -(-out_hw[0] // 2), -(-out_hw[1] // 2)


def _filter_matrix(dtype):
    """The (16, 9) matrix taking a 3x3 filter, flattened, to G g G^T, flattened: G (x) G
    (read-only, made once a dtype: numpy.kron costs 20-30 us)."""
    return jit.once((_filter_matrix, numpy.dtype(dtype)), lambda: _kron_g(numpy.dtype(dtype)))


def _kron_g(dtype):
    """G (x) G in ``dtype``, read-only."""
    g = numpy.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype)
    made = numpy.kron(g, g)
    made.flags.writeable = False
    return made


def _input_parts(bounds, x, pad_h, pad_w, th, tw, v):
    for p in prange(bounds.size - 1):
        _input_tiles(x, pad_h, pad_w, th, tw, bounds[p], bounds[p + 1], v)


def _output_parts(bounds, m, th, tw, y):
    for p in prange(bounds.size - 1):
        _output_tiles(m, th, tw, bounds[p], bounds[p + 1], y)


def _gradient_parts(bounds, dy, th, tw, e):
    for p in prange(bounds.size - 1):
        _gradient_tiles(dy, th, tw, bounds[p], bounds[p + 1], e)


def _stack(a, b, out, turned, small, i0, i1):
    """out[i] = a[i] @ b[i], or a[i] @ b[i].T where ``turned``, for i in i0..i1: the former in
    blas_blocks' blocks of rows, the latter whole (with a transposed operand OpenBLAS's
    small-matrix kernels ran slower: CaffeNet's conv4 weight gradient 19 -> 28 ms)."""
    for i in range(i0, i1):
        if turned:   # a call each: a C and an F operand in one variable type as 'A' (slow)
            numpy.dot(a[i], b[i].T, out[i])
        else:
            blocked_product(a[i], b[i], out[i], small)


def _stack_parts(bounds, a, b, out, turned, small):
    for p in prange(bounds.size - 1):
        _stack(a, b, out, turned, small, bounds[p], bounds[p + 1])


def products(a, b, out, turned=False):
    """out[i] = a[i] @ b[i] (b[i].T where ``turned``) for the C-ordered stacks a, b, out: the
    products split across the threads, each on its thread's BLAS (OpenBLAS held to one
    thread); where BLAS's threads cannot be held, one after another on them."""
    if not blas_threads.available():
        return gemm_stack(numpy, a, b.transpose(0, 2, 1) if turned else b, out)
    with blas_threads.one_thread():
        for_native(_stack_parts, out.shape[0], out.size * a.shape[2], a, b, out, turned,
                   blas_blocks.small_macs(), min_part=PRODUCT_MIN_PART)
    return out


def _filter_parts(bounds, taps, starts, cols, coef, dest, zero, u):
    for p in prange(bounds.size - 1):
        _filter_rows(taps, starts, cols, coef, dest, zero, bounds[p], bounds[p + 1], u)


def _filter_gradient_parts(bounds, w_hat, starts, rows_of, coef, zero, wdiff):
    for p in prange(bounds.size - 1):
        _filter_gradient_rows(w_hat, starts, rows_of, coef, zero, bounds[p], bounds[p + 1],
                              wdiff)


def _filter_terms(dtype):
    """The nonzero terms of _filter_matrix(dtype) for the compiled transforms: by tile
    position (starts, taps, coefficients), the positions' rows in the turned filters'
    transform (flipping a filter swaps G g's first and last rows: the same sums, at other
    positions), and by tap (starts, positions, coefficients); made once a dtype."""
    return jit.once((_filter_terms, numpy.dtype(dtype)), lambda: _terms_of(_filter_matrix(dtype)))


def _terms_of(t):
    """``_filter_terms`` of the matrix t."""
    rows, cols = numpy.nonzero(t)
    turned = t[:, ::-1]
    flipped = numpy.array([next(i for i in range(16) if (turned[i] == t[m]).all())
                           for m in range(16)], numpy.int64)
    by_tap_cols, by_tap_rows = numpy.nonzero(t.T)
    return ((numpy.searchsorted(rows, numpy.arange(17)).astype(numpy.int64),
             cols.astype(numpy.int64), t[rows, cols]),
            numpy.arange(16, dtype=numpy.int64), flipped,
            (numpy.searchsorted(by_tap_cols, numpy.arange(10)).astype(numpy.int64),
             by_tap_rows.astype(numpy.int64), t[by_tap_rows, by_tap_cols]))


def filter_transform(g, u, flipped=False, group=1):
    """u = G g G^T of 3x3 filters g (K, C / group, 3, 3) in the tile positions' order:
    (16, K, C / group); with ``flipped``, of the filters turned by 180 degrees and each
    group's transposed, (16, group, C / group, K / group): the input gradient's operand.
    Compiled (``_filter_rows``) for C-ordered host arrays, else as one GEMM; the same bits."""
    k, cg = g.shape[:2]
    if jit.usable(g, u):
        taps = g.reshape(group, k // group, cg, 9)
        if flipped:
            taps, out = taps.transpose(0, 2, 1, 3), u.reshape(16, group, cg, k // group)
        else:
            out = u.reshape(16, group, k // group, cg)
        by_position, forward, turned, _ = _filter_terms(g.dtype)
        for_native(_filter_parts, group * out.shape[2], u.size, taps, *by_position,
                   turned if flipped else forward, g.dtype.type(0), out)
        return u
    t = _filter_matrix(g.dtype)
    taps = g.reshape(-1, 9)
    if flipped:
        t = numpy.ascontiguousarray(t[:, ::-1])
        taps = g.reshape(group, k // group, cg, 9).transpose(0, 2, 1, 3).reshape(-1, 9)
    gemm(numpy, t, taps.T, u.reshape(16, -1))
    return u


def input_tiles(x, pad, tile_hw, v):
    """v (16, C, n * tiles) = B^T d B of x's tiles, split by channel on numba's threads."""
    for_native(_input_parts, x.shape[1], v.size, x, pad[0], pad[1], *tile_hw, v)
    return v


def convolve(x, u, pad, group, v, m, y):
    """y (n, K, oh, ow) = the 3x3 stride-1 convolution of x (n, C, H, W) padded by ``pad``,
    whose filters' transforms are ``u`` (16 * group, K / group, C / group), C-ordered; v (16, C,
    P) and m (16, K, P) are work buffers, P = n * tiles. Transforms run on every core (numba's
    threads), split by channel, and so do the products (``products``)."""
    n, c, k = x.shape[0], x.shape[1], y.shape[1]
    tile_hw = tiles(y.shape[2:])
    p = n * tile_hw[0] * tile_hw[1]
    input_tiles(x, pad, tile_hw, v)
    products(u, v.reshape(16 * group, c // group, p), m.reshape(16 * group, k // group, p))
    for_native(_output_parts, k, m.size, m, *tile_hw, y)
    return y


def weight_gradient(v, dy, group, e, w_hat, wdiff):
    """wdiff (K, C / group, 3, 3) += the weight gradient of a chunk from its input's tiles
    ``v`` (input_tiles) and its output gradient dy (n, K, oh, ow): 16 GEMMs summing
    (A e A^T) . (B^T d B) over the tiles, then G^T (.) G once per filter (the same trilinear
    form as the forward, differentiated by the filter). e (16, K, P) and w_hat (16, K, C / group)
    are work buffers."""
    k, p = dy.shape[1], v.shape[2]
    c = v.shape[1]
    tile_hw = tiles(dy.shape[2:])
    for_native(_gradient_parts, k, e.size, dy, *tile_hw, e)
    products(e.reshape(16 * group, k // group, p), v.reshape(16 * group, c // group, p),
             w_hat.reshape(16 * group, k // group, c // group), turned=True)
    filter_gradient(w_hat.reshape(16, k, c // group), wdiff)


def filter_gradient(w_hat, wdiff):
    """wdiff (K, C / group, 3, 3) += G^T (.) G of w_hat (16, K, C / group): compiled
    (``_filter_gradient_rows``) for C-ordered host arrays, else as one GEMM; the same bits."""
    if jit.usable(w_hat, wdiff):
        *_, by_tap = _filter_terms(wdiff.dtype)
        for_native(_filter_gradient_parts, wdiff.shape[0], wdiff.size, w_hat, *by_tap,
                   wdiff.dtype.type(0), wdiff.reshape(wdiff.shape[0], -1, 9))
        return wdiff
    gemm(numpy, w_hat.reshape(16, -1).T, _filter_matrix(wdiff.dtype), wdiff.reshape(-1, 9),
         accumulate=True)
    return wdiff
