"""A few rows times a large matrix, as compiled loops (kernels/jit.py): a fully connected
layer's forward at a small batch, out = a @ w.T (CaffeNet's fc6 at batch 10: 10 x 9216 by
4096 x 9216), and its input gradient, out = a @ w (10 x 4096 by 4096 x 9216).

Such a product reads each weight once and does little with it, so it is bound by how fast the
weights stream in; OpenBLAS packs them first, which halves the forward's speed and slows the
input gradient by a fifth against these loops (fc6 on the 2-core EPYC: forward 19.3 -> 9.4 ms,
input gradient 14.3 -> 11.7 ms).

The forward runs five or four rows of ``a`` against four rows of ``w`` (20 or 16 dot products;
fc6's ten rows as two fives run 26% faster than as 4 + 4 + 1 + 1) over whole rows (chunks of
CHUNK columns at most), which stream from memory faster than L1-sized chunks (fc6 at batch 10,
two threads: 8.7 -> 7.0 ms against chunks of 1024 columns; VGG's 25088-long rows too). The
input gradient adds four rows of ``w`` into every row of the output over chunks of ROWS_CHUNK
columns that stay in L1 (for a w too large for the caches, over each thread's whole share of
the columns, STREAM_WEIGHTS), and sums each GROUP rows of ``w`` apart before adding them to the
total, so its rounding is no worse than BLAS's. Both sum in the data's type, as BLAS does.

The forward's loops also add a convolution's weight gradient over a batch, diff += dy @ col.T:
few outputs, each a sum thousands long, where OpenBLAS keeps few of its vector lanes busy
(LeNet's conv1, 20 x 25 sums 36864 long: 1.1 -> 0.32 ms on the 2-core EPYC; conv2 50 x 500 x
4096: 1.8 -> 1.0 ms; GoogLeNet's and ResNet-50's reduce layers 5-30% faster, up to 64 x 512).

Each thread takes whole rows of ``w`` (forward, ranges starting at multiples of four) or whole
chunks of columns (input gradient), and every output is summed by the same code wherever the
split falls: the result does not depend on the thread count.
"""
import numpy

from . import jit
from .jit import fast, prange
from .threads import for_native, num_threads

MAX_ROWS = 16          # rows of a: more make the product compute-bound, BLAS's case
MIN_ROWS_GRADIENT = 2  # one row: BLAS's gemv-like product streams faster than the chunks
MAX_ROWS_GRADIENT = 12  # at 16 rows the input gradient is level with BLAS
MIN_WEIGHTS = 1 << 19  # values of w (2 MB in float32) for two rows of a or more: in a pass the
                       # other layers' data push larger ones out of the caches, where these
                       # loops stream them faster than BLAS (2-core EPYC, in the pass: CaffeNet's
                       # fc8, 4M values, forward 1.21 -> 0.61 ms and backward 2.05 -> 1.57 ms at
                       # batch 10; ResNet-50's fc1000 at batch 2 0.41 -> 0.22 and 0.81 -> 0.61;
                       # GoogLeNet's classifier, 1M, 0.34 -> 0.23 and 0.59 -> 0.50). Below it a
                       # small net's weights stay in cache: LeNet's ip1 (400K) at batch 8 ran
                       # 1.38x slower in these loops with SkylakeX's kernels
MIN_WEIGHTS_ONE_ROW = 1 << 22  # for one row (16 MB): BLAS's gemv runs smaller ones as fast or
                       # faster (ResNet-50's fc1000 at batch 1 1.09x, GoogLeNet's classifier
                       # 1.24x slower in these loops)
CHUNK = 1 << 16        # forward: columns per chunk at most (whole rows for every zoo net)
ROWS_CHUNK = 1024      # input gradient: columns per chunk (4 rows of w, the partial sums), fewer
                       # where the threads would otherwise not all get one (the bits do not
                       # depend on it: each column sums the rows of w in the same order)
