"""The data transformer's (pixel - mean) * scale with crops and mirrors as one compiled pass
(kernels/jit.py) over a batch: numpy needs a cast, a subtraction and a product, each a pass
over the whole batch (64 ImageNet crops with a mean file: 29 ms). data/transformer.py keeps its
numpy code as the reference.

It runs without the GIL on the prefetch thread or the data threads (data/workers.py), each a
run of items, and never on the kernel threads, which the net's own layers keep busy meanwhile.
Each value is first stored in the output's dtype, then reduced and scaled in that dtype, as
Caffe computes it.
"""
import numpy

from . import jit

NO_MEAN, CHANNEL_MEAN, PIXEL_MEAN = 0, 1, 2


def _transform(batch, h_off, w_off, mirror, mean, kind, scale, out):
    """out[i] = (batch[i]'s crop at (h_off[i], w_off[i]), columns reversed where mirror[i],
    minus the mean) * scale; ``kind``: NO_MEAN, CHANNEL_MEAN (mean (C, 1, 1)) or PIXEL_MEAN
    (mean (C, H, W), taken at each pixel's source position)."""
    n, c, oh, ow = out.shape
    row = numpy.empty(ow, out.dtype)   # a mirrored row, computed in order, then reversed
    for i in range(n):
        h0, w0, flip = h_off[i], w_off[i], mirror[i]
        for ch in range(c):
            for y in range(oh):
                src = batch[i, ch, h0 + y, w0:w0 + ow]
                dst = row if flip else out[i, ch, y]
                for x in range(ow):
                    dst[x] = src[x]
                if kind == PIXEL_MEAN:
                    values = mean[ch, h0 + y, w0:w0 + ow]
                    for x in range(ow):
                        dst[x] = (dst[x] - values[x]) * scale
                elif kind == CHANNEL_MEAN:
                    m = mean[ch, 0, 0]
                    for x in range(ow):
                        dst[x] = (dst[x] - m) * scale
                else:
                    for x in range(ow):
                        dst[x] = dst[x] * scale
                if flip:
                    target = out[i, ch, y]
                    for x in range(ow):
                        target[x] = row[ow - 1 - x]


def transform(batch, h_off, w_off, mirror, mean, kind, scale, out):
    """Compiled ``_transform`` on this thread; ``scale`` a scalar of out's dtype, ``mean`` in
    out's dtype (any (C, 1, 1) array where ``kind`` is NO_MEAN)."""
    jit.kernel(_transform)(batch, h_off, w_off, mirror, mean, kind, scale, out)
    return out
