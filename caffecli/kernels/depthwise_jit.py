"""A 2-D convolution with one input channel a group (a depthwise layer: MobileNet's, Xception's;
group = channels) as compiled loops (kernels/jit.py), plane by plane.

Caffe runs such a layer as one GEMM a group, (M/g x kh kw) by (kh kw x positions) on each
image's columns: hundreds of products a few rows high and nine deep, far below BLAS's rate,
after an im2col of every plane. Here each input plane goes once into a small buffer that stays
in cache, zero-bordered and split by stride phase (``_phase_planes``), so that every tap reads
consecutive values and the loops over them vectorize:

- forward: each output value sums its taps' products in Caffe's order (kernel row, then
  column), each rounded as it is added; the bias is added after, then the ReLU where it is fused
  (relu_jit's expression), each in the data's type;
- input gradient: each input value sums the products of the taps that meet it in the order
  Caffe's col2im adds the columns of W^T dy, so with one output a group it has Caffe's bits;
  gathered stride phase by stride phase (the inputs of a phase meet a fixed set of taps, over
  consecutive dy values, as a stride-1 forward does; a tap over dy's zero border adds a zero);
  with several outputs a group each column value sums its outputs' products first;
- weight gradient: each tap's sum over an image's positions (vectorized partial sums), kept per
  image and added to the diff in image order, as Caffe's per-image GEMMs add them.

Each loop runs over whole rows one pitch long (the columns past the output's are computed and
dropped, or zeros in a padded copy of dy), so it is long whatever the map's width. Planes
(image, channel) are split across the threads; every value is computed alike wherever the split
falls, so the bits do not depend on the thread count.
"""
import numpy

from . import conv_jit, jit
from .jit import fast, prange
from .threads import for_native

U = numpy.uint64   # see _phase_planes