STREAM_WEIGHTS = 1 << 25  # input gradient: values of w (128 MB in float32) from which each
                       # thread takes one chunk, its share of the columns: w streams from
                       # memory in longer runs (2 threads: CaffeNet's fc6 at batch 10 9.6-11.6
                       # -> 7.7-9.3 ms, VGG's fc6 at batch 4 20-21 -> 13-14 ms); fc7 (4096 x
                       # 4096) was level, fc8 (1000 x 4096) slower (0.93 -> 1.3 ms)
GROUP = 256            # rows of w summed apart in the input gradient
MAX_SUMS = 1 << 15     # weight gradients: most values out (LeNet's conv2 50 x 500: 1.8 -> 1.0
MAX_ROWS_SUMS = 64     # ms against OpenBLAS on 2 cores; GoogLeNet's 128 x 512 are level, its
MIN_SUMS_INNER = 1024  # sums 490 long 1.3x slower and its conv1's, 125440 long, 1.2x)
MAX_SUMS_INNER = 1 << 16
MAX_SUMS_MACS = 1 << 27  # values out x inner dimension at most: beyond, the rows a tile reads
                         # leave the caches between tiles and OpenBLAS's packed blocks win
                         # (CIFAR-10's conv2 at batch 100, 32 x 800 sums 25600 long, 5x2^27:
                         # 18 -> 9-13 ms on the 2-core Xeon; every bench net's are under 2^27)


@fast("reassoc", "contract")
def _dots(a, w, o0, o1, out, zero, chunk, accumulate):
    """out[:, o] = a @ w[o] (``accumulate``: out[:, o] += ...) for o0 <= o < o1, column chunk
    by chunk: five or four rows of a by four rows of w where there are four of w (the fives
    first, as many as leave a multiple of four), one row of a by four of w for the rows left."""
    m, k = a.shape
    fives = m // 5
    while fives and (m - 5 * fives) % 4:
        fives -= 1
    if not accumulate:
        for i in range(m):
            for o in range(o0, o1):
                out[i, o] = zero
    for s0 in range(0, k, chunk):
        n = min(chunk, k - s0)
        o = o0
        while o + 4 <= o1:
            w0, w1, w2, w3 = w[o, s0:], w[o + 1, s0:], w[o + 2, s0:], w[o + 3, s0:]
            i = 0
            while i < 5 * fives:        # 20 sums and 9 values: the registers' fill
                a0, a1, a2, a3, a4 = a[i, s0:], a[i + 1, s0:], a[i + 2, s0:], a[i + 3, s0:], \
                    a[i + 4, s0:]
                s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero
                s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
                s40 = s41 = s42 = s43 = zero
                for q in range(n):
                    v0, v1, v2, v3 = w0[q], w1[q], w2[q], w3[q]
                    x0, x1, x2, x3, x4 = a0[q], a1[q], a2[q], a3[q], a4[q]
                    s00 += x0 * v0
                    s01 += x0 * v1
                    s02 += x0 * v2
                    s03 += x0 * v3
                    s10 += x1 * v0
                    s11 += x1 * v1
                    s12 += x1 * v2
                    s13 += x1 * v3
                    s20 += x2 * v0
                    s21 += x2 * v1
                    s22 += x2 * v2
                    s23 += x2 * v3
                    s30 += x3 * v0
                    s31 += x3 * v1
                    s32 += x3 * v2
                    s33 += x3 * v3
                    s40 += x4 * v0
                    s41 += x4 * v1
                    s42 += x4 * v2
                    s43 += x4 * v3
                for r, sums in enumerate(((s00, s01, s02, s03), (s10, s11, s12, s13),
                                          (s20, s21, s22, s23), (s30, s31, s32, s33),
                                          (s40, s41, s42, s43))):
                    row = out[i + r]
                    row[o] += sums[0]
                    row[o + 1] += sums[1]
                    row[o + 2] += sums[2]
                    row[o + 3] += sums[3]
                i += 5
            while i + 4 <= m:
                a0, a1, a2, a3 = a[i, s0:], a[i + 1, s0:], a[i + 2, s0:], a[i + 3, s0:]
                s00 = s01 = s02 = s03 = s10 = s11 = s12 = s13 = zero
                s20 = s21 = s22 = s23 = s30 = s31 = s32 = s33 = zero
                for q in range(n):
                    v0, v1, v2, v3 = w0[q], w1[q], w2[q], w3[q]
                    x0, x1, x2, x3 = a0[q], a1[q], a2[q], a3[q]
                    s00 += x0 * v0
                    s01 += x0 * v1
                    s02 += x0 * v2
                    s03 += x0 * v3
                    s10 += x1 * v0
                    s11 += x1 * v1
                    s12 += x1 * v2
                    s13 += x1 * v3
                    s20 += x2 * v0
                    s21 += x2 * v1
                    s22 += x2 * v2
                    s23 += x2 * v3
                    s30 += x3 * v0
                    s31 += x3 * v1
                    s32 += x3 * v2
                    s33 += x3 * v3
                for r, sums in enumerate(((s00, s01, s02, s03), (s10, s11, s12, s13),
                                          (s20, s21, s22, s23), (s30, s31, s32, s33))):
                    row = out[i + r]
                    row[o] += sums[0]
                    row[o + 1] += sums[1]
                    row[o + 2] += sums[2]
                    row[o + 3] += sums[3]
                i += 4
            for i in range(i, m):
                ai = a[i, s0:]
                s0_ = s1_ = s2_ = s3_ = zero
                for q in range(n):
                    x = ai[q]
                    s0_ += x * w0[q]
                    s1_ += x * w1[q]
                    s2_ += x * w2[q]
                    s3_ += x * w3[q]
                row = out[i]
                row[o] += s0_
                row[o + 1] += s1_
                row[o + 2] += s2_
                row[o + 3] += s3_
            o += 4
        for r in range(o, o1):
            wr = w[r, s0:]
            for i in range(m):
                ai = a[i, s0:]
                s = zero
                for q in range(n):
                    s += ai[q] * wr[q]
                out[i, r] += s


