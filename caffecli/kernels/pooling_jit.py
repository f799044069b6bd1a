"""MAX and AVE pooling on the host as compiled loops (kernels/jit.py), as Caffe's
pooling_layer.cpp loops: one pass over each window, no padded copy, no per-offset
temporaries. kernels/pooling.py stays the reference and the path for device arrays.

Results agree with the reference: the same first-maximum-wins rule and winning offsets, and
gradients added in Caffe's order (outputs in row order), which can differ from the reference's
order by a rounding.
"""
import numpy

from .jit import prange
from .threads import for_native

FLT_MAX = float(numpy.finfo(numpy.float32).max)


def _max_forward_for(square):
    """MAX pooling's forward loops; with ``square`` (a window side known when it compiles) the
    loops over a window inside the image have constant trip counts and unroll: 2-2.4x
    faster on LeNet's 2x2 and CaffeNet's and GoogLeNet's 3x3 windows (2 cores)."""
    def max_forward(x, kh, kw, sh, sw, ph, pw, top, arg):
        if square:
            kh = square
            kw = square
        n, c, h, w = x.shape
        oh, ow = top.shape[2], top.shape[3]
        for i in range(n):
            for j in range(c):
                img = x[i, j]
                for y in range(oh):
                    y0 = y * sh - ph
                    for q in range(ow):
                        x0 = q * sw - pw
                        best = -FLT_MAX
                        won = -1
                        if y0 >= 0 and x0 >= 0 and y0 + kh <= h and x0 + kw <= w:
                            for a in range(kh):          # inside: no bounds to clip
                                for b in range(kw):
                                    if img[y0 + a, x0 + b] > best:
                                        best = img[y0 + a, x0 + b]
                                        won = a * kw + b
                        else:
                            for a in range(max(y0, 0), min(y0 + kh, h)):
                                for b in range(max(x0, 0), min(x0 + kw, w)):
                                    if img[a, b] > best:
                                        best = img[a, b]
                                        won = (a - y0) * kw + (b - x0)
                        top[i, j, y, q] = best
                        arg[i, j, y, q] = won
    return max_forward


def _by_window(make):
    """{window side: make(side)} for 0 (any size) and the sides compiled as constants, each
    named apart so that numba's cache keeps one entry per size."""
    loops = {}
    for square in (0, 2, 3):
        loops[square] = make(square)
        loops[square].__qualname__ = "%s_%d" % (loops[square].__name__, square)
    return loops


_MAX_FORWARD = _by_window(_max_forward_for)


