"""A few rows times a large matrix's transpose, out = a @ w.T, as a compiled loop
(kernels/jit.py): a fully connected layer's forward at a small batch (CaffeNet's fc6 at batch
10: 10 x 9216 by 4096 x 9216).

Such a product reads each weight once and does little with it, so it is bound by how fast the
weights stream in; OpenBLAS's packing runs it at about a third of that (fc6: 19.7 ms where
reading its 151 MB takes 6). Here each thread takes a range of weight rows and dots four of
them at a time with every row of ``a`` (cached), summing in the data's type as BLAS does.
Every output is summed by the same code wherever the thread split falls (ranges start at
multiples of four), so the result does not depend on the thread count.
"""
import numpy

from . import jit
from .jit import kernel
from .threads import for_parts

MAX_ROWS = 16          # rows of a: more make the product compute-bound, BLAS's case
MIN_WEIGHTS = 1 << 22  # values of w (16 MB in float32): smaller ones stay in cache for BLAS


def _dots(a, w, o0, o1, out, zero):
    """out[:, o] = a @ w[o] for o0 <= o < o1, four rows of w at a time."""
    m, k = a.shape
    o = o0
    while o + 4 <= o1:
        w0, w1, w2, w3 = w[o], w[o + 1], w[o + 2], w[o + 3]
        for i in range(m):
            ai = a[i]
            s0, s1, s2, s3 = zero, zero, zero, zero
            for q in range(k):
                v = ai[q]
                s0 += v * w0[q]
                s1 += v * w1[q]
                s2 += v * w2[q]
                s3 += v * w3[q]
            out[i, o], out[i, o + 1], out[i, o + 2], out[i, o + 3] = s0, s1, s2, s3
        o += 4
    for r in range(o, o1):
        wr = w[r]
        for i in range(m):
            ai = a[i]
            s = zero
            for q in range(k):
                s += ai[q] * wr[q]
            out[i, r] = s


def applies(a, b, out):
    """Whether out = a @ b goes here: a few C-ordered rows, b the transpose of a large
    C-ordered matrix, one float dtype, compiled kernels usable."""
    return (a.ndim == 2 and 0 < a.shape[0] <= MAX_ROWS and b.size >= MIN_WEIGHTS
            and a.dtype == b.dtype == out.dtype and b.T.flags.c_contiguous
            and jit.usable(a, b.T, out))


def product(a, b, out):
    """out = a @ b for ``applies`` operands, the rows of b.T split across threads."""
    w, n = b.T, out.shape[1]
    dots = kernel(_dots, fastmath={"reassoc", "contract"})
    zero = out.dtype.type(0)
    quads = -(-n // 4)
    for_parts(numpy, lambda q0, q1: dots(a, w, 4 * q0, min(n, 4 * q1), out, zero), quads,
              b.size)
    return out
