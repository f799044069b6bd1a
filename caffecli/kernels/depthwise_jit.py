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


@jit.inlined
def _phase_planes(line, at, h, w, sh, sw, ph, pw, into, hq, wq):
    """into, a buffer (sh, sw, Hq + 1, Wq) taken flat: [a, b, r, q] = the plane (H, W) at
    line[at:] zero-padded by (ph, pw) at row r sh + a, column q sw + b, zero past its edge (the
    last row too: flat reads run past the output's rows by a few values), where the values
    outside the plane are already zero (a zeroed buffer that only this writes into: every plane
    of one geometry fills the same places). Indices are unsigned (U) in the loops over a row's
    values: numba then adds no negative-index test, and they vectorize without a view a row
    (a view costs its reference counts, about as much as a 7x7 plane's sums: the kernels take
    whole arrays flat, and offsets)."""
    for a in range(sh):
        for b in range(sw):
            first = max(0, -((b - pw) // sw))       # columns q whose x = q sw + b - pw
            end = max(first, min(wq, (w - 1 + pw - b) // sw + 1))   # lies in the plane
            for r in range(max(0, -((a - ph) // sh)), min(hq, (h - 1 + ph - a) // sh + 1)):
                row = ((a * sw + b) * hq + r) * wq
                _copy(line, at + (r * sh + a - ph) * w + first * sw + b - pw, sw, into,
                      row + first, end - first)


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
def _three_by_three(flat, starts, w, c, o, acc, count):
    """acc[j] (j < count) = the nine taps' sum at flat position j of a 3x3 kernel's outputs
    (rows one pitch long), each product rounded and added in Caffe's order, in one loop (no
    partial sums in memory); taps w[c, o]."""
    t0, t1, t2 = U(starts[0]), U(starts[1]), U(starts[2])
    t3, t4, t5 = U(starts[3]), U(starts[4]), U(starts[5])
    t6, t7, t8 = U(starts[6]), U(starts[7]), U(starts[8])
    w0, w1, w2 = w[c, o, 0, 0], w[c, o, 0, 1], w[c, o, 0, 2]
    w3, w4, w5 = w[c, o, 1, 0], w[c, o, 1, 1], w[c, o, 1, 2]
    w6, w7, w8 = w[c, o, 2, 0], w[c, o, 2, 1], w[c, o, 2, 2]
    for j in range(U(count)):
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
    channels, height, width = x.shape[1], x.shape[2], x.shape[3]
    mult, kh, kw = w.shape[1], w.shape[2], w.shape[3]
    oh, ow = y.shape[3], y.shape[4]
    hq, pitch = buf.shape[2], buf.shape[3]
    flat, line, out = buf.reshape(-1), x.reshape(-1), y.reshape(-1)
    _taps(buf, kh, kw, sh, sw, dh, dw, starts)
    for item in range(i0, i1):
        c = item % channels
        _phase_planes(line, item * height * width, height, width, sh, sw, ph, pw, flat, hq,
                      pitch)
        for o in range(mult):
            if kh == 3 and kw == 3:   # MobileNet's and Xception's kernel
                _three_by_three(flat, starts, w, c, o, acc, acc.size)
            else:
                _fill(acc, 0, acc.size)
                for k in range(kh * kw):
                    _add_product(w[c, o, k // kw, k % kw], flat, starts[k], acc, acc.size)
            b = bias[c * mult + o] if has_bias else zero   # the data's type: the sum rounds
                                                           # to it before the ReLU
            at = U((item * mult + o) * oh * ow)
            for oy in range(oh):
                src, dst = U(oy * pitch), at + U(oy * ow)
                for t in range(U(ow)):
                    s = acc[src + t]
                    if has_bias:
                        s = s + b
                    if rectify:
                        s = (0.0 if s < 0 else s) + slope * (0.0 if s > 0 else s)
                    out[dst + t] = s


@jit.inlined
def _pitched(line, at, mult, oh, ow, into, wq):
    """into, (M/g, oh, Wq) taken flat, = the M/g planes (oh, ow) at line[at:], each row's
    columns past ow zero (the buffer zeroed before its first plane)."""
    for o in range(mult):
        for r in range(oh):
            _copy(line, at + (o * oh + r) * ow, 1, into, (o * oh + r) * wq, ow)


@fast("reassoc", "contract")
def _weight_gradient_plane(buf, flat, g, size, n, c, sh, sw, dh, dw, zero, wsum):
    """wsum[n, c] (M/g, kh, kw) = each tap's sum over the output's positions of g (the pitched
    dy planes, (M/g, oh, Wq) flat, ``size`` = oh Wq values each) times the phase plane values
    under them (buf, and flat: the same, flat; whole rows: the padded columns add zeros)."""
    mult, kh, kw = wsum.shape[2], wsum.shape[3], wsum.shape[4]
    size = U(size)
    for o in range(mult):
        at = U(o) * size
        for ky in range(kh):
            for kx in range(kw):
                src = U(_tap(buf, ky, kx, sh, sw, dh, dw))
                s = zero
                for j in range(size):
                    s += g[at + j] * flat[src + j]
                wsum[n, c, o, ky, kx] = s


def _input_gradient(line, oh, ow, w, item, sh, sw, dh, dw, ph, pw, flat, rows, pitch, starts,
                    acc, column, height, width, plane):
    """dx[n, c] (item n C + c; dx (N, C, height, width) flat: plane) = the products of w[c]
    (M/g, kh, kw) with the dy[n, c] (M/g, oh, ow; dy flat: line) values
    each input value meets, gathered phase by phase: the inputs of one stride phase (a, b)
    meet only the taps (ky, kx) with ky dh = a, kx dw = b modulo the stride, in consecutive
    dy values, so each phase is a stride-1 sum of its taps in kernel order, as Caffe's col2im
    adds them (a tap over dy's zero border adds a zero). flat, (M/g, rows, pitch) taken flat:
    dy[n, c] with a border of zeros (zeroed before the first plane, the border left so); acc, column
    (Hq pitch,): a phase plane's sums and a tap's values where there are several outputs a
    group."""
    c, mult, kh, kw = item % w.shape[0], w.shape[1], w.shape[2], w.shape[3]
    top, left = ((kh - 1) * dh) // sh, ((kw - 1) * dw) // sw
    for o in range(mult):
        for r in range(oh):
            _copy(line, ((item * mult + o) * oh + r) * ow, 1, flat,
                  (o * rows + top + r) * pitch + left, ow)
    at = item * height * width
    for a in range(sh):
        for b in range(sw):
            q0 = max(0, -((a - ph) // sh))   # the phase's rows and columns of inputs
            q1 = min(acc.size // pitch, (height - 1 + ph - a) // sh + 1)
            r0 = max(0, -((b - pw) // sw))
            x0 = r0 * sw + b - pw
            if q1 <= q0 or x0 >= width:
                continue
            base, size = q0 * pitch, (q1 - q0) * pitch
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
                _three_by_three(flat, starts, w, c, 0, acc, size)
            elif mult == 1 and count in (1, 2, 4):   # a strided 3x3's phases: 4, 2, 2, 1 taps
                _few_taps(w, c, kw, flat, starts, count, w.dtype.type(0), acc, size)
            else:
                _fill(acc, 0, size)
                for t in range(count):
                    k, tap = starts[2 * t], starts[2 * t + 1]
                    ky, kx = k // kw, k % kw
                    if mult == 1:
                        _add_product(w[c, 0, ky, kx], flat, tap, acc, size)
                        continue
                    _fill(column, 0, size)
                    for o in range(mult):   # the column value: its outputs' products first
                        _add_product(w[c, o, ky, kx], flat, o * rows * pitch + tap, column,
                                     size)
                    _add_product(w.dtype.type(1), column, 0, acc, size)
            count = (width - 1 - x0) // sw + 1
            for q in range(q0, q1):
                y = q * sh + a - ph
                if sw == 1:
                    _copy(acc, (q - q0) * pitch + r0, 1, plane, at + y * width + x0, count)
                    continue
                into, step, src = U(at + y * width + x0), U(sw), U((q - q0) * pitch + r0)
                for t in range(U(count)):
                    plane[into + t * step] = acc[src + t]


@jit.inlined
def _few_taps(w, c, kw, flat, starts, count, zero, acc, size):
    """acc[j] (j < size) = zero plus the products of ``count`` (1, 2 or 4) taps of w[c, 0] (tap t:
    starts[2 t]) with flat's values from starts[2 t + 1] on, added in turn: the sums of a fill
    and an _add_product a tap, in one loop. (Taps past ``count`` are read as its last one's,
    and not used.)"""
    last = count - 1
    p1, p2, p3 = 2 * min(1, last), 2 * min(2, last), 2 * min(3, last)
    k0, k1, k2, k3 = starts[0], starts[p1], starts[p2], starts[p3]
    v0, v1 = w[c, 0, k0 // kw, k0 % kw], w[c, 0, k1 // kw, k1 % kw]
    v2, v3 = w[c, 0, k2 // kw, k2 % kw], w[c, 0, k3 // kw, k3 % kw]
    t0, t1 = U(starts[1]), U(starts[p1 + 1])
    t2, t3 = U(starts[p2 + 1]), U(starts[p3 + 1])
    if count == 4:
        for j in range(U(size)):
            s = zero
            s += v0 * flat[t0 + j]
            s += v1 * flat[t1 + j]
            s += v2 * flat[t2 + j]
            s += v3 * flat[t3 + j]
            acc[j] = s
    elif count == 2:
        for j in range(U(size)):
            s = zero
            s += v0 * flat[t0 + j]
            s += v1 * flat[t1 + j]
            acc[j] = s
    else:
        for j in range(U(size)):
            s = zero
            s += v0 * flat[t0 + j]
            acc[j] = s


@jit.inlined
def _add_product(v, src, at, acc, count):
    """acc[j] += v * src[at + j] for j < count (each product rounded, then added)."""
    base = U(at)
    for j in range(U(count)):
        acc[j] += v * src[base + j]


def _backward_planes(x, dy, w, sh, sw, dh, dw, ph, pw, weights, down, i0, i1, buf, grads,
                     padded, starts, acc, column, zero, wsum, dx):
    """For planes i0..i1: with ``weights`` wsum[n, c] = the plane's weight gradient, with
    ``down`` dx[n, c] = its input gradient."""
    channels, height, width = x.shape[1], x.shape[2], x.shape[3]
    mult, oh, ow = dy.shape[2], dy.shape[3], dy.shape[4]
    hq, wq = buf.shape[2], buf.shape[3]
    flat, g, line, grad_line = buf.reshape(-1), grads.reshape(-1), x.reshape(-1), dy.reshape(-1)
    bordered, plane = padded.reshape(-1), dx.reshape(-1)
    rows, pitch = padded.shape[1], padded.shape[2]
    for item in range(i0, i1):
        n, c = item // channels, item % channels
        if weights:
            _pitched(grad_line, item * mult * oh * ow, mult, oh, ow, g, wq)
            _phase_planes(line, item * height * width, height, width, sh, sw, ph, pw, flat, hq,
                          wq)
            _weight_gradient_plane(buf, flat, g, oh * wq, n, c, sh, sw, dh, dw, zero, wsum)
        if down:
            _input_gradient(grad_line, oh, ow, w, item, sh, sw, dh, dw, ph, pw, bordered, rows,
                            pitch, starts, acc, column, height, width, plane)


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
