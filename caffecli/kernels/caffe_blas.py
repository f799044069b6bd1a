"""Caffe's BLAS reductions as its CPU code calls them, on whichever side the arrays live: on
the host in OpenBLAS's order (kernels/caffe_gemv.py, the numpy reference, compiled in
kernels/caffe_gemv_jit.py where numba is), on the device one kernel (kernels/channel_sums.py)
or the array module's sum. The bias gradients' gemvs into the diff, caffe_cpu_dot and
caffe_cpu_asum."""
import numpy

from . import caffe_gemv, caffe_gemv_jit, jit
from .channel_sums import channel_sums


def gemv_rows(xp, x, out, moved=None):
    """out (channels,) += the sum of x (outer, channels, inner) over its outer and inner axes,
    as Caffe's gemv(CblasNoTrans) of each outer item's (channels, inner) rows into the diff
    (beta 1), item after item: Convolution's, Deconvolution's and Bias's gradients. With
    ``moved`` (host; channels, outer, inner): x's rows copied there too, in the same pass."""
    if moved is None and channel_sums(xp, x, out):
        return
    if jit.usable(x, out, *(() if moved is None else (moved,))):
        caffe_gemv_jit.add_image_rows(x, out, moved)
        return
    if moved is not None:
        moved[...] = x.transpose(1, 0, 2)
    if xp is not numpy:
        out += x.sum(axis=(0, 2))
        return
    for o in range(x.shape[0]):
        out[...] = caffe_gemv.row_totals(x[o], 1, out)


def gemv_columns(xp, t, out):
    """out (channels,) += the sum of t (items, channels) over its items, as Caffe's
    gemv(CblasTrans) into the diff (beta 1): InnerProduct's and Embed's bias gradients."""
    if channel_sums(xp, t.reshape(t.shape + (1,)), out):
        return
    if jit.usable(t, out):
        caffe_gemv_jit.add_item_totals(t, out)
    elif xp is numpy:
        out[...] = caffe_gemv.item_totals(t, out)
    else:
        out += t.sum(axis=0)


def dot(a, b):
    """caffe_cpu_dot(a, b) of two arrays of one size, in their data type (a device array's by
    its array module's sum)."""
    if not isinstance(a, numpy.ndarray):
        return (a * b).sum()
    if jit.usable(a, b):
        return caffe_gemv_jit.dot(a, b)
    return caffe_gemv.dot(numpy.ascontiguousarray(a), numpy.ascontiguousarray(b))


def asum(x):
    """caffe_cpu_asum(x), in its data type (a device array's by its array module's sum)."""
    if not isinstance(x, numpy.ndarray):
        return abs(x).sum()
    if jit.usable(x):
        return caffe_gemv_jit.asum(x)
    return caffe_gemv.asum(numpy.ascontiguousarray(x))
