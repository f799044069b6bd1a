"""im2col and col2im of a stride-1 2-D convolution as compiled loops (kernels/jit.py): each
window row is copied straight from the image (zeros where it overhangs the padding), and each
image plane of the gradient is summed in a small padded plane and written once.

numpy's col2im adds one strided view per kernel offset, and on small maps its inner loops are a
row of a few values (LeNet conv2: 8), so most of its time goes to loop overhead. col2im reads
each kernel offset's (oh, ow) block of one image front to back, one stream at a time (one
thread: LeNet conv2 1.92 -> 0.76 ms and CaffeNet conv2 12.9 -> 9.3 ms against summing each image
row from all 25 offsets' rows at once); im2col, two threads: LeNet conv2 0.59 -> 0.38 ms
against numpy's copies. Each value receives its adds in kernel-offset order, starting from zero,
as in numpy's col2im and Caffe's, so the result is the same bits, and im2col copies the values
numpy's strided-window copy does. A strided layer's col2im sums each image in its padded plane
split by phase (one thread: CaffeNet's conv1 9.2 -> 5.8 ms, GoogLeNet's 12.2 -> 5.9 ms against
numpy's phase-split adds over the whole batch). A strided im2col copies each window row from
the image plane split by column phase (_phase_rows), else with a stride (in the pass on 2
cores, forward and backward: CaffeNet's conv1 4.65 -> 2.86 ms, GoogLeNet's 6.19 -> 3.24 ms;
numpy's phase-split copies are hundreds of small numpy calls a part that 16 threads queue for
the GIL: 17 ms of CaffeNet conv1's 21 ms forward on 16 cores).

Each entry point splits its work across numba's threads (threads.for_native) by channels, or
by images where there are few channels (``by_image``); every value is computed alike in any part.
"""
import numpy

from .jit import prange
from .threads import for_native, num_threads

ROW_RUN = 16   # values a stride-1 window row's copy is rounded up to (one AVX-512 float32 vector)
BAND_PARTS = 4  # units a thread at least that a strided col2im's few channels split into


def _col2im(col, dh, dw, ph, pw, c0, c1, n0, n1, x):
    """x[n, c] (n0 <= n < n1, c0 <= c < c1) = the sum of col (C, kh, kw, N, oh, ow)'s windows.

    Each image plane is summed in a zeroed padded plane (in L1 for the maps of LeNet and
    CaffeNet): the windows' (oh, ow) blocks are added one kernel offset after another, each
    read front to back, then the plane's interior is written once. Flat views and unsigned
    indices, as in _window_rows (LeNet conv2, one thread: 0.8-1.2 -> 0.5 ms)."""
    channels, kh, kw, images, oh, ow = col.shape
    h, w = x.shape[2], x.shape[3]
    rows = max(h + 2 * ph, oh + (kh - 1) * dh)
    cols = max(w + 2 * pw, ow + (kw - 1) * dw)
    plane = numpy.empty(rows * cols, x.dtype)
    source, target = col.reshape(-1), x.reshape(-1)
    width, pitch, image_width = numpy.uint64(ow), numpy.uint64(cols), numpy.uint64(w)
    for c in range(c0, c1):
        for n in range(n0, n1):
            for t in range(plane.size):
                plane[t] = 0
            for ki in range(kh):
                for kj in range(kw):
                    at = numpy.uint64((((c * kh + ki) * kw + kj) * images + n) * oh * ow)
                    to = numpy.uint64(ki * dh * cols + kj * dw)
                    for oy in range(oh):
                        for t in range(width):
                            plane[to + t] += source[at + t]
                        at += width
                        to += pitch
            out = numpy.uint64((n * channels + c) * h * w)
            inside = numpy.uint64(ph * cols + pw)
            for iy in range(h):
                for t in range(image_width):
                    target[out + t] = plane[inside + t]
                out += image_width
                inside += pitch


def _im2col(x, dh, dw, ph, pw, c0, c1, n0, n1, col):
    """col (C, kh, kw, N, oh, ow)[channels c0..c1, images n0..n1] = the windows of x (N, C, H,
    W), zero where a window overhangs the image, at stride 1: _run_rows, or _window_rows where
    rows of at most ROW_RUN / 2 values need no zeros at their sides (each is one short copy;
    LeNet's conv2, rows of 8, in the pass: 0.25 ms against 0.31 by runs)."""
    if pw == 0 and col.shape[5] <= ROW_RUN // 2:
        _window_rows(x, 1, 1, dh, dw, ph, pw, c0, c1, n0, n1, col)
    else:
        _run_rows(x, dh, dw, ph, pw, c0, c1, n0, n1, col)


