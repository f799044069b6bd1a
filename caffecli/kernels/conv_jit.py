"""A 2-D convolution one image at a time as compiled loops (kernels/jit.py), as Caffe runs it:
each image's columns go to a small buffer that stays in cache, and its products to BLAS from
the compiled loop (numba's numpy.dot: scipy's OpenBLAS), written straight into the blobs.

Over a batch, im2col and one wide GEMM (layers/convolution.py) suit most layers, but where the
GEMM's inner dimension is a few dozen (LeNet's conv1: 20 x 25 by 25 x 36864) it runs far below
BLAS's peak while its operands stream through memory, and its product must then move to the
blob's layout. LeNet's conv1 in its pass on the 2-core EPYC: forward 0.96 -> 0.53 ms, backward
1.17 -> 0.71 ms.

Every OpenBLAS product runs on its caller's thread meanwhile (kernels/blas_threads.py), in
blocks of rows that OpenBLAS's small-matrix kernels take without packing, where it has them
(kernels/blas_blocks.py).
Images are split across the threads. The weight gradient's products are kept per image and
summed in image order afterwards (Caffe's order: one image's product added to the diff after
another), so the bits do not depend on the thread count.
"""
import numpy

from . import blas_blocks, blas_threads, jit
from .blas_blocks import blocked_product
from .caffe_gemv_jit import add_parts, matrix_row_parts, row_part_count
from .im2col_jit import _col2im, _col2im_phased, _strided_rows
from .jit import prange
from .threads import for_native


def _columns(x, i, sh, sw, dh, dw, ph, pw, col):
    """col (C, kh, kw, 1, oh, ow) = the windows of image i of x (N, C, H, W)."""
    _strided_rows(x[i:i + 1], sh, sw, dh, dw, ph, pw, 0, x.shape[1], 0, 1, col)


def _buffers(x, w, t, kh, kw):
    """A column buffer (C, kh, kw, 1, oh, ow) for one image and its (g, K, oh * ow) view; t
    (N, M, oh, ow) viewed as (N, g, M/g, oh * ow) and as (N, M, oh * ow)."""
    g, mg, k = w.shape
    n, m, oh, ow = t.shape
    col = numpy.empty((x.shape[1], kh, kw, 1, oh, ow), x.dtype)
    return (col, col.reshape(g, k, oh * ow), t.reshape(n, g, mg, oh * ow),
            t.reshape(n, m, oh * ow))


def _forward(x, w, bias, rectify, slope, kh, kw, sh, sw, dh, dw, ph, pw, small, n0, n1, y):
    """y[n0:n1] (N, M, oh, ow) = images n0..n1 of x convolved with w (g, M/g, K), plus ``bias``
    where it has values, then with ``rectify`` the ReLU of ``slope`` (relu_jit's expression);
    ``small``: blas_blocks.small_macs()."""
    col, cols, out, flat = _buffers(x, w, y, kh, kw)
    g, m, size = w.shape[0], flat.shape[1], flat.shape[2]
    for i in range(n0, n1):
        _columns(x, i, sh, sw, dh, dw, ph, pw, col)
        for j in range(g):
            blocked_product(w[j], cols[j], out[i, j], small)
        if bias.size or rectify:
            for c in range(m):
                plane = flat[i, c]
                for t in range(size):
                    v = plane[t]
                    if bias.size:   # in the data's type: the sum rounds before the ReLU
                        v = v + bias[c]
                    if rectify:
                        v = (0.0 if v < 0 else v) + slope * (0.0 if v > 0 else v)
                    plane[t] = v


def _backward(x, dy, w, wt, kh, kw, sh, sw, dh, dw, ph, pw, weights, biases, down, convolve,
              small, n0, n1, wsum, bparts, zero, dx, y):
    """For images n0..n1: with ``weights`` wsum[i] (g, M/g, K) = image i's weight gradient, with
    ``biases`` bparts[i, c] the sums Caffe's bias gemv adds for image i's row c
    (caffe_gemv_jit.matrix_row_parts), with ``down`` dx[i] = its input gradient (col2im of wt (g, K,
    M/g) @ dy[i]), with ``convolve`` y[i] (M, oh, ow) = x[i] convolved, from the weight
    gradient's columns (Deconvolution's input gradient); w (g, M/g, K) the filters."""
    col, cols, grads, flat = _buffers(x, w, dy, kh, kw)
    g = w.shape[0]
    out = y.reshape(grads.shape)
    box = numpy.empty(1, dy.dtype)
    for i in range(n0, n1):
        if weights or convolve:
            _columns(x, i, sh, sw, dh, dw, ph, pw, col)
        for j in range(g):
            if weights:
                blocked_product(grads[i, j], cols[j].T, wsum[i, j], small)
            if convolve:
                blocked_product(w[j], cols[j], out[i, j], small)
        if biases:
            matrix_row_parts(flat[i], zero, bparts[i], box)
        if down:
            for j in range(g):
                blocked_product(wt[j], grads[i, j], cols[j], small)
            if sh == 1 and sw == 1:
                _col2im(col, dh, dw, ph, pw, 0, x.shape[1], 0, 1, dx[i:i + 1])
            else:
                _col2im_phased(col, sh, sw, dh, dw, ph, pw, 0, x.shape[1], 0, 1, dx[i:i + 1])