def _phase_planes(src, sh, sw, ph, pw, buf):
    """buf (sh, sw, Hq + 1, Wq)[a, b, r, q] = plane src (H, W) zero-padded by (ph, pw) at row
    r sh + a, column q sw + b, zero past its edge (the last row too: flat reads run past the
    output's rows by a few values), where buf's values outside the plane are already zero (a
    zeroed buffer that only this writes into: every plane of one geometry fills the same
    places). Indices are unsigned (U) in the loops over a row's values: numba then adds no
    negative-index test, and they vectorize without a view a row."""
    h, w = src.shape
    hq, wq = buf.shape[2], buf.shape[3]
    into, line = buf.reshape(-1), src.reshape(-1)
    for a in range(sh):
        for b in range(sw):
            first = max(0, -((b - pw) // sw))       # columns q whose x = q sw + b - pw
            end = max(first, min(wq, (w - 1 + pw - b) // sw + 1))   # lies in the plane
            for r in range(max(0, -((a - ph) // sh)), min(hq, (h - 1 + ph - a) // sh + 1)):
                at = ((a * sw + b) * hq + r) * wq
                _copy(line, (r * sh + a - ph) * w + first * sw + b - pw, sw, into, at + first,
                      end - first)


@jit.inlined
def _fill(a, at, count):
    """a[at:at + count] = 0."""
    base = U(at)
    for t in range(U(count)):
        a[base + t] = 0


@jit.inlined
def _copy(src, at, step, dst, to, count):
    """dst[to + t] = src[at + t step] for t < count."""
    s, d = U(at), U(to)
    if step == 1:
        for t in range(U(count)):
            dst[d + t] = src[s + t]
    else:
        k = U(step)
        for t in range(U(count)):
            dst[d + t] = src[s + t * k]


@jit.inlined
def _tap(buf, ky, kx, sh, sw, dh, dw):
    """Where tap (ky, kx) reads in buf's values taken flat: the start of the value under output
    (0, 0), in its phase plane; from there the values under a row of outputs are consecutive,
    and the next row's start one pitch (buf.shape[3]) on."""
    a, b = ky * dh, kx * dw
    hq, wq = buf.shape[2], buf.shape[3]
    return ((a % sh * sw + b % sw) * hq + a // sh) * wq + b // sw


def _taps(buf, kh, kw, sh, sw, dh, dw, starts):
    """starts[ky kw + kx] = _tap(buf, ky, kx, ...) for every tap."""
    for ky in range(kh):
        for kx in range(kw):
            starts[ky * kw + kx] = _tap(buf, ky, kx, sh, sw, dh, dw)


@jit.inlined
def _three_by_three(flat, starts, taps, acc):
    """acc[j] = the nine taps' sum at flat position j of a 3x3 kernel's outputs (rows one pitch
    long), each product rounded and added in Caffe's order, in one loop (no partial sums in
    memory). The taps' values are read at unsigned offsets, not through views: a view costs
    its reference counts, about as much as a 7x7 plane's sums."""
    t0, t1, t2 = U(starts[0]), U(starts[1]), U(starts[2])
    t3, t4, t5 = U(starts[3]), U(starts[4]), U(starts[5])
    t6, t7, t8 = U(starts[6]), U(starts[7]), U(starts[8])
    w0, w1, w2 = taps[0, 0], taps[0, 1], taps[0, 2]
    w3, w4, w5 = taps[1, 0], taps[1, 1], taps[1, 2]
    w6, w7, w8 = taps[2, 0], taps[2, 1], taps[2, 2]
    for j in range(U(acc.size)):
        s = w0 * flat[t0 + j]
        s += w1 * flat[t1 + j]
        s += w2 * flat[t2 + j]
        s += w3 * flat[t3 + j]
        s += w4 * flat[t4 + j]
        s += w5 * flat[t5 + j]
        s += w6 * flat[t6 + j]
        s += w7 * flat[t7 + j]
        s += w8 * flat[t8 + j]
        acc[j] = s


def _forward_planes(x, w, bias, has_bias, rectify, slope, sh, sw, dh, dw, ph, pw, i0, i1, buf,
                    starts, acc, zero, y):
    """y[n, c, o] (oh, ow) for planes i0..i1 (index n * C + c) of x (N, C, H, W), w (C, M/g,
    kh, kw), y (N, C, M/g, oh, ow); acc (oh * Wq,): the sums at a pitch of Wq."""
    channels = x.shape[1]
    mult, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    oh, ow = y.shape[3], y.shape[4]
    pitch = buf.shape[3]
    flat = buf.reshape(-1)
    _taps(buf, kh, kw, sh, sw, dh, dw, starts)
    for item in range(i0, i1):
        n, c = item // channels, item % channels
        _phase_planes(x[n, c], sh, sw, ph, pw, buf)
        for o in range(mult):
            taps = w[c, o]
            if kh == 3 and kw == 3:   # MobileNet's and Xception's kernel
                _three_by_three(flat, starts, taps, acc)
            else:
                for j in range(acc.size):
                    acc[j] = 0
                for k in range(kh * kw):
                    src = flat[starts[k]:]
                    v = taps[k // kw, k % kw]
                    for j in range(acc.size):
                        acc[j] += v * src[j]
            b = bias[c * mult + o] if has_bias else zero   # the data's type: the sum rounds
                                                           # to it before the ReLU
            out = y[n, c, o].reshape(-1)
            for oy in range(oh):
                src, dst = U(oy * pitch), U(oy * ow)
                for t in range(U(ow)):
                    s = acc[src + t]
                    if has_bias:
                        s = s + b
                    if rectify:
                        s = (0.0 if s < 0 else s) + slope * (0.0 if s > 0 else s)
                    out[dst + t] = s


def _pitched(dy, n, c, grads):
    """grads (M/g, oh, Wq) = the planes dy[n, c] (M/g, oh, ow), each row's columns past ow
    zero (grads zeroed before its first plane)."""
    oh, ow, wq = grads.shape[1], dy.shape[4], grads.shape[2]
    into = grads.reshape(-1)
    for o in range(grads.shape[0]):
        src = dy[n, c, o].reshape(-1)
        for r in range(oh):
            _copy(src, r * ow, 1, into, (o * oh + r) * wq, ow)


@fast("reassoc", "contract")
def _weight_gradient_plane(buf, grads, n, c, sh, sw, dh, dw, zero, wsum):
    """wsum[n, c] (M/g, kh, kw) = each tap's sum over the output's positions of grads (M/g,
    oh, Wq) times the phase plane values under them (whole rows: the padded columns add
    zeros)."""
    mult, kh, kw = wsum.shape[2], wsum.shape[3], wsum.shape[4]
    size = U(grads.shape[1] * grads.shape[2])
    flat, g = buf.reshape(-1), grads.reshape(-1)
    for o in range(mult):
        at = U(o) * size
        for ky in range(kh):
            for kx in range(kw):
                src = U(_tap(buf, ky, kx, sh, sw, dh, dw))
                s = zero
                for j in range(size):
                    s += g[at + j] * flat[src + j]
                wsum[n, c, o, ky, kx] = s


def _input_gradient(dy, w, n, c, sh, sw, dh, dw, ph, pw, padded, starts, acc, column, dx):
    """dx[n, c] = the products of w[c] (M/g, kh, kw) with the dy[n, c] (M/g, oh, ow) values
    each input value meets, gathered phase by phase: the inputs of one stride phase (a, b)
    meet only the taps (ky, kx) with ky dh = a, kx dw = b modulo the stride, in consecutive
    dy values, so each phase is a stride-1 sum of its taps in kernel order, as Caffe's col2im
    adds them (a tap over dy's zero border adds a zero). padded (M/g, rows, pitch): dy[n, c]
    with a border of zeros (zeroed before the first plane, the border left so); acc, column
    (Hq pitch,): a phase plane's sums and a tap's values where there are several outputs a
    group."""
    mult, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    oh, ow = dy.shape[3], dy.shape[4]
    height, width = dx.shape[2], dx.shape[3]
    pitch = padded.shape[2]
    top, left = ((kh - 1) * dh) // sh, ((kw - 1) * dw) // sw
    for o in range(mult):
        flat = padded[o].reshape(-1)
        src = dy[n, c, o].reshape(-1)
        for r in range(oh):
            _copy(src, r * ow, 1, flat, (top + r) * pitch + left, ow)
    plane = dx[n, c].reshape(-1)
    for a in range(sh):
        for b in range(sw):
            q0 = max(0, -((a - ph) // sh))   # the phase's rows and columns of inputs
            q1 = min(acc.size // pitch, (height - 1 + ph - a) // sh + 1)
            r0 = max(0, -((b - pw) // sw))
            x0 = r0 * sw + b - pw
            if q1 <= q0 or x0 >= width:
                continue
            base = q0 * pitch
            sums, part = acc[:(q1 - q0) * pitch], column[:(q1 - q0) * pitch]
            count = 0   # this phase's taps in kernel order, where each reads its dy values
            for ky in range(kh):
                for kx in range(kw):
                    if (ky * dh) % sh == a and (kx * dw) % sw == b:
                        starts[2 * count] = ky * kw + kx
                        starts[2 * count + 1] = base + ((top - (ky * dh) // sh) * pitch + left
                                                        - (kx * dw) // sw)
                        count += 1
            if kh == 3 and kw == 3 and count == 9 and mult == 1:   # 3x3 at stride 1
                for k in range(9):
                    starts[k] = starts[2 * k + 1]
                _three_by_three(padded[0].reshape(-1), starts, w[c, 0], sums)
            else:
                _fill(sums, 0, sums.size)
                for t in range(count):
                    k, at = starts[2 * t], starts[2 * t + 1]
                    ky, kx = k // kw, k % kw
                    if mult == 1:
                        _add_product(w[c, 0, ky, kx], padded[0].reshape(-1), at, sums)
                        continue
                    _fill(part, 0, part.size)
                    for o in range(mult):   # the column value: its outputs' products first
                        _add_product(w[c, o, ky, kx], padded[o].reshape(-1), at, part)
                    _add_product(w.dtype.type(1), part, 0, sums)
            count = (width - 1 - x0) // sw + 1
            for q in range(q0, q1):
                y = q * sh + a - ph
                if sw == 1:
                    _copy(sums, (q - q0) * pitch + r0, 1, plane, y * width + x0, count)
                    continue
                into, step, src = U(y * width + x0), U(sw), U((q - q0) * pitch + r0)
                for t in range(U(count)):
                    plane[into + t * step] = sums[src + t]


@jit.inlined
def _add_product(v, src, at, acc):
    """acc[j] += v * src[at + j] for every j of acc (each product rounded, then added)."""
    part = src[at:]
    for j in range(acc.size):
        acc[j] += v * part[j]


def _backward_planes(x, dy, w, sh, sw, dh, dw, ph, pw, weights, down, i0, i1, buf, grads,
                     padded, starts, acc, column, zero, wsum, dx):
    """For planes i0..i1: with ``weights`` wsum[n, c] = the plane's weight gradient, with
    ``down`` dx[n, c] = its input gradient."""
    channels = x.shape[1]
    for item in range(i0, i1):
        n, c = item // channels, item % channels
        if weights:
            _pitched(dy, n, c, grads)
            _phase_planes(x[n, c], sh, sw, ph, pw, buf)
            _weight_gradient_plane(buf, grads, n, c, sh, sw, dh, dw, zero, wsum)
        if down:
            _input_gradient(dy, w, n, c, sh, sw, dh, dw, ph, pw, padded, starts, acc, column,
                            dx)


def _buffer_shape(x, sh, sw, ph, pw):
    """(sh, sw, Hq + 1, Wq): a plane of x padded and split by phase, one spare row."""
    hq = -(-(x.shape[2] + 2 * ph) // sh)
    wq = -(-(x.shape[3] + 2 * pw) // sw)
    return (sh, sw, hq + 1, wq)


def _forward_parts(bounds, x, w, bias, has_bias, rectify, slope, sh, sw, dh, dw, ph, pw, zero,
                   y):
    for p in prange(bounds.size - 1):
        buf = numpy.zeros(_buffer_shape(x, sh, sw, ph, pw), x.dtype)
        starts = numpy.empty(w.shape[2] * w.shape[3], numpy.int64)
        acc = numpy.empty(y.shape[3] * buf.shape[3], x.dtype)
        _forward_planes(x, w, bias, has_bias, rectify, slope, sh, sw, dh, dw, ph, pw, bounds[p],
                        bounds[p + 1], buf, starts, acc, zero, y)


def _backward_parts(bounds, x, dy, w, sh, sw, dh, dw, ph, pw, weights, down, zero, wsum, dx):
    for p in prange(bounds.size - 1):
        shape = _buffer_shape(x, sh, sw, ph, pw)
        kh, kw = w.shape[2], w.shape[3]
        pitch = ((kw - 1) * dw) // sw + shape[3]
        rows = ((kh - 1) * dh) // sh + shape[2]   # Hq + 1: a spare row for the flat reads
        buf = numpy.zeros(shape, x.dtype)   # the buffers' borders: zero once, for every plane
        grads = numpy.zeros((dy.shape[2], dy.shape[3], shape[3]), dy.dtype)
        padded = numpy.zeros((dy.shape[2], rows, pitch), dy.dtype)
        starts = numpy.empty(2 * kh * kw, numpy.int64)
        acc = numpy.empty((shape[2] - 1) * pitch, dy.dtype)
        column = numpy.empty_like(acc)
        _backward_planes(x, dy, w, sh, sw, dh, dw, ph, pw, weights, down, bounds[p],
                         bounds[p + 1], buf, grads, padded, starts, acc, column, zero, wsum, dx)


def _views(x, w, t):
    """w (M, 1, kh, kw) as (C, M/g, kh, kw) and t (N, M, oh, ow) as (N, C, M/g, oh, ow)."""
    c = x.shape[1]
    return w.reshape((c, w.shape[0] // c) + w.shape[2:]), t.reshape(
        (t.shape[0], c, t.shape[1] // c) + t.shape[2:])


def forward(x, w, bias, slope, stride, dilation, pad, y):
    """y (N, M, oh, ow) = x (N, C, H, W) convolved with w (M, 1, kh, kw), group C, plus ``bias``
    (M,) unless None, rectified with ReLU slope ``slope`` unless None; planes split across the
    threads."""
    w5, y5 = _views(x, w, y)
    no_bias = numpy.empty(0, y.dtype) if bias is None else bias
    for_native(_forward_parts, x.shape[0] * x.shape[1], y.size * w.shape[2] * w.shape[3], x,
               w5, no_bias, bias is not None, slope is not None,
               0.0 if slope is None else float(slope), *stride, *dilation, *pad,
               y.dtype.type(0), y5)


def backward(x, dy, w, stride, dilation, pad, wdiff, dx):
    """Add the weight gradient of dy (N, M, oh, ow) to ``wdiff`` (M, 1, kh, kw) unless None,
    and set ``dx`` (N, C, H, W) unless None."""
    w5, dy5 = _views(x, w, dy)
    wsum = numpy.empty((x.shape[0],) + w5.shape if wdiff is not None else (0,) * 5, dy.dtype)
    for_native(_backward_parts, x.shape[0] * x.shape[1], 2 * dy.size * w.shape[2] * w.shape[3],
               x, dy5, w5, *stride, *dilation, *pad, wdiff is not None, dx is not None,
               dy.dtype.type(0), wsum, numpy.empty((0,) * 4, x.dtype) if dx is None else dx)
    if wdiff is not None:   # each image's gradient added in image order, as conv_jit adds them
        jit.kernel(conv_jit._sum_weights)(wsum, wdiff)
