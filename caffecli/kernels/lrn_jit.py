"""Cross-channel LRN on the host as compiled loops (kernels/jit.py), in Caffe's order
(lrn_layer.cpp): the scale's window sum runs along the channels (add the channel entering,
subtract the one leaving) and the backward's ratio sum likewise. layers/lrn.py keeps numpy
code as the reference and for device arrays.

Scalars come in the data's dtype so float32 data is computed in float32, as Caffe does.
With ``roots`` (beta 0.75, ``engine: DEFAULT``: layers/lrn.py) scale^-0.75 is 1 / (r sqrt(r)),
r = sqrt(scale), in place of pow: on GoogLeNet's conv2/norm2 (6M values, 2-core EPYC) 1.05
against 13.7 ms, most of the layer's forward, for about an ulp off pow in half the values.
"""
import numpy

from .jit import prange
from .threads import for_native


def _forward(x, size, alpha_over_size, k, neg_beta, roots, one, scale, powed, y):
    n, c, h, w = x.shape
    pre = (size - 1) // 2
    for i in range(n):
        for a in range(h):
            for b in range(w):
                scale[i, 0, a, b] = k
        for ch in range(min(size - pre, c)):
            for a in range(h):
                for b in range(w):
                    scale[i, 0, a, b] += x[i, ch, a, b] * x[i, ch, a, b] * alpha_over_size
        for ch in range(1, c):
            head, tail = ch + size - 1 - pre, ch - 1 - pre
            for a in range(h):
                for b in range(w):
                    v = scale[i, ch - 1, a, b]
                    if head < c:
                        v += x[i, head, a, b] * x[i, head, a, b] * alpha_over_size
                    if tail >= 0:
                        v -= x[i, tail, a, b] * x[i, tail, a, b] * alpha_over_size
                    scale[i, ch, a, b] = v
        for ch in range(c):
            for a in range(h):
                for b in range(w):
                    if roots:
                        r = numpy.sqrt(scale[i, ch, a, b])
                        powed[i, ch, a, b] = one / (r * numpy.sqrt(r))
                    else:
                        powed[i, ch, a, b] = scale[i, ch, a, b] ** neg_beta
                    y[i, ch, a, b] = x[i, ch, a, b] * powed[i, ch, a, b]


def _backward(x, y, dy, scale, powed, size, ratio_coef, dx):
    n, c, h, w = x.shape
    pre = (size - 1) // 2
    ratio = numpy.empty((c, h, w), dtype=x.dtype)
    accum = numpy.empty((h, w), dtype=x.dtype)
    for i in range(n):
        for ch in range(c):
            for a in range(h):
                for b in range(w):
                    dx[i, ch, a, b] = powed[i, ch, a, b] * dy[i, ch, a, b]
                    ratio[ch, a, b] = dy[i, ch, a, b] * y[i, ch, a, b] / scale[i, ch, a, b]
        accum[:, :] = 0
        for ch in range(min(size - 1 - pre, c)):
            for a in range(h):
                for b in range(w):
                    accum[a, b] += ratio[ch, a, b]
        for ch in range(c):
            head, tail = ch + size - 1 - pre, ch - pre
            for a in range(h):
                for b in range(w):
                    if head < c:
                        accum[a, b] += ratio[head, a, b]
                    dx[i, ch, a, b] += -ratio_coef * (x[i, ch, a, b] * accum[a, b])
                    if tail >= 0:
                        accum[a, b] -= ratio[tail, a, b]


def _forward_parts(bounds, x, size, alpha_over_size, k, neg_beta, roots, one, scale, powed, y):
    for p in prange(bounds.size - 1):
        a, b = bounds[p], bounds[p + 1]
        _forward(x[a:b], size, alpha_over_size, k, neg_beta, roots, one, scale[a:b], powed[a:b],
                 y[a:b])


def _backward_parts(bounds, x, y, dy, scale, powed, size, ratio_coef, dx):
    for p in prange(bounds.size - 1):
        a, b = bounds[p], bounds[p + 1]
        _backward(x[a:b], y[a:b], dy[a:b], scale[a:b], powed[a:b], size, ratio_coef, dx[a:b])


def forward(x, size, alpha, beta, k, scale, powed, y, roots=False):
    """y, scale (k + alpha / size * window sum of squares) and powed (scale^-beta, which the
    backward reuses) of ACROSS_CHANNELS LRN; the images split across numba's threads. With
    ``roots`` (beta must be 0.75) scale^-beta by square roots."""
    dt = x.dtype.type
    for_native(_forward_parts, x.shape[0], x.size, x, size, dt(alpha / size), dt(k), dt(-beta),
               bool(roots), dt(1), scale, powed, y)


def backward(x, y, dy, scale, powed, size, alpha, beta, dx):
    dt = x.dtype.type
    for_native(_backward_parts, x.shape[0], x.size, x, y, dy, scale, powed, size,
               dt(2 * alpha * beta / size), dx)
