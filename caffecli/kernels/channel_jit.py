"""Per-channel elementwise passes on the host as compiled loops (kernels/jit.py), over
(outer, channels, inner) arrays: Scale's x * s (+ b), BatchNorm's (x - mean) / std and its
global-statistics gradient dy / std. One pass each where numpy takes two or three (Scale in
place: the copy its backward needs, the product, the bias), with the same roundings in the same
order, so the values are numpy's bit for bit (except Scale's backward sums, taken in float64
in a vectorized order). Each call covers channels c0..c1 of every outer item, so threads
(kernels/threads.py) take disjoint channel ranges.

An in-place call (top is bottom) takes a kernel over the one array: a loop reading and writing
what it cannot prove distinct does not vectorize. layers/scale.py and layers/batch_norm.py keep
the numpy code as the reference and for device arrays.
"""
import numpy

from .jit import kernel


def _scale(x, s, b, with_bias, c0, c1, y):
    for o in range(x.shape[0]):
        for d in range(c0, c1):
            sv, bv = s[d], b[d]
            if with_bias:
                for i in range(x.shape[2]):
                    y[o, d, i] = x[o, d, i] * sv + bv
            else:
                for i in range(x.shape[2]):
                    y[o, d, i] = x[o, d, i] * sv


def _scale_in_place(y, s, b, with_bias, c0, c1, keep):
    for o in range(y.shape[0]):
        for d in range(c0, c1):
            sv, bv = s[d], b[d]
            for i in range(y.shape[2]):
                keep[o, d, i] = y[o, d, i]
            if with_bias:
                for i in range(y.shape[2]):
                    y[o, d, i] = y[o, d, i] * sv + bv
            else:
                for i in range(y.shape[2]):
                    y[o, d, i] = y[o, d, i] * sv


def _normalize(x, mean, std, c0, c1, y):
    for o in range(x.shape[0]):
        for d in range(c0, c1):
            m, sd = mean[d], std[d]
            for i in range(x.shape[2]):
                y[o, d, i] = (x[o, d, i] - m) / sd


def _normalize_in_place(y, mean, std, c0, c1):
    for o in range(y.shape[0]):
        for d in range(c0, c1):
            m, sd = mean[d], std[d]
            for i in range(y.shape[2]):
                y[o, d, i] = (y[o, d, i] - m) / sd


def scale(x, s, b, c0, c1, y=None, keep=None):
    """y = x * s[c] (+ b[c] when b is not None) for channels c0..c1; without y, into x itself,
    first copying x into ``keep``. s, b: 1-D, the data's dtype."""
    with_bias = b is not None
    b = s if b is None else b
    if y is None:
        kernel(_scale_in_place)(x, s, b, with_bias, c0, c1, keep)
    else:
        kernel(_scale)(x, s, b, with_bias, c0, c1, y)


def normalize(x, mean, std, c0, c1, y=None):
    """y = (x - mean[c]) / std[c] for channels c0..c1; without y, into x itself."""
    if y is None:
        kernel(_normalize_in_place)(x, mean, std, c0, c1)
    else:
        kernel(_normalize)(x, mean, std, c0, c1, y)


def divide(x, std, c0, c1, y=None):
    """y = x / std[c] for channels c0..c1; without y, into x itself (``normalize`` with a zero
    mean: x - 0 is x, NaN and infinities included)."""
    normalize(x, numpy.zeros_like(std), std, c0, c1, y)


def _scale_backward(dy, x, s, c0, c1, sums, dx):
    for d in range(c0, c1):
        sv = s[d]
        total, dot = 0.0, 0.0  # float64: sums over whole channels stay accurate
        for o in range(dy.shape[0]):
            for i in range(dy.shape[2]):
                g = dy[o, d, i]
                total += g
                dot += g * x[o, d, i]
                dx[o, d, i] = g * sv
        sums[0, d] = total
        sums[1, d] = dot


def _scale_backward_in_place(d_, x, s, c0, c1, sums):
    for d in range(c0, c1):
        sv = s[d]
        total, dot = 0.0, 0.0
        for o in range(d_.shape[0]):
            for i in range(d_.shape[2]):
                g = d_[o, d, i]
                total += g
                dot += g * x[o, d, i]
            for i in range(d_.shape[2]):
                d_[o, d, i] = d_[o, d, i] * sv
        sums[0, d] = total
        sums[1, d] = dot


def scale_backward(dy, x, s, c0, c1, sums, dx=None):
    """For channels c0..c1: sums[0, c] = sum of dy, sums[1, c] = sum of dy * x (the bias and
    scale gradients; float64 ``sums``, vectorized in any order) and dx = dy * s[c], into dy
    itself without dx."""
    if dx is None:
        kernel(_scale_backward_in_place, fastmath={"reassoc", "nsz"})(dy, x, s, c0, c1, sums)
    else:
        kernel(_scale_backward, fastmath={"reassoc", "nsz"})(dy, x, s, c0, c1, sums, dx)
