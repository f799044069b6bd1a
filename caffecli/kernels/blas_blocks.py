"""A product on the calling thread's OpenBLAS in blocks of rows its small-matrix kernels take
without packing (its AVX-512 kernels have them; elsewhere the product runs whole): the
per-image and per-tile products that kernels/conv_jit.py and kernels/winograd.py call from
compiled loops while kernels/blas_threads.py holds BLAS to one thread (numba's numpy.dot:
scipy's OpenBLAS)."""
import numpy

from . import blas_threads, jit

SMALL_KERNEL_CORES = frozenset(["skylakex", "cooperlake", "sapphirerapids"])
SMALL_MACS = 1000000   # OpenBLAS's small-matrix kernels take a product of at most this many
SMALL_MIN_ROWS = 8     # multiply-adds; blocks of fewer rows, or more than SMALL_MAX_BLOCKS of
SMALL_MAX_BLOCKS = 32  # them, run slower than the whole product (one thread, EPYC, GFLOP/s whole
                       # -> blocked: 32x75 @ 75x1024 57 -> 104, 50x500 @ 500x64 91 -> 115,
                       # 2400x64 @ 64x196 95 -> 111; 384x256 @ 256x490 93 whole, 39 in 49
                       # blocks of 7-8 rows; 1200x128 @ 128x729 89 whole, 74 in 150 of 8)


def small_macs():
    """SMALL_MACS where every loaded OpenBLAS runs kernels with small-matrix paths (its AVX-512
    ones), else 0: without them a block is packed like any product, and blocks ran up to 3x
    slower than the whole (OPENBLAS_CORETYPE=Haswell on the Zen 5 EPYC, one thread, GFLOP/s
    whole -> blocked: 192x192 @ 192x490 122 -> 40, 32x75 @ 75x1024 85 -> 50)."""
    def find():
        names = blas_threads.core_names() if blas_threads.available() else []
        return SMALL_MACS if names and SMALL_KERNEL_CORES.issuperset(names) else 0
    return jit.once(small_macs, find)


def block_rows(rows, inner, cols, small):
    """Rows per block of a (rows, inner) @ (inner, cols) product: a multiple of 4 that keeps a
    block to ``small`` multiply-adds (small_macs()), where that takes at most SMALL_MAX_BLOCKS
    blocks of at least SMALL_MIN_ROWS rows; else ``rows`` (the whole product at once)."""
    fit = small // max(1, inner * cols)
    step = fit - fit % 4   # the kernels run best on 4, 8, 12 or 16 rows, not 10 or 11
    if rows <= fit or step < SMALL_MIN_ROWS or rows > step * SMALL_MAX_BLOCKS:
        return max(rows, 1)
    return step


def blocked_product(a, b, out, small):
    """out = a @ b, in blocks of ``block_rows`` rows (none where ``small`` is 0)."""
    rows = a.shape[0]
    step = block_rows(rows, a.shape[1], b.shape[1], small)
    for r0 in range(0, rows, step):
        r1 = min(rows, r0 + step)
        numpy.dot(a[r0:r1], b, out[r0:r1])
