"""LRN on the host as compiled loops (kernels/jit.py), in Caffe's order (lrn_layer.cpp).
Across channels: the scale's window sum runs along the channels (add the channel entering,
subtract the one leaving) and the backward's ratio sum likewise; Caffe's axpy steps there (the
squares into the scale, the ratios' products into the diff) are fused multiply-adds, one
rounding (``wide``: in double for float32 data), without which a quarter of the golden LRN
values were an ulp or so off. Within a channel: Caffe's
composition (square, AVE pooling with its padded divisor, power, product) fused into one pass
over each plane, each step rounded as its layer rounds it, the pooling's sums in its loops'
order. layers/lrn.py keeps numpy code as the reference and for device arrays.

Scalars come in the data's dtype so float32 data is computed in float32, as Caffe does.
With ``roots`` (beta 0.75, float32 data, ``engine: DEFAULT``: layers/lrn.py) scale^-0.75 is
1 / (r sqrt(r)), r = sqrt(scale), in float32, refined by one Newton step in double, in place of
the C library's powf: the plain roots took GoogLeNet's conv2/norm2 power (6M values, 2-core
EPYC) in 1.05 ms against powf's 13.7, most of the layer's forward, and the step adds about 5%
to the layer's forward (10x192x56x56, 2-core Xeon). Rounded once, the refined value is powf's
bits but where powf itself misrounds (126 of 200K values); the plain roots were an ulp off in
half the values (the golden LRN values not Caffe's bits: 821 -> 133 of 3451, 130 with powf).
"""
import numpy

from .jit import prange
from .threads import for_native

wide = numpy.float64   # Caffe's axpy steps (OpenBLAS's fused multiply-adds): one rounding, for
                       # float32 data, taken in double and stored


def _forward(x, size, alpha_over_size, k, neg_beta, roots, scale, powed, y):
    n, c, h, w = x.shape
    pre = (size - 1) // 2
    for i in range(n):
        for a in range(h):
            for b in range(w):
                scale[i, 0, a, b] = k
        for ch in range(min(size - pre, c)):
            for a in range(h):
                for b in range(w):
                    sq = x[i, ch, a, b] * x[i, ch, a, b]
                    scale[i, 0, a, b] = wide(alpha_over_size) * wide(sq) + wide(scale[i, 0, a, b])
        for ch in range(1, c):
            head, tail = ch + size - 1 - pre, ch - 1 - pre
            for a in range(h):
                for b in range(w):
                    scale[i, ch, a, b] = scale[i, ch - 1, a, b]
                    if head < c:
                        sq = x[i, head, a, b] * x[i, head, a, b]
                        scale[i, ch, a, b] = (wide(alpha_over_size) * wide(sq)
                                              + wide(scale[i, ch, a, b]))
                    if tail >= 0:
                        sq = x[i, tail, a, b] * x[i, tail, a, b]
                        scale[i, ch, a, b] = (wide(-alpha_over_size) * wide(sq)
                                              + wide(scale[i, ch, a, b]))
        for ch in range(c):
            for a in range(h):
                for b in range(w):
                    if roots:
                        powed[i, ch, a, b] = _power_075(scale[i, ch, a, b])
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
                    dx[i, ch, a, b] = (wide(-ratio_coef) * wide(x[i, ch, a, b] * accum[a, b])
                                       + wide(dx[i, ch, a, b]))
                    if tail >= 0:
                        accum[a, b] -= ratio[tail, a, b]


def _power_075(v):
    """v^-0.75 for float32 v: 1 / (r sqrt(r)), r = sqrt(v), in float32 as a first guess, then
    one Newton step on y^4 v^3 = 1 in double (y (5 - y^4 v^3) / 4), which the caller's store
    rounds once; 0, inf and NaN keep the guess (pow's values there)."""
    r = numpy.sqrt(v)
    y = numpy.float64(numpy.float32(1) / (r * numpy.sqrt(r)))
    s = numpy.float64(v)
    y2 = y * y
    t = (y2 * y2) * (s * s * s)
    return y * (5.0 - t) * 0.25 if t == t else y


def _window_sums(padded, size, width, out):
    """out[a * width + b] = the sum of the size x size window of the plane ``padded`` (rows
    ``width`` long) at row a, column b, from zero in row-major order: Caffe's AVE pooling's
    order, its clipped-off terms the zeros of the border (adding zero changes no sum). One
    flat loop per window offset, so the adds vectorize; columns past the plane's are unused."""
    for t in range(out.size):
        out[t] = 0
    for da in range(size):
        for db in range(size):
            src = padded[da * width + db:]
            for t in range(out.size):
                out[t] += src[t]


def _within_forward(x, h, w, size, divisor, alpha, neg_beta, roots, one, base, powed, y):
    """Planes of x (planes, H * W): base = alpha * (AVE pool of x^2) + 1, powed = base^-beta,
    y = x * powed (Caffe's square, pool, power and product layers)."""
    pre = (size - 1) // 2
    width = w + size - 1
    squares = numpy.zeros((h + size) * width, dtype=x.dtype)   # its border stays 0
    sums = numpy.empty(h * width, dtype=x.dtype)
    for i in range(x.shape[0]):
        xi, v, p, yi = x[i], base[i], powed[i], y[i]
        for a in range(h):
            src, dst = xi[a * w:], squares[(a + pre) * width + pre:]
            for b in range(w):
                dst[b] = src[b] * src[b]
        _window_sums(squares, size, width, sums)
        for a in range(h):
            src, d, dst = sums[a * width:], divisor[a * w:], v[a * w:]
            for b in range(w):
                dst[b] = src[b] / d[b] * alpha + one
        if roots:
            for t in range(v.size):
                p[t] = _power_075(v[t])
        else:
            for t in range(v.size):
                p[t] = v[t] ** neg_beta
        for t in range(v.size):
            yi[t] = xi[t] * p[t]