def _max_backward_for(square):
    """MAX pooling's backward: each output's gradient added at its winner; with ``square``
    the winner's row and column come from a division by a constant."""
    def max_backward(dtop, arg, kw, sh, sw, ph, pw, dx):
        if square:
            kw = square
        n, c, oh, ow = dtop.shape
        for i in range(n):
            for j in range(c):
                dx[i, j] = 0
                for y in range(oh):
                    for q in range(ow):
                        won = arg[i, j, y, q]
                        if won >= 0:
                            dx[i, j, y * sh - ph + won // kw, q * sw - pw + won % kw] += \
                                dtop[i, j, y, q]
    return max_backward


_MAX_BACKWARD = _by_window(_max_backward_for)


def _ave_forward_for(square):
    """AVE pooling's forward loops, a window inside the image summed without clipping (and,
    with ``square``, with constant trip counts, as for MAX); each sum in the data's
    precision, in Caffe's order."""
    def ave_forward(x, kh, kw, sh, sw, ph, pw, top):
        if square:
            kh = square
            kw = square
        n, c, h, w = x.shape
        oh, ow = top.shape[2], top.shape[3]
        zero = top.dtype.type(0.0)
        for i in range(n):
            for j in range(c):
                img = x[i, j]
                for y in range(oh):
                    y0 = y * sh - ph
                    y1 = min(y0 + kh, h + ph)
                    for q in range(ow):
                        x0 = q * sw - pw
                        x1 = min(x0 + kw, w + pw)
                        size = (y1 - y0) * (x1 - x0)       # padding counts, as in Caffe
                        total = zero
                        if y0 >= 0 and x0 >= 0 and y0 + kh <= h and x0 + kw <= w:
                            for a in range(kh):
                                for b in range(kw):
                                    total += img[y0 + a, x0 + b]
                        else:
                            for a in range(max(y0, 0), min(y1, h)):
                                for b in range(max(x0, 0), min(x1, w)):
                                    total += img[a, b]
                        top[i, j, y, q] = total / size
    return ave_forward


def _ave_backward(dtop, kh, kw, sh, sw, ph, pw, dx):
    """Each output's gradient divided by its window's size in the data's type (as Caffe's
    top_diff / pool_size: numba would keep the quotient in float64), then added to the
    window's inputs in Caffe's order."""
    n, c, oh, ow = dtop.shape
    h, w = dx.shape[2], dx.shape[3]
    rounded = numpy.empty(1, dx.dtype)
    for i in range(n):
        for j in range(c):
            dx[i, j] = 0
            for y in range(oh):
                y0 = y * sh - ph
                y1 = min(y0 + kh, h + ph)
                for q in range(ow):
                    x0 = q * sw - pw
                    x1 = min(x0 + kw, w + pw)
                    rounded[0] = dtop[i, j, y, q] / ((y1 - y0) * (x1 - x0))
                    share = rounded[0]
                    for a in range(max(y0, 0), min(y1, h)):
                        for b in range(max(x0, 0), min(x1, w)):
                            dx[i, j, a, b] += share


_AVE_FORWARD = _by_window(_ave_forward_for)


def _for_window(loops, geo):
    """The loops compiled for this window's size, where there are such, else the general."""
    kh, kw = geo.kernel
    return loops.get(kh if kh == kw else 0, loops[0])


def _geometry(geo):
    (kh, kw), (sh, sw), (ph, pw) = geo.kernel, geo.stride, geo.pad
    return kh, kw, sh, sw, ph, pw


def _parts_for(name, loops, make):
    """{window side: a driver over images (threads.for_native) of ``loops``' kernel for it},
    named apart for numba's cache as the kernels are."""
    drivers = {}
    for square, loop in loops.items():
        drivers[square] = make(loop)
        drivers[square].__qualname__ = "%s_parts_%d" % (name, square)
    return drivers


def _max_forward_parts(loop):
    def max_forward_parts(bounds, x, kh, kw, sh, sw, ph, pw, top, arg):
        for p in prange(bounds.size - 1):
            a, b = bounds[p], bounds[p + 1]
            loop(x[a:b], kh, kw, sh, sw, ph, pw, top[a:b], arg[a:b])
    return max_forward_parts


def _max_backward_parts(loop):
    def max_backward_parts(bounds, dtop, arg, kw, sh, sw, ph, pw, dx):
        for p in prange(bounds.size - 1):
            a, b = bounds[p], bounds[p + 1]
            loop(dtop[a:b], arg[a:b], kw, sh, sw, ph, pw, dx[a:b])
    return max_backward_parts


def _ave_forward_parts(loop):
    def ave_forward_parts(bounds, x, kh, kw, sh, sw, ph, pw, top):
        for p in prange(bounds.size - 1):
            a, b = bounds[p], bounds[p + 1]
            loop(x[a:b], kh, kw, sh, sw, ph, pw, top[a:b])
    return ave_forward_parts


def _ave_backward_parts(bounds, dtop, kh, kw, sh, sw, ph, pw, dx):
    for p in prange(bounds.size - 1):
        a, b = bounds[p], bounds[p + 1]
        _ave_backward(dtop[a:b], kh, kw, sh, sw, ph, pw, dx[a:b])


_MAX_FORWARD_PARTS = _parts_for("max_forward", _MAX_FORWARD, _max_forward_parts)
_MAX_BACKWARD_PARTS = _parts_for("max_backward", _MAX_BACKWARD, _max_backward_parts)
_AVE_FORWARD_PARTS = _parts_for("ave_forward", _AVE_FORWARD, _ave_forward_parts)


def max_pool(x, geo, top, arg):
    """top, arg (winning kernel offset, -1 for none) of MAX pooling ``x``, written in place;
    the images split across numba's threads (as are the other three)."""
    for_native(_for_window(_MAX_FORWARD_PARTS, geo), x.shape[0], x.size, x, *_geometry(geo),
               top, arg)


def max_pool_backward(dtop, arg, geo, dx):
    kh, kw, sh, sw, ph, pw = _geometry(geo)
    for_native(_for_window(_MAX_BACKWARD_PARTS, geo), dx.shape[0], dx.size, dtop, arg, kw, sh,
               sw, ph, pw, dx)


def ave_pool(x, geo, top):
    for_native(_for_window(_AVE_FORWARD_PARTS, geo), x.shape[0], x.size, x, *_geometry(geo),
               top)


def ave_pool_backward(dtop, geo, dx):
    for_native(_ave_backward_parts, dx.shape[0], dx.size, dtop, *_geometry(geo), dx)
