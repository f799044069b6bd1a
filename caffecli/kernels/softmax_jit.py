"""Softmax over the channel axis of (outer, C, inner) host arrays as compiled loops
(kernels/jit.py), in Caffe's order (softmax_layer.cpp): each position's maximum over the
channels with std::max, x - max, the C library's exp, the channels' sum added one after
another, then the quotient; the backward's dot product over the channels likewise, then
(dy - dot) * y. SoftmaxWithLoss's gradient, (prob - onehot) * valid * scale, in one pass too.
numpy made a temporary of the blob's size for each step (an FCN's 21 x 500 x 500 scores: 37 +
18 ms on 2 cores). kernels/activations.py keeps numpy's code as the reference and for device
arrays; every step rounds as it does, so the values are its bits (NaN inputs aside: numpy's
maximum propagates them, std::max does not).

A thread takes a run of INNER_CHUNK positions of one outer item, so an FCN's single image splits
as well as a classifier's batch, and each position's sums run in the same order on any split.
"""
import math

import numpy

from .caffe_gemv_jit import gemv_items, sdot_kernel
from .jit import prange
from .threads import for_native

INNER_CHUNK = 2048   # positions a part takes at a time: their running maxima and sums in L1


def _forward(x, i, k0, k1, m, s, zero, y):
    """y[i, :, k0:k1] = the softmax of x[i, :, k0:k1] over its channels; m, s: scratch."""
    c = x.shape[1]
    n = k1 - k0
    first = x[i, 0, k0:k1]
    for k in range(n):
        m[k] = first[k]
    for j in range(1, c):
        row = x[i, j, k0:k1]
        for k in range(n):
            v = row[k]
            m[k] = v if m[k] < v else m[k]
    inner = x.shape[2]
    # OpenBLAS's generic path sums the channels in its own order afterwards
    # (caffe_gemv.generic_path); its small kernel's order is the running sum
    generic = c == 4 or c > 48 or inner > 16384
    for k in range(n):
        s[k] = 0
    for j in range(c):
        row, out = x[i, j, k0:k1], y[i, j, k0:k1]
        for k in range(n):
            e = math.exp(row[k] - m[k])
            out[k] = e
            if not generic:
                s[k] += e
    if generic:
        for k in range(n):
            s[k] = gemv_items(y[i, :, k0 + k], k0 + k, inner, zero, zero)
    for j in range(c):
        out = y[i, j, k0:k1]
        for k in range(n):
            out[k] = out[k] / s[k]


def _backward(y, dy, i, k0, k1, s, d, dx):
    """dx[i, :, k0:k1] = (dy - the channels' dot of dy and y) * y; s (data type) and d
    (float64): scratch. The dot is OpenBLAS's sdot as Caffe calls it (caffe_gemv.channel_dots):
    a double total of the products, in pairs (the first fused) along a stride, or the unit
    stride's tail products and then its kernel's sum (caffe_gemv_jit.sdot_kernel)."""
    c = y.shape[1]
    n = k1 - k0
    for k in range(n):
        d[k] = 0.0
    if y.shape[2] > 1 or c < 32:
        pairs = c - c % 2 if y.shape[2] > 1 else 0
        for j in range(0, pairs, 2):
            r0, g0 = y[i, j, k0:k1], dy[i, j, k0:k1]
            r1, g1 = y[i, j + 1, k0:k1], dy[i, j + 1, k0:k1]
            for k in range(n):   # the fused pair, rounded to the data type in s
                s[k] = numpy.float64(r0[k]) * numpy.float64(g0[k]) + numpy.float64(r1[k] * g1[k])
                d[k] += s[k]
        for j in range(pairs, c):
            row, grad = y[i, j, k0:k1], dy[i, j, k0:k1]
            for k in range(n):
                d[k] += row[k] * grad[k]
    else:
        n1 = c - c % 32
        for j in range(n1, c):
            d[0] += y[i, j, 0] * dy[i, j, 0]
        d[0] += sdot_kernel(y[i, :n1, 0], dy[i, :n1, 0], s)
    for k in range(n):
        s[k] = d[k]
    for j in range(c):
        row, grad, out = y[i, j, k0:k1], dy[i, j, k0:k1], dx[i, j, k0:k1]
        for k in range(n):
            out[k] = (grad[k] - s[k]) * row[k]


def _loss_backward(prob, labels, valid, scale, one, zero, i, k0, k1, dx):
    """dx[i, :, k0:k1] = ((prob - onehot(label)) * valid) * scale."""
    c = prob.shape[1]
    for j in range(c):
        p, out = prob[i, j, k0:k1], dx[i, j, k0:k1]
        lab, ok = labels[i, k0:k1], valid[i, k0:k1]
        for k in range(k1 - k0):
            v = p[k] - (one if lab[k] == j else zero)
            out[k] = v * (one if ok[k] else zero) * scale


def _units(x):
    """(parts of positions per outer item, their count)."""
    per_item = -(-x.shape[2] // INNER_CHUNK)
    return per_item, x.shape[0] * per_item


def _span(u, per_item, inner):
    """Work unit u's outer item and its run of positions: (i, k0, k1)."""
    i, k0 = u // per_item, (u % per_item) * INNER_CHUNK
    return i, k0, min(inner, k0 + INNER_CHUNK)


def _forward_parts(bounds, x, per_item, zero, y):
    for p in prange(bounds.size - 1):
        m = numpy.empty(INNER_CHUNK, y.dtype)
        s = numpy.empty(INNER_CHUNK, y.dtype)
        for u in range(bounds[p], bounds[p + 1]):
            i, k0, k1 = _span(u, per_item, x.shape[2])
            _forward(x, i, k0, k1, m, s, zero, y)


def _backward_parts(bounds, y, dy, per_item, dx):
    for p in prange(bounds.size - 1):
        s = numpy.empty(max(INNER_CHUNK, 64), y.dtype)
        d = numpy.empty(INNER_CHUNK, numpy.float64)
        for u in range(bounds[p], bounds[p + 1]):
            i, k0, k1 = _span(u, per_item, y.shape[2])
            _backward(y, dy, i, k0, k1, s, d, dx)


def _loss_backward_parts(bounds, prob, labels, valid, scale, one, zero, per_item, dx):
    for p in prange(bounds.size - 1):
        for u in range(bounds[p], bounds[p + 1]):
            i, k0, k1 = _span(u, per_item, prob.shape[2])
            _loss_backward(prob, labels, valid, scale, one, zero, i, k0, k1, dx)


def forward(x, y):
    """y = softmax of x (outer, C, inner) over axis 1 (C-ordered float host arrays)."""
    per_item, units = _units(x)
    for_native(_forward_parts, units, x.size, x, per_item, x.dtype.type(0), y)
    return y


def backward(y, dy, dx):
    """dx = the softmax's input gradient from its top y and top diff dy (outer, C, inner)."""
    per_item, units = _units(y)
    for_native(_backward_parts, units, y.size, y, dy, per_item, dx)
    return dx


def loss_backward(prob, labels, valid, scale, dx):
    """dx (outer, C, inner) = ((prob - onehot(labels)) * valid) * scale: SoftmaxWithLoss's
    gradient; labels (outer, inner) int64, valid (outer, inner) bool, scale in the data's
    dtype."""
    t = prob.dtype.type
    per_item, units = _units(prob)
    for_native(_loss_backward_parts, units, prob.size, prob, labels, valid, t(scale), t(1), t(0),
               per_item, dx)
    return dx
