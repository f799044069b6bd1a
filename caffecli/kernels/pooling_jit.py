"""MAX and AVE pooling on the host as compiled loops (kernels/jit.py), as Caffe's
pooling_layer.cpp loops: one pass over each window, no padded copy, no per-offset
temporaries. kernels/pooling.py stays the reference and the path for device arrays.

Results agree with the reference: the same first-maximum-wins rule and winning offsets, and
gradients added in Caffe's order (outputs in row order), which can differ from the reference's
order by a rounding.
"""
import numpy

from .jit import prange
from .threads import for_native, num_threads

FLT_MAX = float(numpy.finfo(numpy.float32).max)


def _max_forward_flat_for(square):
    """MAX pooling's forward for stride 1 and a ``square`` window (known when it compiles):
    each image copied into a plane padded with -FLT_MAX (which never wins, as a clipped
    window's missing cells never do), then every output of the plane in one flat loop of
    unrolled comparisons, in Caffe's order (the same maxima and winners). Rows of 7-28 outputs
    were too short for LLVM's vectors; the flat loop of a plane is long. Its indices are
    unsigned: numba's wrap of negative indices turned signed ones into gathers. GoogLeNet's
    3x3 inception pools, one thread: 4.7 -> 1.4 ms (14x14), 3.6 -> 0.85 ms (7x7)."""
    def max_forward(x, kh, kw, sh, sw, ph, pw, top, arg):
        k = square
        n, c, h, w = x.shape
        oh, ow = top.shape[2], top.shape[3]
        hp, wp = oh + k - 1, ow + k - 1          # the padded plane the windows cover
        lowest = x.dtype.type(-FLT_MAX)
        plane = numpy.full(hp * wp, lowest, x.dtype)
        span = (oh - 1) * wp + ow                # plane positions of the windows' corners
        best = numpy.empty(span, x.dtype)
        won = numpy.empty(span, arg.dtype)
        rows, cols = min(h, hp - ph), min(w, wp - pw)
        for i in range(n):
            for j in range(c):
                img = x[i, j]
                for r in range(rows):
                    src = img[r]
                    base = (r + ph) * wp + pw
                    for v in range(cols):
                        plane[numpy.uintp(base + v)] = src[numpy.uintp(v)]
                for f in range(span):
                    most = lowest
                    at = numpy.int32(-1)
                    for a in range(k):               # constant trip counts: unrolled
                        for b in range(k):
                            value = plane[numpy.uintp(f + a * wp + b)]
                            wins = value > most
                            most = value if wins else most
                            at = numpy.int32(a * k + b) if wins else at
                    best[numpy.uintp(f)] = most
                    won[numpy.uintp(f)] = at
                maxima, winners = top[i, j], arg[i, j]
                for y in range(oh):
                    for q in range(ow):
                        maxima[y, numpy.uintp(q)] = best[numpy.uintp(y * wp + q)]
                        winners[y, numpy.uintp(q)] = won[numpy.uintp(y * wp + q)]
    return max_forward


