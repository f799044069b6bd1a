"""Per-channel elementwise passes on the host as compiled loops (kernels/jit.py), over
(outer, channels, inner) arrays: Scale's x * s (+ b), BatchNorm's (x - mean) / std and its
global-statistics gradient dy / std, and BatchNorm -> Scale -> ReLU chains each way (with global
statistics, or the batch's: caffecli/fusion.py). One pass each where numpy takes two or three
(Scale in place: the copy its backward needs, the product, the bias), with the same roundings in
the same order, so the values are numpy's bit for bit (Scale's backward sums are Caffe's gemv
and dot calls in OpenBLAS's order, kernels/caffe_gemv_jit.py, as layers/scale.py's reference).
Each call covers channels c0..c1 of every outer item, so threads (kernels/threads.py) take
disjoint channel ranges.

An in-place call (top is bottom) takes a kernel over the one array: a loop reading and writing
what it cannot prove distinct does not vectorize. layers/scale.py and layers/batch_norm.py keep
the numpy code as the reference and for device arrays.
"""
import math

import numpy

from .batch_norm_jit import _forward_moments
from .caffe_gemv_jit import (four_totals, gemv_items, plain_row_sums, plain_rows, scale_row_sums,
                             scale_store)
from .jit import kernel, prange
from .threads import for_native

SUMS_MIN_PART = 1 << 16   # values a thread's part at least of a pass that takes the Scale's sums
                          # in Caffe's order (about 1 ns a value, against about 30 us to hand a
                          # part over): Scale's backward, a BatchNorm -> Scale chain's. At the
                          # elementwise passes' 1M (2-core EPYC, alternating passes, layers run
                          # unfused as pycaffe runs them): MobileNet's Scale backward at batch 4
                          # 16.2 -> 10.9 ms a pass, ResNet-50's at batch 1 6.7 -> 5.0 ms
MOMENTS_BLOCK = 1 << 16   # values of the channels whose moments a chain on the batch's statistics
                          # takes at once: their rows stay in cache for the pass after, and a
                          # small map's channels share one call


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


def _row_sums_scratch(dy):
    """The scratch arrays scale_row_sums and scale_store take for a (outer, channels, inner)
    gradient: a row's products, the per-item sums, ones, the gemv's lanes, one value."""
    outer, inner = dy.shape[0], dy.shape[2]
    return (numpy.empty(inner, dy.dtype), numpy.empty(outer, dy.dtype),
            numpy.ones(max(inner, outer), dy.dtype), numpy.empty(64, dy.dtype),
            numpy.empty(1, dy.dtype))


def _scale_backward(dy, x, s, c0, c1, bias_diff, scale_diff, learned, with_bias, dx):
    """For channels c0..c1: the bias (``with_bias``) and scale gradients of dy and x in
    Caffe's order, then dx = dy * s[c] (dx may be dy: each row is read before it is
    written)."""
    outer, dim, inner = dy.shape
    one, zero = dy.dtype.type(1), dy.dtype.type(0)
    prod, t, ones, lanes, box = _row_sums_scratch(dy)
    for d in range(c0, c1):
        sv = s[d]
        bias_y = bias_diff[d] if with_bias else zero
        for o in range(outer):
            if plain_rows(o, d, outer, dim, inner):
                bias_y, t[o] = plain_row_sums(dy, x, o, d, bias_y, zero)
            else:
                bias_y = scale_row_sums(dy[o, d], x[o, d], o, d, outer, dim, bias_y, prod, t,
                                        ones, lanes, zero, one, box)
            for i in range(inner):
                dx[o, d, i] = dy[o, d, i] * sv
        if with_bias:
            bias_diff[d] = bias_y
        if outer == 1 and dim > 1:   # scale_store's choice, without its call (and the
            scale_diff[d] = t[0]       # references it counts), which costs more than a row
        else:
            scale_store(t, d, outer, dim, inner, learned, scale_diff, ones, lanes, zero)


def scale_backward(dy, x, s, c0, c1, bias_diff, scale_diff, learned, dx=None):
    """For channels c0..c1: bias_diff (unless None) and scale_diff (flat) take their gradients
    as Caffe's Scale layer and its Bias layer compute them (their gemv and dot calls in
    OpenBLAS's order, kernels/caffe_gemv_jit.py; ``learned``: the scale is a parameter whose
    diff accumulates), and dx = dy * s[c], into dy itself without dx."""
    with_bias = bias_diff is not None
    kernel(_scale_backward)(dy, x, s, c0, c1, scale_diff if bias_diff is None else bias_diff,
                            scale_diff, learned, with_bias, dy if dx is None else dx)


