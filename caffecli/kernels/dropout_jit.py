"""Dropout's TRAIN passes on the host as compiled loops (kernels/jit.py), split across the
kernel threads: from the stream's words (caffe_rng), the keep mask (Caffe's CPU test: the word
<= p * (2^32 - 1) in double) and the top, (x * mask) * scale, in one pass; the gradient
(dy * mask) * scale in one. The same roundings as the layer's array code, which numpy ran as
five blob-sized temporaries forward and two backward."""
from . import jit


def _forward(words, threshold, x, scale, one, zero, mask, y):
    for i in range(x.size):
        m = one if words[i] <= threshold else zero
        mask[i] = m
        y[i] = x[i] * m * scale


def _backward(dy, mask, scale, dx):
    for i in range(dy.size):
        dx[i] = dy[i] * mask[i] * scale


def forward(words, threshold, x, scale, mask, y):
    """mask = 1 where words (one a value) <= ``threshold`` (float64), else 0, and
    y = x * mask * scale, all flat host arrays of one size (y may be x)."""
    t = x.dtype.type
    jit.over_parts(jit.kernel(_forward), words, threshold, x, t(scale), t(1), t(0), mask, y)


def backward(dy, mask, scale, dx):
    """dx = dy * mask * scale (flat host arrays of one size; dx may be dy)."""
    jit.over_parts(jit.kernel(_backward), dy, mask, dy.dtype.type(scale), dx)
