"""The elementwise steps Caffe runs through BLAS, rounded as OpenBLAS rounds them: its axpy
and axpby kernels compute a * x + y with a fused multiply-add, one rounding where numpy's
expression rounds twice (Caffe's SGD history update, weight decay, the adaptive solvers'
moving averages, BatchNorm's running variance; kernels/lrn_jit.py's window sums likewise). For
float32 data the product and sum are taken in float64 (the product is exact there) and rounded
once to float32, an FMA's result but for a tie broken twice (about one value in 10^9); float64
data keep numpy's two roundings.
"""
import numpy


def fused(a, x, y):
    """a * x + y (``a`` a scalar or 0-d array, x and y arrays) with one rounding for float32."""
    if y.dtype != numpy.float32:
        return a * x + y
    wide = numpy.float64
    a = a.astype(wide) if hasattr(a, "astype") else wide(a)
    return (a * x.astype(wide) + y.astype(wide)).astype(y.dtype)