# ---- a BatchNorm -> Scale -> ReLU chain in place on one blob (caffecli/fusion.py) ----------
def _chain_forward(y, mean, std, s, b, with_bias, relu, slope, zero, c0, c1, keep):
    """y = relu(((y - mean) / std) * s + b) per channel, keeping the Scale's input: the
    operations of _normalize_in_place, _scale_in_place and relu_jit's forward in turn, each
    rounded to the data's type (its ``zero``) as they round."""
    for o in range(y.shape[0]):
        for d in range(c0, c1):
            m, sd, sv, bv = mean[d], std[d], s[d], b[d]
            row, kept = y[o, d], keep[o, d]
            for i in range(row.shape[0]):
                t = (row[i] - m) / sd
                kept[i] = t
                u = t * sv + bv if with_bias else t * sv
                if relu:
                    u = (zero if u < 0 else u) + slope * (zero if u > 0 else u)
                row[i] = u


def _chain_backward(d, y, keep, s, std, relu, slope, one, zero, c0, c1, bias_diff, scale_diff,
                    with_bias):
    """The chain's gradient in d, in place, a row at a time (it stays in cache between the
    loops): ReLU's step factor from its output y, the Scale's bias and scale gradients of g and
    its input in Caffe's order (``_scale_backward``'s), then g * s / std, each rounded to the
    data's type as the layers round (compiled without reassociation, which could turn
    g * s / std into g * (s / std))."""
    outer, dim, inner = d.shape
    prod, t, ones, lanes, box = _row_sums_scratch(d)
    for c in range(c0, c1):
        sv, sd = s[c], std[c]
        bias_y = bias_diff[c] if with_bias else zero
        for o in range(outer):
            if relu:
                for i in range(inner):
                    v = y[o, c, i]
                    d[o, c, i] = d[o, c, i] * ((one if v > 0 else zero)
                                               + (one if v <= 0 else zero) * slope)
            if plain_rows(o, c, outer, dim, inner):
                bias_y, t[o] = plain_row_sums(d, keep, o, c, bias_y, zero)
            else:
                bias_y = scale_row_sums(d[o, c], keep[o, c], o, c, outer, dim, bias_y, prod, t,
                                        ones, lanes, zero, one, box)
            for i in range(inner):
                d[o, c, i] = d[o, c, i] * sv / sd
        if with_bias:
            bias_diff[c] = bias_y
        if outer == 1 and dim > 1:   # scale_store's choice, without its call (and the
            scale_diff[c] = t[0]       # references it counts), which costs more than a row
        else:
            scale_store(t, c, outer, dim, inner, True, scale_diff, ones, lanes, zero)