def _run_rows(x, dh, dw, ph, pw, c0, c1, n0, n1, col):
    """_im2col by whole runs: a channel's image planes are first copied into zero-bordered
    planes wide enough that every window row can be copied in whole runs of ROW_RUN values. A
    row's copy overruns into the places of the rows after it, which their own copies then
    overwrite; the rows whose run would pass the end of their (oh, ow) block are copied exact,
    so nothing outside a part's own blocks is written. The columns are still written front to
    back, with no zeros to place and no short tail a row, where _window_rows spent most of its
    time. One thread: CaffeNet's conv2 (rows of 27) 0.253 -> 0.117 ms an image, GoogLeNet's 5x5
    layers at 14x14 (batch 10, 32 channels) 0.405 -> 0.136 ms, ResNet-50's res5 (rows of 7)
    0.138 -> 0.066 ms."""
    channels, kh, kw, images, oh, ow = col.shape
    h, w = x.shape[2], x.shape[3]
    if oh <= 0 or ow <= 0 or n1 <= n0:
        return
    run = -(-ow // ROW_RUN) * ROW_RUN
    pitch = max(w + 2 * pw, (kw - 1) * dw + run)
    size = (h + 2 * ph) * pitch
    planes = numpy.zeros((n1 - n0) * size, x.dtype)
    source, target = x.reshape(-1), col.reshape(-1)
    width, whole, step = numpy.uint64(ow), numpy.uint64(run), numpy.uint64(pitch)
    image_width = numpy.uint64(w)
    runs = min(oh, (oh * ow - run) // ow + 1) if oh * ow >= run else 0   # rows copied whole
    for c in range(c0, c1):
        for n in range(n0, n1):
            start = numpy.uint64((n * channels + c) * h * w)
            inside = numpy.uint64((n - n0) * size + ph * pitch + pw)
            for iy in range(h):
                for t in range(image_width):
                    planes[inside + t] = source[start + t]
                start += image_width
                inside += step
        for ki in range(kh):
            for kj in range(kw):
                at = numpy.uint64((((c * kh + ki) * kw + kj) * images + n0) * oh * ow)
                for n in range(n0, n1):
                    start = numpy.uint64((n - n0) * size + ki * dh * pitch + kj * dw)
                    for oy in range(oh):
                        if oy < runs:
                            for t in range(whole):
                                target[at + t] = planes[start + t]
                        else:
                            for t in range(width):
                                target[at + t] = planes[start + t]
                        at += width
                        start += step


def _window_rows(x, sh, sw, dh, dw, ph, pw, c0, c1, n0, n1, col):
    """im2col at any stride: window row oy of offset (ki, kj) reads image row
    oy * sh + ki * dh - ph at every sw-th column. Each row is copied through flat views of
    both arrays and unsigned indices: numba adds no negative-index wrap to them, so the copy
    vectorizes and no view is made a row (one thread: LeNet conv2's rows of 8 1.05 -> 0.55 ms,
    CaffeNet's strided conv1 8.4 -> 5.3 ms, against views of each row)."""
    channels, kh, kw, images, oh, ow = col.shape
    h, w = x.shape[2], x.shape[3]
    source, target = x.reshape(-1), col.reshape(-1)
    width, step = numpy.uint64(ow), numpy.uint64(sw)
    for c in range(c0, c1):
        for ki in range(kh):
            for kj in range(kw):
                shift = kj * dw - pw
                lo = min(max(-(shift // sw), 0), ow)            # first ox inside the image
                hi = max(min(-((shift - w) // sw), ow), lo)     # first ox past it
                first, last = numpy.uint64(lo), numpy.uint64(hi)
                for n in range(n0, n1):
                    at = numpy.uint64((((c * kh + ki) * kw + kj) * images + n) * oh * ow)
                    for oy in range(oh):
                        iy = oy * sh + ki * dh - ph
                        if not 0 <= iy < h:
                            for t in range(width):
                                target[at + t] = 0
                        else:
                            start = numpy.uint64(((n * channels + c) * h + iy) * w
                                                 + lo * sw + shift)
                            for t in range(first):
                                target[at + t] = 0
                            if step == 1:
                                for t in range(last - first):
                                    target[at + first + t] = source[start + t]
                            else:
                                for t in range(last - first):
                                    target[at + first + t] = source[start + t * step]
                            for t in range(last, width):
                                target[at + t] = 0
                        at += width


def _phase_rows(x, sh, sw, dh, dw, ph, pw, r0, r1, n0, n1, col):
    """_window_rows for a column stride above 1 where every column phase is read (dw 1, a
    kernel at least sw wide), for kernel rows r0..r1 counted across channels (row ki of channel
    c is c * kh + ki: a part can take some of a channel's rows, so a layer of three channels
    keeps every thread busy). Each image plane's columns are first split by phase into a small
    buffer (column ix at phase ix % sw, place ix // sw), so each window row is a contiguous
    copy, not a strided gather. One thread: CaffeNet's conv1 5.96 -> 3.50 ms, GoogLeNet's 4.74
    -> 4.07 ms, ResNet-50's at batch 1 0.34 -> 0.16 ms. The same values."""
    channels, kh, kw, images, oh, ow = col.shape
    h, w = x.shape[2], x.shape[3]
    pitch = -(-w // sw)                         # places of a phase's row
    plane = numpy.empty(sw * h * pitch, x.dtype)   # (phase, row, place)
    source, target = x.reshape(-1), col.reshape(-1)
    width, step = numpy.uint64(ow), numpy.uint64(sw)
    for c in range(r0 // kh, -(-r1 // kh)):
        k0, k1 = max(r0 - c * kh, 0), min(r1 - c * kh, kh)
        for n in range(n0, n1):
            image = numpy.uint64((n * channels + c) * h * w)
            for p in range(sw):
                places = numpy.uint64((w - p + sw - 1) // sw)
                for iy in range(h):
                    at = numpy.uint64((p * h + iy) * pitch)
                    start = image + numpy.uint64(iy * w + p)
                    for t in range(places):
                        plane[at + t] = source[start + t * step]
            for ki in range(k0, k1):
                for kj in range(kw):
                    shift = kj * dw - pw
                    lo = min(max(-(shift // sw), 0), ow)            # first ox inside the image
                    hi = max(min(-((shift - w) // sw), ow), lo)     # first ox past it
                    first, last = numpy.uint64(lo), numpy.uint64(hi)
                    ix = lo * sw + shift                           # its image column
                    phase, place = ix % sw, ix // sw
                    at = numpy.uint64((((c * kh + ki) * kw + kj) * images + n) * oh * ow)
                    for oy in range(oh):
                        iy = oy * sh + ki * dh - ph
                        if not 0 <= iy < h or last == first:
                            for t in range(width):
                                target[at + t] = 0
                        else:
                            start = numpy.uint64((phase * h + iy) * pitch + place)
                            for t in range(first):
                                target[at + t] = 0
                            for t in range(last - first):
                                target[at + first + t] = plane[start + t]
                            for t in range(last, width):
                                target[at + t] = 0
                        at += width


def _phases_read(sw, dw, kw):
    """Whether a strided im2col reads every column phase of the image (a column stride above 1,
    dilation 1, a kernel at least sw wide): _phase_rows then makes its columns."""
    return sw > 1 and dw == 1 and kw >= sw


def _strided_rows(x, sh, sw, dh, dw, ph, pw, c0, c1, n0, n1, col):
    """im2col at any stride: _im2col's at stride 1, by phases where every column phase is read,
    else by gathers."""
    if sh == 1 and sw == 1:
        _im2col(x, dh, dw, ph, pw, c0, c1, n0, n1, col)
    elif _phases_read(sw, dw, col.shape[2]):
        kh = col.shape[1]
        _phase_rows(x, sh, sw, dh, dw, ph, pw, c0 * kh, c1 * kh, n0, n1, col)
    else:
        _window_rows(x, sh, sw, dh, dw, ph, pw, c0, c1, n0, n1, col)


def _col2im_phased(col, sh, sw, dh, dw, ph, pw, c0, c1, n0, n1, x):
    """_col2im for a stride above 1: the padded plane is kept split by phase (padded row r at
    phase r % sh, index r // sh; columns alike), so each window row is still one dense run of
    adds, and the image is gathered from the phases at the end (_phased_bands, one band)."""
    _phased_bands(col, sh, sw, dh, dw, ph, pw, c0, c1, 1, n0, n1, x)


def _phased_bands(col, sh, sw, dh, dw, ph, pw, u0, u1, bands, n0, n1, x):
    """_col2im_phased for units u0..u1 of (channel, band of image rows), unit u the band
    u % bands of channel u // bands: only the window rows that land in the band are added, so
    a part can take some of a channel's rows (a first layer's three channels keep every thread
    busy). Each value still receives its adds in kernel-offset order: the same bits."""
    kh, kw, oh, ow = col.shape[1], col.shape[2], col.shape[4], col.shape[5]
    h, w = x.shape[2], x.shape[3]
    rows = -(-max(h + 2 * ph, (oh - 1) * sh + (kh - 1) * dh + 1) // sh)
    cols = -(-max(w + 2 * pw, (ow - 1) * sw + (kw - 1) * dw + 1) // sw)
    plane = numpy.empty((sh, sw, rows, cols), x.dtype)
    for u in range(u0, u1):
        c, band = u // bands, u % bands
        r0, r1 = ph + h * band // bands, ph + h * (band + 1) // bands   # padded rows
        for n in range(n0, n1):
            for py in range(sh):
                for px in range(sw):
                    for i in range(-(-(r0 - py) // sh), -(-(r1 - py) // sh)):
                        for t in range(cols):
                            plane[py, px, i, t] = 0
            for ki in range(kh):
                py, sy = (ki * dh) % sh, (ki * dh) // sh
                first = max(-(-(r0 - ki * dh) // sh), 0)
                last = min(-(-(r1 - ki * dh) // sh), oh)
                for kj in range(kw):
                    px, sx = (kj * dw) % sw, (kj * dw) // sw
                    block = col[c, ki, kj, n]
                    for oy in range(first, last):
                        source = block[oy]
                        target = plane[py, px, oy + sy, sx:]
                        for t in range(ow):
                            target[t] += source[t]
            for iy in range(r0 - ph, r1 - ph):
                r = iy + ph
                row = x[n, c, iy]
                for px in range(sw):
                    ix0 = (px - pw) % sw      # the first image column in this phase
                    inside = plane[r % sh, px, r // sh, (ix0 + pw) // sw:]
                    for j in range(len(range(ix0, w, sw))):
                        row[ix0 + j * sw] = inside[j]


def _col2im_positions(col, sh, sw, dh, dw, ph, pw, n0, n1, x):
    """x[n0:n1] (N, C, H, W) = col2im of columns laid out by output position,
    col (g, N, oh, ow, kh, kw, C/g): an input gradient computed as dy.T @ W with W's columns
    turned channels last (layers/convolution.py: OpenBLAS runs it faster, with the same dot
    products). LeNet's conv2 on 2 cores: 0.28 ms against col2im's 0.33-0.40.

    Each image is summed in a zeroed (rows, cols, C) plane, one channel vector per add (a run
    of C/g values). Window rows are visited last to first, and within a row kernel offsets in
    order, so each value receives its adds in kernel-offset order from zero, as col2im's: the
    same bits. The plane's interior is then written to the image channels first."""
    groups, images, oh, ow, kh, kw, width = col.shape
    channels, h, w = x.shape[1], x.shape[2], x.shape[3]
    rows = max(h + 2 * ph, (oh - 1) * sh + (kh - 1) * dh + 1)
    cols = max(w + 2 * pw, (ow - 1) * sw + (kw - 1) * dw + 1)
    plane = numpy.empty(rows * cols * channels, x.dtype)
    source, target = col.reshape(-1), x.reshape(-1)
    run, across = numpy.uint64(width), numpy.uint64(kh * kw * width)
    step, pitch = numpy.uint64(sw * channels), numpy.uint64(channels)
    image_width = numpy.uint64(w)
    for n in range(n0, n1):
        for t in range(plane.size):
            plane[t] = 0
        for g in range(groups):
            for oy in range(oh - 1, -1, -1):
                for ki in range(kh):
                    for kj in range(kw):
                        at = numpy.uint64(((((g * images + n) * oh + oy) * ow * kh + ki) * kw
                                           + kj) * width)
                        to = numpy.uint64(((oy * sh + ki * dh) * cols + kj * dw) * channels
                                          + g * width)
                        for ox in range(ow):
                            for t in range(run):
                                plane[to + t] += source[at + t]
                            at += across
                            to += step
        for c in range(channels):
            for iy in range(h):
                out = numpy.uint64(((n * channels + c) * h + iy) * w)
                inside = numpy.uint64(((iy + ph) * cols + pw) * channels + c)
                for ix in range(image_width):
                    target[out + ix] = plane[inside + ix * pitch]


def _col2im_positions_parts(bounds, col, sh, sw, dh, dw, ph, pw, x):
    for p in prange(bounds.size - 1):
        _col2im_positions(col, sh, sw, dh, dw, ph, pw, bounds[p], bounds[p + 1], x)


def _parts_for(name, plain, strided):
    """A driver over a split's parts (threads.for_native) of a column kernel: ``plain`` for
    stride 1, ``strided`` otherwise (both take source, geometry, channel and image ranges,
    target); each part a range of images with every channel, or of channels with every image."""
    def parts(bounds, by_image, channels, images, source, sh, sw, dh, dw, ph, pw, target):
        for p in prange(bounds.size - 1):
            a, b = bounds[p], bounds[p + 1]
            c0, c1, n0, n1 = (0, channels, a, b) if by_image else (a, b, 0, images)
            if sh == 1 and sw == 1:
                plain(source, dh, dw, ph, pw, c0, c1, n0, n1, target)
            else:
                strided(source, sh, sw, dh, dw, ph, pw, c0, c1, n0, n1, target)
    parts.__name__ = parts.__qualname__ = name   # numba's cache files it by name
    return parts


_IM2COL_PARTS = _parts_for("_im2col_parts", _im2col, _strided_rows)
_COL2IM_PARTS = _parts_for("_col2im_parts", _col2im, _col2im_phased)


def _phase_rows_parts(bounds, images, source, sh, sw, dh, dw, ph, pw, target):
    """_phase_rows over a split's parts, each a range of kernel rows across the channels."""
    for p in prange(bounds.size - 1):
        _phase_rows(source, sh, sw, dh, dw, ph, pw, bounds[p], bounds[p + 1], 0, images, target)


def im2col(x, stride, dilation, pad, by_image, col):
    """col (C, kh, kw, N, oh, ow) = im2col of x (N, C, H, W), split across the threads by images
    (``by_image``) or by channels; a strided one that _phase_rows makes by kernel rows across
    the channels, so that three channels split evenly (16 threads take CaffeNet's conv1 in 33
    parts, where three channels gave three). In the pass on 2 cores (one image a chunk, split
    1:2 by channels before): CaffeNet's conv1 3.05 -> 2.75 ms, GoogLeNet's 3.56 -> 3.16 ms."""
    n, c = x.shape[:2]
    kh, kw = col.shape[1:3]
    if not by_image and _phases_read(stride[1], dilation[1], kw):
        for_native(_phase_rows_parts, c * kh, col.size, n, x, *stride, *dilation, *pad, col)
        return
    for_native(_IM2COL_PARTS, n if by_image else c, col.size, by_image, c, n, x, *stride,
               *dilation, *pad, col)


def _phased_bands_parts(bounds, bands, images, col, sh, sw, dh, dw, ph, pw, x):
    """_phased_bands over a split's parts, each a range of (channel, band) units."""
    for p in prange(bounds.size - 1):
        _phased_bands(col, sh, sw, dh, dw, ph, pw, bounds[p], bounds[p + 1], bands, 0, images, x)


def col2im(col, stride, dilation, pad, by_image, out):
    """out (N, C, H, W) = col2im of col (C, kh, kw, N, oh, ow), any stride, split across the
    threads by images (``by_image``) or by channels; a strided one by bands of image rows too
    where the channels are fewer than BAND_PARTS parts a thread (a first layer's three: 16
    threads had three parts). In the pass on 2 cores: CaffeNet's conv1 2.58 -> 2.49 ms,
    GoogLeNet's 1.75 -> 1.66 ms."""
    n, c = out.shape[:2]
    threads = num_threads()
    if not by_image and max(stride) > 1 and c < BAND_PARTS * threads:
        bands = min(out.shape[2], -(-BAND_PARTS * threads // c))
        for_native(_phased_bands_parts, c * bands, max(col.size, out.size), bands, n, col,
                   *stride, *dilation, *pad, out)
        return
    for_native(_COL2IM_PARTS, n if by_image else c, max(col.size, out.size), by_image, c, n, col,
               *stride, *dilation, *pad, out)


def col2im_positions(col, stride, dilation, pad, out):
    """out (N, C, H, W) = col2im of col (g, N, oh, ow, kh, kw, C/g), columns by output
    position with channels last (_col2im_positions), split across the threads by images."""
    for_native(_col2im_positions_parts, out.shape[0], max(col.size, out.size), col, *stride,
               *dilation, *pad, out)
