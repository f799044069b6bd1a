"""Pooling kernels (MAX, AVE, STOCHASTIC), written once for numpy and cupy, with Caffe's
window, rounding and padding rules: every pooled map loops over the kernel offsets, each step
reading one strided view.
"""
import collections
import math

import numpy

from ..errors import CaffeError
from ..proto import caffe_pb2

PP = caffe_pb2.PoolingParameter
FLT_MAX = float(numpy.finfo(numpy.float32).max)


class PoolGeometry:
    """Kernel, stride, pad and pooled size of a 2-D pooling over an H x W map."""

    def __init__(self, kernel, stride, pad, in_hw, ceil_mode=True, owner=None):
        self.kernel, self.stride, self.pad = list(kernel), list(stride), list(pad)
        self.in_hw = list(in_hw)
        out = []
        for i, k, s, p in zip(self.in_hw, self.kernel, self.stride, self.pad):
            q = (i + 2 * p - k) / float(s)
            out.append(int(math.ceil(q) if ceil_mode else math.floor(q)) + 1)
        if any(self.pad):
            # the last window must start inside the image or its leading padding
            for a in range(2):
                if (out[a] - 1) * self.stride[a] >= self.in_hw[a] + self.pad[a]:
                    out[a] -= 1
                if (out[a] - 1) * self.stride[a] >= self.in_hw[a] + self.pad[a]:
                    raise _fail(owner, "the last pooling window starts past the padding "
                                "(input %s, kernel %s, stride %s, pad %s)"
                                % (self.in_hw, self.kernel, self.stride, self.pad))
        if any(o < 0 for o in out):
            raise _fail(owner, "pooled output size %s is negative (input %s, kernel %s, "
                        "pad %s)" % (out, self.in_hw, self.kernel, self.pad))
        self.out_hw = out
        # buffer: the input at offset pad, wide enough for every window
        self.padded = [max(i + p, (o - 1) * s + k if o > 0 else 0)
                       for i, o, s, k, p in zip(self.in_hw, out, self.stride, self.kernel,
                                                self.pad)]
        self._constants = {}
        # a window past the image (ceil rounding with a stride above the kernel) takes no input
        self.empty_windows = any((o - 1) * st - p >= i for o, st, p, i in
                                 zip(out, self.stride, self.pad, self.in_hw) if o > 0)

    def constant(self, xp, key, make):
        """The host array ``make()`` as ``xp``'s array, made once per geometry and device: on
        the device, one copy at the first pass, none after (a CUDA graph may not copy)."""
        cuda = getattr(xp, "cuda", None)
        key = (xp.__name__, cuda.Device().id if cuda is not None else None, key)
        if key not in self._constants:
            self._constants[key] = xp.asarray(make())
        return self._constants[key]

    def offsets(self):
        """(index, slices) of each kernel offset, in Caffe's scan order (rows, then columns)."""
        kh, kw = self.kernel
        (sh, sw), (oh, ow) = self.stride, self.out_hw
        for i in range(kh):
            for j in range(kw):
                yield i * kw + j, (slice(None), slice(None),
                                   slice(i, i + (oh - 1) * sh + 1, sh),
                                   slice(j, j + (ow - 1) * sw + 1, sw))

    def interior(self, buf):
        (ph, pw), (h, w) = self.pad, self.in_hw
        return buf[:, :, ph:ph + h, pw:pw + w]

    def padded_copy(self, xp, x, fill):
        if self.padded == self.in_hw:
            return x  # every window lies inside the input: no copy needed
        buf = xp.full(x.shape[:2] + tuple(self.padded), fill, dtype=x.dtype)
        self.interior(buf)[...] = x
        return buf

    def starts(self, axis):
        """Window starts (in input coordinates) along one axis, as a host array."""
        return numpy.arange(self.out_hw[axis]) * self.stride[axis] - self.pad[axis]

    def ave_divisor(self, xp, dtype):
        """Caffe's AVE pool size per output: window clipped to H + pad, padding counted."""
        def sizes():
            ends = [numpy.minimum(self.starts(a) + self.kernel[a], self.in_hw[a] + self.pad[a])
                    - self.starts(a) for a in range(2)]
            return numpy.outer(ends[0], ends[1]).astype(dtype)
        return self.constant(xp, ("divisor", numpy.dtype(dtype).str), sizes)

    def valid(self, xp, index):
        """Which windows' offset ``index`` lies inside the image (bool, (OH, OW))."""
        def inside():
            i, j = divmod(index, self.kernel[1])
            h = self.starts(0) + i
            w = self.starts(1) + j
            return ((h >= 0) & (h < self.in_hw[0]))[:, None] \
                & ((w >= 0) & (w < self.in_hw[1]))[None]
        return self.constant(xp, ("valid", index), inside)

    def caffe_index(self, xp, offset_index):
        """Map winning kernel offsets to Caffe's h * W + w mask values (-1 where none)."""
        kw, W = self.kernel[1], self.in_hw[1]
        i, j = offset_index // kw, offset_index % kw
        h = self.constant(xp, "rows", lambda: self.starts(0).reshape(-1, 1)) + i
        w = self.constant(xp, "columns", lambda: self.starts(1).reshape(1, -1)) + j
        return xp.where(offset_index >= 0, h * W + w, -1)


_GEOMETRIES = collections.OrderedDict()   # the latest geometries, shared by the layers
_KEEP = 64