def _chain_forward_batch(y, centered, alpha, eps, s, b, with_bias, relu, slope, zero, c0, c1,
                         mean, var, std):
    """The chain's forward in y, in place, where the BatchNorm normalizes by the batch's
    statistics, a few channels at a time (MOMENTS_BLOCK values, which stay in cache between the
    loops): their means and variances and y - mean in ``centered`` (batch_norm_jit's
    ``_forward_moments``), std = sqrt(var + eps), then ``centered`` /= std (BatchNorm's
    normalized output, which is also the Scale's input to keep) and y = relu(centered * s + b),
    each step rounded as the layers'."""
    step = max(1, MOMENTS_BLOCK // (y.shape[0] * y.shape[2]))
    for b0 in range(c0, c1, step):
        b1 = min(c1, b0 + step)
        _forward_moments(y, alpha, zero, b0, b1, mean, var, centered)
        for c in range(b0, b1):
            sd = math.sqrt(var[c] + eps)
            std[c] = sd
            sv, bv = s[c], b[c]
            for o in range(y.shape[0]):
                row, kept = y[o, c], centered[o, c]
                for i in range(row.shape[0]):
                    t = kept[i] / sd
                    kept[i] = t
                    u = t * sv + bv if with_bias else t * sv
                    if relu:
                        u = (zero if u < 0 else u) + slope * (zero if u > 0 else u)
                    row[i] = u


def _chain_backward_batch(d, y, keep, s, std, relu, slope, one, zero, factor, c0, c1,
                          bias_diff, scale_diff, with_bias):
    """The chain's gradient in d, in place, where the BatchNorm normalizes by the batch's
    statistics: a channel at a time, whose rows stay in cache between its two loops. The first
    takes, four items' rows at a time, ReLU's step factor, the Scale's sums and product
    (``_chain_backward``'s) and BatchNorm's two sums of its diff g (the Scale's product) and
    of xn * g in its order (batch_norm_jit's ``_backward_sums``); the second its gradient
    ((xn * dot + total) * factor + g) / std. xn, BatchNorm's normalized output, is the
    Scale's kept input (the same values), read from there. Every step rounds as the layers'
    own."""
    xn = keep
    outer, dim, inner = d.shape
    prod, t, ones, lanes, box = _row_sums_scratch(d)
    block = numpy.empty((4, inner), d.dtype)
    dot_items, total_items = numpy.empty(outer, d.dtype), numpy.empty(outer, d.dtype)
    for c in range(c0, c1):
        sv, sd = s[c], std[c]
        bias_y = bias_diff[c] if with_bias else zero
        for o0 in range(0, outer, 4):
            count = min(4, outer - o0)
            for k in range(count):   # _chain_backward's row steps, written out again: one
                o = o0 + k           # inlined helper for both ran 1.2-3x slower on 7x7 and
                if relu:             # 14x14 rows (helperab.py)
                    for i in range(inner):
                        v = y[o, c, i]
                        d[o, c, i] = d[o, c, i] * ((one if v > 0 else zero)
                                                   + (one if v <= 0 else zero) * slope)
                if plain_rows(o, c, outer, dim, inner):
                    bias_y, t[o] = plain_row_sums(d, keep, o, c, bias_y, zero)
                else:
                    bias_y = scale_row_sums(d[o, c], keep[o, c], o, c, outer, dim, bias_y,
                                            prod, t, ones, lanes, zero, one, box)
                into = block[k]
                for i in range(inner):
                    g = d[o, c, i] * sv
                    d[o, c, i] = g
                    into[i] = xn[o, c, i] * g
            four_totals(block, count, o0 * dim + c, dim, outer * dim, one, zero, dot_items, o0,
                        box)
            four_totals(d[o0:o0 + 4, c], count, o0 * dim + c, dim, outer * dim, one, zero,
                        total_items, o0, box)
        if with_bias:
            bias_diff[c] = bias_y
        if outer == 1 and dim > 1:   # as _chain_backward stores it
            scale_diff[c] = t[0]
        else:
            scale_store(t, c, outer, dim, inner, True, scale_diff, ones, lanes, zero)
        dot = gemv_items(dot_items, c, dim, zero, zero)
        total = gemv_items(total_items, c, dim, zero, zero)
        for o in range(outer):
            for i in range(inner):
                d[o, c, i] = ((xn[o, c, i] * dot + total) * factor + d[o, c, i]) / sd


def chain_forward(y, mean, std, s, b, slope, c0, c1, keep):
    """Channels c0..c1 of (outer, channels, inner) y, in place: BatchNorm's normalization by
    global statistics, Scale's product (+ b unless None), ReLU with ``slope`` unless None;
    ``keep`` receives the Scale's input."""
    t = y.dtype.type
    kernel(_chain_forward)(y, mean, std, s, s if b is None else b, b is not None,
                           slope is not None, t(slope or 0), t(0), c0, c1, keep)


def chain_backward(d, y, keep, s, std, slope, c0, c1, bias_diff, scale_diff):
    """Channels c0..c1 of diff d, in place, back through chain_forward (y: its output,
    ``keep``: the Scale's input); bias_diff (unless None) and scale_diff (flat) take the
    Scale's gradients as its layer computes them (a learned scale)."""
    t = d.dtype.type
    kernel(_chain_backward)(d, y, keep, s, std, slope is not None, t(slope or 0), t(1), t(0),
                            c0, c1, scale_diff if bias_diff is None else bias_diff, scale_diff,
                            bias_diff is not None)


def chain_forward_batch(y, centered, eps, s, b, slope, c0, c1, mean, var, std):
    """Channels c0..c1 of (items, channels, inner) y, in place: BatchNorm by the batch's
    statistics (mean, var and std (channels,) receive them; ``centered`` its normalized output),
    Scale's product (+ b unless None), ReLU with ``slope`` unless None."""
    t = y.dtype.type
    kernel(_chain_forward_batch)(y, centered, t(1.0 / (y.shape[0] * y.shape[2])), t(eps), s,
                                 s if b is None else b, b is not None, slope is not None,
                                 t(slope or 0), t(0), c0, c1, mean, var, std)


def chain_backward_batch(d, y, keep, s, std, slope, c0, c1, bias_diff, scale_diff):
    """``chain_backward`` where the BatchNorm normalizes by the batch's statistics (std: its
    per-channel quotient; ``keep``, the Scale's input, is also its normalized output)."""
    t = d.dtype.type
    factor = t(-1.0 / (d.shape[0] * d.shape[2]))
    kernel(_chain_backward_batch)(d, y, keep, s, std, slope is not None, t(slope or 0),
                                  t(1), t(0), factor, c0, c1,
                                  scale_diff if bias_diff is None else bias_diff, scale_diff,
                                  bias_diff is not None)


def _images_first(src, bias, with_bias, c0, c1, y):
    """y (outer, channels, inner) = src (channels, outer, inner) (+ ``bias`` per channel, one
    rounding) for channels c0..c1: a convolution chunk's product moved into place (LeNet's
    conv1, 2 cores: 0.10-0.12 ms against numpy's 0.15-0.18)."""
    for c in range(c0, c1):
        for o in range(y.shape[0]):
            row, source = y[o, c], src[c, o]
            if with_bias:
                b = bias[c]
                for i in range(row.shape[0]):
                    row[i] = source[i] + b
            else:
                for i in range(row.shape[0]):
                    row[i] = source[i]


# ---- the same over every channel, split across the threads (threads.for_native) ------------
def _images_first_parts(bounds, src, bias, with_bias, y):
    for p in prange(bounds.size - 1):
        _images_first(src, bias, with_bias, bounds[p], bounds[p + 1], y)


def split_images_first(src, bias, y):
    """``_images_first`` of every channel, channels split across the threads."""
    with_bias = bias is not None
    for_native(_images_first_parts, y.shape[1], y.size, src,
               bias if with_bias else numpy.zeros(1, src.dtype), with_bias, y)