def _max_forward_for(square, step=0, pad=0):
    """MAX pooling's forward loops (for stride 1, ``_max_forward_flat_for``'s); with ``square``
    (a window side known when it compiles) the loops over a window inside the image have
    constant trip counts and unroll: 2-2.4x faster on LeNet's 2x2 and CaffeNet's and
    GoogLeNet's 3x3 windows (2 cores). With a ``step`` and ``pad`` (stride and padding, known
    too) the windows inside the image are compared in flat loops over row views, which LLVM
    vectorizes: 2-4x faster again (LeNet's pool1 0.39 -> 0.11 ms one thread); the windows that
    ceil mode clips at the bottom or right edge, over the rows and columns left of them
    (GoogLeNet's stride-2 pools, 2 cores: 0.74-0.98x, 14x14 and 28x28 maps most). The same
    comparisons in the same order, so the same maxima and winners."""
    if step == 1:
        return _max_forward_flat_for(square)

    def max_forward(x, kh, kw, sh, sw, ph, pw, top, arg):
        if square:
            kh = square
            kw = square
        if step:
            sh = step
            sw = step
            ph = pad
            pw = pad
        n, c, h, w = x.shape
        oh, ow = top.shape[2], top.shape[3]
        lowest = x.dtype.type(-FLT_MAX)   # in the data's type: float64 compares vectorize worse
        # the outputs whose windows lie inside the image: rows y0..y1, columns q0..q1 (each
        # index a constant plus a loop's count, which LLVM sees is never negative: no wrap);
        # then those of rows y0..y2, columns q0..q2 whose windows start inside it but end
        # past its bottom or right edge (ceil mode's last row and column): the rows and
        # columns left, in the same order
        y0, q0 = -(-ph // sh), -(-pw // sw)
        y1, q1 = min((h - kh + ph) // sh + 1, oh), max(min((w - kw + pw) // sw + 1, ow), q0)
        y2, q2 = min((h - 1 + ph) // sh + 1, oh), min((w - 1 + pw) // sw + 1, ow)
        if not step:
            y1 = y0
            y2 = y0
        for i in range(n):
            for j in range(c):
                for y in range(y0, y1):
                    r0, r1 = x[i, j, y * sh - ph], x[i, j, y * sh - ph + 1]
                    r2 = x[i, j, y * sh - ph + kh - 1]    # a 3x3 window's third row
                    maxima, winners = top[i, j, y], arg[i, j, y]
                    for q in range(q0, q1):
                        e = q * sw - pw
                        best = lowest
                        won = -1
                        for b in range(kw):     # constant trip counts: unrolled
                            if r0[e + b] > best:
                                best = r0[e + b]
                                won = b
                        for b in range(kw):
                            if r1[e + b] > best:
                                best = r1[e + b]
                                won = kw + b
                        if kh == 3:
                            for b in range(3):
                                if r2[e + b] > best:
                                    best = r2[e + b]
                                    won = 6 + b
                        maxima[q] = best
                        winners[q] = won
                img = x[i, j]
                for y in range(oh):
                    # the other outputs: columns 0..left and right..ow of a row done above,
                    # every column of the others
                    left, right = ow, ow
                    if y0 <= y < y2:
                        left = min(q0, ow)
                        right = max(q2, left)
                    for q in range(left + ow - right):
                        if q >= left:
                            q += right - left
                        top_y = y * sh - ph
                        x0 = q * sw - pw
                        best = lowest
                        won = -1
                        if top_y >= 0 and x0 >= 0 and top_y + kh <= h and x0 + kw <= w:
                            for a in range(kh):          # inside: no bounds to clip
                                for b in range(kw):
                                    if img[top_y + a, x0 + b] > best:
                                        best = img[top_y + a, x0 + b]
                                        won = a * kw + b
                        else:
                            for a in range(max(top_y, 0), min(top_y + kh, h)):
                                for b in range(max(x0, 0), min(x0 + kw, w)):
                                    if img[a, b] > best:
                                        best = img[a, b]
                                        won = (a - top_y) * kw + (b - x0)
                        top[i, j, y, q] = best
                        arg[i, j, y, q] = won
        # the clipped windows in a loop nest of their own (inside the one above, the pools ran
        # 0-5% slower: 3x3 stride 2 on 14x14, 27x27 and 55x55 maps); where no column is
        # clipped on the right, no pass over the rows
        clipped_right = q2 > q1
        for i in range(n):
            for j in range(c):
                for y in range(y0, y1 if clipped_right else y0):
                    r0, r1 = x[i, j, y * sh - ph], x[i, j, y * sh - ph + 1]
                    r2 = x[i, j, y * sh - ph + kh - 1]
                    maxima, winners = top[i, j, y], arg[i, j, y]
                    for q in range(q1, q2):
                        e = q * sw - pw
                        cols = w - e
                        best = lowest
                        won = -1
                        for b in range(kw):
                            if b < cols and r0[e + b] > best:
                                best = r0[e + b]
                                won = b
                        for b in range(kw):
                            if b < cols and r1[e + b] > best:
                                best = r1[e + b]
                                won = kw + b
                        if kh == 3:
                            for b in range(3):
                                if b < cols and r2[e + b] > best:
                                    best = r2[e + b]
                                    won = 6 + b
                        maxima[q] = best
                        winners[q] = won
                for y in range(max(y1, y0), y2):
                    rows = h - (y * sh - ph)          # fewer than kh
                    r0 = x[i, j, y * sh - ph]
                    r1 = x[i, j, y * sh - ph + rows - 1]   # a 3x3 window's second, if any
                    maxima, winners = top[i, j, y], arg[i, j, y]
                    for q in range(q0, q2):
                        e = q * sw - pw
                        cols = w - e
                        best = lowest
                        won = -1
                        for b in range(kw):
                            if b < cols and r0[e + b] > best:
                                best = r0[e + b]
                                won = b
                        if rows > 1:
                            for b in range(kw):
                                if b < cols and r1[e + b] > best:
                                    best = r1[e + b]
                                    won = kw + b
                        maxima[q] = best
                        winners[q] = won
    return max_forward


# (side, stride, pad) of the MAX pools whose rows vectorize: LeNet's and VGG's 2x2, the 3x3
# stride-2 pools of CaffeNet, GoogLeNet and ResNet, GoogLeNet's 3x3 stride-1 inception pools
# (these by a flat loop over each padded plane: _max_forward_flat_for)
STEPPED = ((2, 2, 0), (3, 2, 0), (3, 2, 1), (3, 1, 1))


def _by_window(make, stepped=()):
    """{(window side, stride, pad): loops} for side 0 (any size) and the sides compiled as
    constants, any stride and pad (key 0, 0), and the ``stepped`` triples too (compiled with
    that stride and pad), each named apart so that numba's cache keeps one entry per kind."""
    loops = {}
    for key in ((0, 0, 0), (2, 0, 0), (3, 0, 0)) + tuple(stepped):
        loops[key] = make(*key) if stepped else make(key[0])
        loops[key].__qualname__ = "%s_%d_%d_%d" % ((loops[key].__name__,) + key)
    return loops


_MAX_FORWARD = _by_window(_max_forward_for, STEPPED)


def _max_backward_for(square, step=0, pad=0):
    """MAX pooling's backward: each output's gradient added at its winner; with ``square``
    the winner's row and column come from a division by a constant. With a ``step`` equal to
    the side and no ``pad`` (known when it compiles: LeNet's and VGG's 2x2 pools) the windows
    tile the image; where they tile it exactly each input row is written once, an output's
    gradient (plus zero, as the add to zero makes -0.0 0.0) at its winner and zero elsewhere,
    in flat loops that vectorize (LeNet's pool1, one thread: 0.31 -> 0.14 ms against zeroing
    the image and adding at each winner). ``empty[i]`` is set to 1 where image i has a window
    nothing won (-1), else 0: the caller's one test for Caffe's spill of such windows, where it
    took a pass over every winner (LeNet's pass 0.991x without it)."""
    def max_backward(dtop, arg, kw, sh, sw, ph, pw, dx, empty):
        if square:
            kw = square
        n, c, oh, ow = dtop.shape
        if step and oh * step == dx.shape[2] and ow * step == dx.shape[3]:
            zero = dx.dtype.type(0.0)
            for i in range(n):
                low = 0
                for j in range(c):
                    for y in range(oh):
                        grads, winners = dtop[i, j, y], arg[i, j, y]
                        for q in range(ow):
                            low = min(low, winners[q])
                        for a in range(step):
                            row = dx[i, j, y * step + a]
                            for q in range(ow):
                                for b in range(step):   # constant trip count: unrolled
                                    row[q * step + b] = (grads[q] + zero
                                                         if winners[q] == a * step + b else zero)
                empty[i] = low < 0
            return
        for i in range(n):
            empty[i] = 0
            for j in range(c):
                dx[i, j] = 0
                for y in range(oh):
                    for q in range(ow):
                        won = arg[i, j, y, q]
                        if won >= 0:
                            dx[i, j, y * sh - ph + won // kw, q * sw - pw + won % kw] += \
                                dtop[i, j, y, q]
                        else:
                            empty[i] = 1
    return max_backward


# (side, stride, pad) of the MAX pools whose windows tile the image: 2x2 and 3x3, stride = side
TILED = ((2, 2, 0), (3, 3, 0))


_MAX_BACKWARD = _by_window(_max_backward_for, TILED)


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
    """The loops compiled for this window's size, stride and pad, else for its size, else the
    general."""
    (kh, kw), (sh, sw), (ph, pw) = geo.kernel, geo.stride, geo.pad
    square = kh if kh == kw else 0
    return (loops.get((square, sh, ph) if sh == sw and ph == pw else None)
            or loops.get((square, 0, 0)) or loops[0, 0, 0])


def _geometry(geo):
    (kh, kw), (sh, sw), (ph, pw) = geo.kernel, geo.stride, geo.pad
    return kh, kw, sh, sw, ph, pw


def _parts_for(name, loops, make):
    """{window side: a driver over images (threads.for_native) of ``loops``' kernel for it},
    named apart for numba's cache as the kernels are."""
    drivers = {}
    for key, loop in loops.items():
        drivers[key] = make(loop)
        drivers[key].__qualname__ = "%s_parts_%d_%d_%d" % ((name,) + key)
    return drivers


def _max_forward_parts(loop):
    def max_forward_parts(bounds, x, kh, kw, sh, sw, ph, pw, top, arg):
        for p in prange(bounds.size - 1):
            a, b = bounds[p], bounds[p + 1]
            loop(x[a:b], kh, kw, sh, sw, ph, pw, top[a:b], arg[a:b])
    return max_forward_parts


def _max_backward_parts(loop):
    def max_backward_parts(bounds, dtop, arg, kw, sh, sw, ph, pw, dx, empty):
        for p in prange(bounds.size - 1):
            a, b = bounds[p], bounds[p + 1]
            loop(dtop[a:b], arg[a:b], kw, sh, sw, ph, pw, dx[a:b], empty[a:b])
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


def _planes(*arrays):
    """The (N, C, H, W) arrays viewed as (N * C, 1, H, W) where the images are fewer than the
    threads (C-ordered, as the kernels take them: views, not copies), else as they are. The
    kernels' loops over images and channels run alike over planes, and a split of the planes
    keeps every thread busy: ResNet-50's pooling at batch 1 ran on one thread (2 cores, in the
    pass: 0.77 -> 0.60 ms). Where the images are enough, the split by images stays: by planes
    LeNet's 8x8 pool2 ran 65 -> 83 us on 2 cores."""
    if arrays[0].shape[0] >= num_threads():
        return arrays
    return [a.reshape((-1, 1) + a.shape[2:]) for a in arrays]


def max_pool(x, geo, top, arg):
    """top, arg (winning kernel offset, -1 for none) of MAX pooling ``x``, written in place;
    the image planes split across numba's threads (as are the other three)."""
    x, top, arg = _planes(x, top, arg)
    for_native(_for_window(_MAX_FORWARD_PARTS, geo), x.shape[0], x.size, x, *_geometry(geo),
               top, arg)


def max_pool_backward(dtop, arg, geo, dx):
    """dx = MAX pooling's gradient of dtop at the winners ``arg``; whether any window had none
    (-1: for Caffe's spill, layers/pooling.py)."""
    kh, kw, sh, sw, ph, pw = _geometry(geo)
    dtop, arg, dx = _planes(dtop, arg, dx)
    empty = numpy.empty(dx.shape[0], numpy.uint8)
    for_native(_for_window(_MAX_BACKWARD_PARTS, geo), dx.shape[0], dx.size, dtop, arg, kw, sh,
               sw, ph, pw, dx, empty)
    return bool(empty.any())


def ave_pool(x, geo, top):
    x, top = _planes(x, top)
    for_native(_for_window(_AVE_FORWARD_PARTS, geo), x.shape[0], x.size, x, *_geometry(geo),
               top)


def ave_pool_backward(dtop, geo, dx):
    dtop, dx = _planes(dtop, dx)
    for_native(_ave_backward_parts, dx.shape[0], dx.size, dtop, *_geometry(geo), dx)