def geometry(kernel, stride, pad, in_hw, ceil_mode=True, owner=None):
    """The PoolGeometry of these arguments, built once while it is among the latest used:
    layers reshape every pass, and its device constants are made once."""
    key = tuple(map(tuple, (kernel, stride, pad, in_hw))) + (ceil_mode,)
    geo = _GEOMETRIES.pop(key, None)
    if geo is None:
        geo = PoolGeometry(kernel, stride, pad, in_hw, ceil_mode, owner)
    _GEOMETRIES[key] = geo
    while len(_GEOMETRIES) > _KEEP:
        _GEOMETRIES.popitem(last=False)
    return geo


def _fail(owner, message):
    return owner.error(message) if owner is not None else CaffeError(message)


def max_pool(xp, x, geo):
    """MAX forward: (top, winning offset index per output, -1 where the window is empty).

    Branch-free updates (compare, masked copy, integer blend): random masks would be slow. A
    value replaces the maximum only where it is greater, as in Caffe's loops: NaN never wins,
    and of two equal values (0.0 and -0.0 too) the first stays."""
    buf = geo.padded_copy(xp, x, -numpy.inf)
    shape = x.shape[:2] + tuple(geo.out_hw)
    top = xp.full(shape, -FLT_MAX, dtype=x.dtype)
    arg = xp.full(shape, -1, dtype=numpy.int32)
    v = xp.empty(shape, dtype=x.dtype)
    better = xp.empty(shape, dtype=bool)
    step = xp.empty(shape, dtype=numpy.int32)
    for idx, sl in geo.offsets():
        v[...] = buf[sl]
        xp.greater(v, top, out=better)
        xp.copyto(top, v, where=better)
        xp.subtract(arg, idx, out=step)
        step *= better
        arg -= step  # arg = idx where better
    return top, arg


def max_pool_backward(xp, dtop, arg, geo, dtype):
    buf = xp.zeros(dtop.shape[:2] + tuple(geo.padded), dtype=dtype)
    hit = xp.empty(dtop.shape, dtype=bool)
    share = xp.empty(dtop.shape, dtype=dtype)
    for idx, sl in geo.offsets():
        xp.equal(arg, idx, out=hit)
        xp.multiply(dtop, hit, out=share)
        buf[sl] += share
    return geo.interior(buf)


def spill_empty_windows(xp, dtop, arg, dx, data_dependent):
    """Caffe's MAX backward adds a window's diff at its winner's index in the window's plane;
    a window nothing won (index -1: a window past the image, or inputs all -inf / NaN) adds it
    to the value before the plane, the last of the previous (n, c) plane (before the first
    plane: memory outside the blob, so nothing here). In scan order on the host; the device
    adds each plane's sum (only for empty geometry: ``data_dependent`` False, no read-back)."""
    if data_dependent and (arg.size == 0 or arg.min() >= 0):
        return      # the usual case, found by one reduction (a mask and nonzero cost 20x)
    planes = dtop.shape[0] * dtop.shape[1]
    nothing = (arg < 0).reshape(planes, -1)
    hw = dx.size // max(planes, 1)
    if data_dependent:
        plane_of = xp.nonzero(nothing)[0]
        if plane_of.size:
            keep = plane_of > 0
            xp.add.at(dx.reshape(-1), plane_of[keep] * hw - 1,
                      dtop.reshape(planes, -1)[nothing][keep])
        return
    sums = xp.where(nothing, dtop.reshape(planes, -1), dtop.dtype.type(0)).sum(axis=1)
    dx.reshape(planes, hw)[:-1, -1] += sums[1:]


def ave_pool(xp, x, geo):
    buf = geo.padded_copy(xp, x, 0)
    top = xp.zeros(x.shape[:2] + tuple(geo.out_hw), dtype=x.dtype)
    for _, sl in geo.offsets():
        top += buf[sl]
    top /= geo.ave_divisor(xp, x.dtype)
    return top


def ave_pool_backward(xp, dtop, geo, dtype):
    buf = xp.zeros(dtop.shape[:2] + tuple(geo.padded), dtype=dtype)
    share = dtop / geo.ave_divisor(xp, dtype)
    for _, sl in geo.offsets():
        buf[sl] += share
    return geo.interior(buf)


def stochastic_pool_train(xp, x, geo, uniform):
    """Sample one input per window with probability proportional to its value (Caffe's GPU
    kernel: first position whose running sum reaches u * window sum). -1 where none."""
    buf = geo.padded_copy(xp, x, 0)
    total = xp.zeros(x.shape[:2] + tuple(geo.out_hw), dtype=x.dtype)
    for _, sl in geo.offsets():
        total += buf[sl]
    thres = uniform * total
    run = xp.zeros_like(total)
    top = xp.zeros_like(total)
    arg = xp.full(total.shape, -1, dtype=numpy.int32)
    for idx, sl in geo.offsets():
        v = buf[sl]
        run += v
        hit = (arg < 0) & (run >= thres) & geo.valid(xp, idx)
        xp.copyto(top, v, where=hit)
        xp.copyto(arg, idx, where=hit)
    return top, arg


def stochastic_pool_test(xp, x, geo):
    """TEST-phase stochastic pooling: the probability-weighted average sum(x^2) / sum(x)."""
    buf = geo.padded_copy(xp, x, 0)
    s = xp.zeros(x.shape[:2] + tuple(geo.out_hw), dtype=x.dtype)
    sq = xp.zeros_like(s)
    for _, sl in geo.offsets():
        v = buf[sl]
        s += v
        sq += v * v
    return xp.where(s > 0, sq / xp.where(s > 0, s, 1), 0).astype(x.dtype)
