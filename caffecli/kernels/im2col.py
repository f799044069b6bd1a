"""im2col / col2im for N-D convolution geometry, vectorized with strided window views.

Caffe's column layout for one image is (C, *kernel, *out): row c*prod(k) + kernel offset,
column = output position. ``windows`` builds that view over a zero-padded copy of the input,
with any leading axes (channel, batch); ``col2im_add`` scatters columns back, looping only over
the kernel offsets. With a stride above 1 the padded image can instead be kept split
by phase (``phase_*``): position p of an axis lives at phase p % s, index p // s, so every kernel
offset reads or adds one dense block instead of a stride-s lattice.
"""
import math

import numpy

from . import host_memory


def kernel_extent(kernel, dilation):
    return [d * (k - 1) + 1 for k, d in zip(kernel, dilation)]


def conv_out_shape(in_shape, kernel, pad, stride, dilation):
    """Caffe's output size per axis: (in + 2 pad - extent) / stride + 1, C integer division."""
    out = []
    for i, k, p, s, e in zip(in_shape, kernel, pad, stride, kernel_extent(kernel, dilation)):
        num = i + 2 * p - e
        q = abs(num) // s
        out.append((q if num >= 0 else -q) + 1)  # C truncates toward zero
    return out


def padded_shape(in_shape, out_shape, kernel, pad, stride, dilation):
    """Spatial size of a buffer holding the input at offset ``pad`` and every window."""
    shape = []
    for i, o, p, s, e in zip(in_shape, out_shape, pad, stride, kernel_extent(kernel, dilation)):
        need = (o - 1) * s + e if o > 0 else 0
        shape.append(max(i + 2 * p, need, p + i))
    return shape


class PadBuffer:
    """A preallocated zero-bordered buffer (lead..., *padded); only the interior is rewritten."""

    def __init__(self):
        self.buf = None
        self.key = None

    def get(self, xp, lead, spatial, dtype, fill=0):
        key = (xp.__name__, tuple(lead), tuple(spatial), numpy.dtype(dtype).str, fill)
        if self.key != key:
            shape = tuple(lead) + tuple(spatial)
            self.buf = host_memory.buffer(xp, math.prod(shape), dtype).reshape(shape)
            self.buf[...] = fill
            self.key = key
        return self.buf


def interior(buf, pad, in_shape, lead_axes=2):
    """The view of ``buf`` where the (unpadded) input lives."""
    sl = (slice(None),) * lead_axes + tuple(slice(p, p + i) for p, i in zip(pad, in_shape))
    return buf[sl]


def windows(xp, padded, kernel, stride, dilation, out_shape, lead_axes=2):
    """Read-only view (lead..., *kernel, *out) of every (dilated) window of ``padded``
    (lead..., *spatial)."""
    st = padded.strides
    sp = st[lead_axes:]
    shape = tuple(padded.shape[:lead_axes]) + tuple(kernel) + tuple(out_shape)
    strides = (tuple(st[:lead_axes]) + tuple(s * d for s, d in zip(sp, dilation))
               + tuple(s * t for s, t in zip(sp, stride)))
    return xp.lib.stride_tricks.as_strided(padded, shape=shape, strides=strides)


def offset_slices(offset, kernel, stride, dilation, out_shape):
    """Slices into the padded spatial axes that kernel offset ``offset`` reads for all outputs."""
    return tuple(slice(o * d, o * d + (n - 1) * s + 1, s)
                 for o, d, s, n in zip(offset, dilation, stride, out_shape))


def col2im_add(padded, col, kernel, stride, dilation, out_shape, lead_axes=2):
    """padded[lead..., windows] += col (lead..., *kernel, *out), one add per kernel offset."""
    lead = (slice(None),) * lead_axes
    for offset in numpy.ndindex(*kernel):
        sl = offset_slices(offset, kernel, stride, dilation, out_shape)
        padded[lead + sl] += col[lead + offset]
    return padded


def phase_shape(padded, stride):
    """Per-axis length of one phase of a padded axis split by stride: ceil(P / s)."""
    return [-(-p // s) for p, s in zip(padded, stride)]


def phase_interior(pad, in_shape, stride):
    """For each phase tuple: (phase, slices into the phase grid, slices into the image) that
    place the unpadded image at offset ``pad`` of the split padded buffer."""
    for phase in numpy.ndindex(*stride):
        grid, img = [], []
        for a, p, i, s in zip(phase, pad, in_shape, stride):
            first = (a - p) % s  # first image index whose padded position is in this phase
            count = len(range(first, i, s))
            start = (first + p) // s
            grid.append(slice(start, start + count))
            img.append(slice(first, i, s))
        yield phase, tuple(grid), tuple(img)


def phase_window(offset, stride, dilation, out_shape):
    """(phase, slices into the phase grid) that kernel ``offset`` reads for all outputs."""
    pos = [o * d for o, d in zip(offset, dilation)]
    return (tuple(q % s for q, s in zip(pos, stride)),
            tuple(slice(q // s, q // s + n) for q, s, n in zip(pos, stride, out_shape)))