@fast("contract")
def _rows(a, w, k0, k1, out, part, chunk, group):
    """out[:, k0:k1] = a @ w[:, k0:k1], column chunk by chunk: four rows of w at a time added
    into ``part`` (each row of a's share; four rows of it at once where there are four),
    ``group`` rows of w per partial sum."""
    m, n = a.shape
    for s0 in range(k0, k1, chunk):
        c = min(chunk, k1 - s0)
        for i in range(m):
            row = out[i, s0:]
            for t in range(c):
                row[t] = 0
        for g0 in range(0, n, group):
            g1 = min(g0 + group, n)
            for i in range(m):
                p = part[i]
                for t in range(c):
                    p[t] = 0
            o = g0
            while o + 4 <= g1:
                w0, w1, w2, w3 = w[o, s0:], w[o + 1, s0:], w[o + 2, s0:], w[o + 3, s0:]
                i = 0
                while i + 4 <= m:       # four rows of part at once: each w value read once
                    p0, p1, p2, p3 = part[i], part[i + 1], part[i + 2], part[i + 3]
                    f00, f01, f02, f03 = a[i, o], a[i, o + 1], a[i, o + 2], a[i, o + 3]
                    f10, f11, f12, f13 = a[i + 1, o], a[i + 1, o + 1], a[i + 1, o + 2], \
                        a[i + 1, o + 3]
                    f20, f21, f22, f23 = a[i + 2, o], a[i + 2, o + 1], a[i + 2, o + 2], \
                        a[i + 2, o + 3]
                    f30, f31, f32, f33 = a[i + 3, o], a[i + 3, o + 1], a[i + 3, o + 2], \
                        a[i + 3, o + 3]
                    for t in range(c):
                        v0, v1, v2, v3 = w0[t], w1[t], w2[t], w3[t]
                        p0[t] += f00 * v0 + f01 * v1 + f02 * v2 + f03 * v3
                        p1[t] += f10 * v0 + f11 * v1 + f12 * v2 + f13 * v3
                        p2[t] += f20 * v0 + f21 * v1 + f22 * v2 + f23 * v3
                        p3[t] += f30 * v0 + f31 * v1 + f32 * v2 + f33 * v3
                    i += 4
                for i in range(i, m):
                    ai = a[i]
                    f0, f1, f2, f3 = ai[o], ai[o + 1], ai[o + 2], ai[o + 3]
                    p = part[i]
                    for t in range(c):
                        p[t] += f0 * w0[t] + f1 * w1[t] + f2 * w2[t] + f3 * w3[t]
                o += 4
            for r in range(o, g1):
                wr = w[r, s0:]
                for i in range(m):
                    f = a[i, r]
                    p = part[i]
                    for t in range(c):
                        p[t] += f * wr[t]
            for i in range(m):
                p = part[i]
                row = out[i, s0:]
                for t in range(c):
                    row[t] += p[t]