def _within_backward(x, dy, base, powed, h, w, size, divisor, diff_scale, two, dx):
    """dx of ``_within_forward`` from dy, by Caffe's chain: the product's gradients, the
    power's (powed / base * diff_scale), the AVE pooling's (each output's share added to its
    window in the loops' order: for an input, the windows' from the top left), the square's
    (2x), the split's sum."""
    pre = (size - 1) // 2
    width = w + size - 1
    shares = numpy.zeros((h + size) * width, dtype=x.dtype)   # its border stays 0
    sums = numpy.empty(h * width, dtype=x.dtype)
    share = numpy.empty(h * w, dtype=x.dtype)
    for i in range(x.shape[0]):
        xi, gi, pi, bi, di = x[i], dy[i], powed[i], base[i], dx[i]
        for t in range(share.size):
            share[t] = xi[t] * gi[t] * (pi[t] / bi[t] * diff_scale) / divisor[t]
        for a in range(h):
            src, dst = share[a * w:], shares[(a + pre) * width + pre:]
            for b in range(w):
                dst[b] = src[b]
        _window_sums(shares, size, width, sums)
        for a in range(h):
            xs, gs, ps, ss, dst = xi[a * w:], gi[a * w:], pi[a * w:], sums[a * width:], \
                di[a * w:]
            for b in range(w):
                dst[b] = ps[b] * gs[b] + ss[b] * (two * xs[b])


def _within_forward_parts(bounds, x, h, w, size, divisor, alpha, neg_beta, roots, one, base,
                          powed, y):
    for p in prange(bounds.size - 1):
        a, b = bounds[p], bounds[p + 1]
        _within_forward(x[a:b], h, w, size, divisor, alpha, neg_beta, roots, one, base[a:b],
                        powed[a:b], y[a:b])


def _within_backward_parts(bounds, x, dy, base, powed, h, w, size, divisor, diff_scale, two,
                           dx):
    for p in prange(bounds.size - 1):
        a, b = bounds[p], bounds[p + 1]
        _within_backward(x[a:b], dy[a:b], base[a:b], powed[a:b], h, w, size, divisor,
                         diff_scale, two, dx[a:b])


def _forward_parts(bounds, x, size, alpha_over_size, k, neg_beta, roots, scale, powed, y):
    for p in prange(bounds.size - 1):
        a, b = bounds[p], bounds[p + 1]
        _forward(x[a:b], size, alpha_over_size, k, neg_beta, roots, scale[a:b], powed[a:b], y[a:b])


def _backward_parts(bounds, x, y, dy, scale, powed, size, ratio_coef, dx):
    for p in prange(bounds.size - 1):
        a, b = bounds[p], bounds[p + 1]
        _backward(x[a:b], y[a:b], dy[a:b], scale[a:b], powed[a:b], size, ratio_coef, dx[a:b])


def forward(x, size, alpha, beta, k, scale, powed, y, roots=False):
    """y, scale (k + alpha / size * window sum of squares) and powed (scale^-beta, which the
    backward reuses) of ACROSS_CHANNELS LRN; the images split across numba's threads. With
    ``roots`` (beta 0.75, float32) scale^-beta by refined square roots (``_power_075``)."""
    dt = x.dtype.type
    for_native(_forward_parts, x.shape[0], x.size, x, size, dt(alpha) / dt(size), dt(k),
               dt(-beta), bool(roots), scale, powed, y)


def backward(x, y, dy, scale, powed, size, alpha, beta, dx):
    dt = x.dtype.type
    for_native(_backward_parts, x.shape[0], x.size, x, y, dy, scale, powed, size,
               dt(2 * alpha * beta / size), dx)


def _planes(*arrays):
    return [a.reshape(a.shape[0] * a.shape[1], -1) for a in arrays]


def within_forward(x, size, divisor, alpha, beta, base, powed, y, roots=False):
    """WITHIN_CHANNEL LRN: y, base (alpha * the window's AVE of x^2 + 1, ``divisor`` Caffe's
    pool sizes (H, W)) and powed (base^-beta), kept for the backward; planes split across
    numba's threads. With ``roots`` (beta 0.75, float32) base^-beta by ``_power_075``."""
    dt = x.dtype.type
    h, w = x.shape[2:]
    flat = _planes(x, base, powed, y)
    for_native(_within_forward_parts, flat[0].shape[0], x.size * size * size, flat[0], h, w,
               size, divisor.reshape(-1), dt(alpha), dt(-beta), bool(roots), dt(1), *flat[1:])


def within_backward(x, dy, base, powed, size, divisor, alpha, beta, dx):
    """dx of ``within_forward``; Caffe's power layer scales by -beta * alpha rounded in the
    data's type."""
    dt = x.dtype.type
    h, w = x.shape[2:]
    flat = _planes(x, dy, base, powed)
    for_native(_within_backward_parts, flat[0].shape[0], x.size * size * size, *flat, h, w,
               size, divisor.reshape(-1), dt(-beta) * dt(alpha), dt(2), _planes(dx)[0])
