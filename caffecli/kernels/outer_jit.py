"""Products with a short inner dimension written into their output, as compiled loops
(kernels/jit.py): a fully connected layer's weight gradient at a small batch just after a
solver's clear, out = dy.T @ x (CaffeNet's fc6 at batch 10: 4096 x 10 by 10 x 9216; at batch
1 a column times a row).

BLAS with beta 0 first zeroes the whole output in a pass of its own, then adds the product into
it: two passes over a large output (fc6's 151 MB) for little arithmetic. These loops write each
value once, its products chained in the inner dimension's order from zero with fused
multiply-adds, as OpenBLAS's sgemm kernels chain them (SkylakeX's, checked at every length 1 to
12): the same bits (+0.0, never -0.0, for a zero sum). The inner dimension is known when a loop
compiles (one compiled copy per length), so the chain unrolls and the loop over a row's values
vectorizes. 2-core Xeon: fc6 at batch 10 about 21 -> 15 ms, fc7 7.6 -> 5.6 ms, fc6 at batch 1
17-22 -> 11 ms; CaffeNet's solver step 0.97x at batch 10, 0.96x at 4, 0.90-0.92x at 1.
"""
import numpy

from . import jit
from .jit import prange
from .threads import for_native

MAX_INNER = 12        # inner dimension at most: at 16 the loop took 0.83-1.43x BLAS's time
MIN_OUT = 1 << 16     # values out at least (smaller products: BLAS's zeroing costs little)
CHUNK = 512           # columns a pass over the rows: the operand's chunk stays in L1
FLOAT32 = numpy.dtype(numpy.float32)


def _product_for(inner):
    """The loops for an inner dimension of ``inner``: rows r0..r1 of out = aT.T @ b, a chunk
    of columns at a time. Flat views and unsigned indices: numba adds no negative-index wrap,
    so the loop over a row's values vectorizes."""
    def product(aT, b, zero, chunk, r0, r1, out):
        cols = b.shape[1]
        source, target = b.reshape(-1), out.reshape(-1)
        c = numpy.empty(inner, out.dtype)
        for s in range(0, cols, chunk):
            n = numpy.uint64(min(cols, s + chunk) - s)
            for i in range(r0, r1):
                for m in range(inner):
                    c[m] = aT[m, i]
                at = numpy.uint64(i * cols + s)
                for j in range(n):
                    acc = zero
                    for m in range(inner):
                        acc = acc + c[m] * source[numpy.uint64(m * cols + s) + j]
                    target[at + j] = acc
    return jit.fast("contract")(product)


def _parts_for(inner):
    loop = _product_for(inner)

    def product_parts(bounds, aT, b, zero, chunk, out):
        for p in prange(bounds.size - 1):
            loop(aT, b, zero, chunk, bounds[p], bounds[p + 1], out)
    product_parts.__qualname__ = "outer_parts_%d" % inner   # numba's cache files it by name
    return product_parts


def _driver(inner):
    """The driver for an inner dimension of ``inner``, made once."""
    return jit.once((_parts_for, inner), lambda: _parts_for(inner))


def applies(a, b, out):
    """Whether out = a @ b goes to ``product``: an inner dimension of 1 to MAX_INNER, a the
    transpose of a C-ordered array and b C-ordered (a weight gradient's dy.T and x, or x.T
    and dy), out C-ordered with MIN_OUT values at least, all float32 (OpenBLAS's dgemm chains
    inner dimensions of 8 and more otherwise: 0.5% of the values a rounding apart), compiled
    kernels usable."""
    return (a.ndim == 2 and 0 < a.shape[1] <= MAX_INNER and out.size >= MIN_OUT
            and a.dtype == b.dtype == out.dtype == FLOAT32 and jit.usable(a.T, b, out))


def product(a, b, out):
    """out = a @ b for ``applies`` operands, rows split across the threads."""
    for_native(_driver(a.shape[1]), out.shape[0], out.size, a.T, b, out.dtype.type(0),
               CHUNK, out)
    return out