def _operands(a, b, out, rows):
    return (a.ndim == 2 and 0 < a.shape[0] <= rows
            and b.size >= (MIN_WEIGHTS_ONE_ROW if a.shape[0] == 1 else MIN_WEIGHTS)
            and a.dtype == b.dtype == out.dtype)


def applies(a, b, out):
    """Whether out = a @ b goes to ``product``: a few C-ordered rows, b the transpose of a
    large C-ordered matrix, one float dtype, compiled kernels usable."""
    return (_operands(a, b, out, MAX_ROWS) and b.T.flags.c_contiguous
            and jit.usable(a, b.T, out))


def applies_rows(a, b, out):
    """Whether out = a @ b goes to ``rows_product``: 2-12 C-ordered rows, b a large C-ordered
    matrix, one float dtype, compiled kernels usable."""
    return (_operands(a, b, out, MAX_ROWS_GRADIENT) and a.shape[0] >= MIN_ROWS_GRADIENT
            and jit.usable(a, b, out))


def applies_sums(a, b, out):
    """Whether out += a @ b goes to ``product``: a weight gradient's few sums over a long inner
    dimension (at most MAX_SUMS values out of at most MAX_ROWS_SUMS C-ordered rows of a,
    MIN_SUMS_INNER to MAX_SUMS_INNER long, MAX_SUMS_MACS multiply-adds at most; b the
    transpose of a C-ordered matrix, one float dtype)."""
    return (a.ndim == 2 and 0 < a.shape[0] <= MAX_ROWS_SUMS and out.size <= MAX_SUMS
            and MIN_SUMS_INNER <= a.shape[1] <= MAX_SUMS_INNER
            and out.size * a.shape[1] <= MAX_SUMS_MACS and a.dtype == b.dtype == out.dtype
            and b.T.flags.c_contiguous and jit.usable(a, b.T, out))


def _dots_parts(bounds, a, w, n, out, zero, chunk, accumulate):
    for p in prange(bounds.size - 1):
        _dots(a, w, 4 * bounds[p], min(n, 4 * bounds[p + 1]), out, zero, chunk, accumulate)


def _rows_parts(bounds, a, w, k, out, chunk, group):
    for p in prange(bounds.size - 1):
        part = numpy.empty((a.shape[0], chunk), out.dtype)
        _rows(a, w, bounds[p] * chunk, min(k, bounds[p + 1] * chunk), out, part, chunk, group)


def product(a, b, out, accumulate=False):
    """out = a @ b (``accumulate``: out += a @ b) for ``applies`` or ``applies_sums`` operands,
    the rows of b.T split across threads in fours."""
    n = out.shape[1]
    for_native(_dots_parts, -(-n // 4), b.size, a, b.T, n, out, out.dtype.type(0),
               min(CHUNK, a.shape[1]), accumulate)
    return out


def rows_product(a, b, out):
    """out = a @ b for ``applies_rows`` operands, chunks of b's columns split across threads
    (one a thread for a large b)."""
    k = b.shape[1]
    chunk = max(64, -(-k // (64 * num_threads())) * 64)
    if b.size < STREAM_WEIGHTS:
        chunk = min(ROWS_CHUNK, chunk)
    for_native(_rows_parts, -(-k // chunk), b.size, a, b, k, out, chunk, GROUP)
    return out