def _sum_weights(wsum, wdiff):
    """wdiff += each image's weight gradient in image order (each sum rounded, as Caffe's
    per-image GEMMs add them)."""
    flat = wsum.reshape(wsum.shape[0], -1)
    into = wdiff.reshape(-1)
    for i in range(flat.shape[0]):
        for t in range(into.size):
            into[t] += flat[i, t]


def _forward_parts(bounds, x, w, bias, rectify, slope, kh, kw, sh, sw, dh, dw, ph, pw, small,
                   y):
    for p in prange(bounds.size - 1):
        _forward(x, w, bias, rectify, slope, kh, kw, sh, sw, dh, dw, ph, pw, small, bounds[p],
                 bounds[p + 1], y)


def _backward_parts(bounds, x, dy, w, wt, kh, kw, sh, sw, dh, dw, ph, pw, weights, biases,
                    down, convolve, small, wsum, bparts, zero, dx, y):
    for p in prange(bounds.size - 1):
        _backward(x, dy, w, wt, kh, kw, sh, sw, dh, dw, ph, pw, weights, biases, down, convolve,
                  small, bounds[p], bounds[p + 1], wsum, bparts, zero, dx, y)


def forward(x, w, bias, slope, kernel, stride, dilation, pad, y):
    """y (N, M, oh, ow) = x (N, C, H, W) convolved with w (g, M/g, K), plus ``bias`` (M,) unless
    None, rectified with ReLU slope ``slope`` unless None; images split across the threads."""
    no_bias = numpy.empty(0, y.dtype) if bias is None else bias
    with blas_threads.one_thread():
        for_native(_forward_parts, x.shape[0], y.size * w.shape[2], x, w, no_bias,
                   slope is not None, 0.0 if slope is None else float(slope), *kernel,
                   *stride, *dilation, *pad, blas_blocks.small_macs(), y)


def backward(x, dy, w, kernel, stride, dilation, pad, wdiff, dx, wsum=None, y=None, bdiff=None):
    """Add the weight gradient of dy (N, M, oh, ow) to ``wdiff`` (g, M/g, K) unless None, and
    set ``dx`` (N, C, H, W) unless None; ``wsum`` (N, g, M/g, K): scratch for the per-image
    weight gradients (where asked for). With ``y`` (dy's shape): x convolved too, from the same
    columns (a Deconvolution's weight and input gradients in one pass). With ``bdiff`` (M,):
    the bias gradient added, as Caffe's per-image gemv adds it (each image's row sums taken
    with its other work, added in image order: caffe_gemv_jit.row_parts)."""
    n = x.shape[0]
    wt = w if dx is None else numpy.ascontiguousarray(w.transpose(0, 2, 1))   # dx's operand
    if wsum is None:
        wsum = numpy.empty((0,) * 4, dy.dtype)
    spatial = dy.shape[2] * dy.shape[3]
    bparts = numpy.empty((n if bdiff is not None else 0, dy.shape[1], row_part_count(spatial)),
                         dy.dtype)
    none = numpy.empty((0,) * 4, x.dtype)
    with blas_threads.one_thread():
        for_native(_backward_parts, n, dy.size * w.shape[2], x, dy, w, wt, *kernel, *stride,
                   *dilation, *pad, wdiff is not None, bdiff is not None, dx is not None,
                   y is not None, blas_blocks.small_macs(), wsum, bparts, dy.dtype.type(0),
                   none if dx is None else dx, dy if y is None else y)
    if wdiff is not None:
        jit.kernel(_sum_weights)(wsum, wdiff)
    if bdiff is not None:
        jit.kernel(add_parts)(bparts, bdiff)
