"""Pooling (MAX, AVE, STOCHASTIC) and SPP, with Caffe's window, rounding and padding rules.

Every pooled map is computed by looping over the kernel offsets, each step reading one strided
slice (all windows at once) of a padded copy of the input; MAX keeps the first maximum in
Caffe's scan order, AVE divides by Caffe's pool size (padding counted, clipped at H + pad).
"""
import math

import numpy

from ..layer import Layer
from ..proto import caffe_pb2
from ..registry import register_layer
from .. import context

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
        sizes = []
        for a in range(2):
            start = self.starts(a)
            end = numpy.minimum(start + self.kernel[a], self.in_hw[a] + self.pad[a])
            sizes.append(end - start)
        return xp.asarray(numpy.outer(sizes[0], sizes[1]).astype(dtype))

    def valid(self, xp, index):
        """Which windows' offset ``index`` lies inside the image (host bool, (OH, OW))."""
        i, j = divmod(index, self.kernel[1])
        h = self.starts(0) + i
        w = self.starts(1) + j
        ok = ((h >= 0) & (h < self.in_hw[0]))[:, None] & ((w >= 0) & (w < self.in_hw[1]))[None]
        return xp.asarray(ok)

    def caffe_index(self, xp, offset_index):
        """Map winning kernel offsets to Caffe's h * W + w mask values (-1 where none)."""
        kw, W = self.kernel[1], self.in_hw[1]
        i, j = offset_index // kw, offset_index % kw
        h = xp.asarray(self.starts(0)).reshape(-1, 1) + i
        w = xp.asarray(self.starts(1)).reshape(1, -1) + j
        return xp.where(offset_index >= 0, h * W + w, -1)


def _fail(owner, message):
    from ..errors import CaffeError
    return owner.error(message) if owner is not None else CaffeError(message)


def max_pool(xp, x, geo):
    """MAX forward: (top, winning offset index per output, -1 where the window is empty).

    Branch-free updates (compare, maximum, integer blend): random masks would be slow.
    """
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
        xp.maximum(top, v, out=top)
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


def pooling_params(layer, p, bottom_hw):
    """kernel, stride, pad from a PoolingParameter with Caffe's consistency checks."""
    has = p.HasField
    if p.global_pooling:
        if has("kernel_size") or has("kernel_h") or has("kernel_w"):
            raise layer.error("With Global_pooling: true Filter size cannot specified")
    else:
        if has("kernel_size") == (has("kernel_h") and has("kernel_w")):
            raise layer.error("Filter size is kernel_size OR kernel_h and kernel_w; not both"
                              if has("kernel_size") else
                              "For non-square filters both kernel_h and kernel_w are required.")
    if not ((not has("pad") and has("pad_h") and has("pad_w"))
            or (not has("pad_h") and not has("pad_w"))):
        raise layer.error("pad is pad OR pad_h and pad_w are required.")
    if not ((not has("stride") and has("stride_h") and has("stride_w"))
            or (not has("stride_h") and not has("stride_w"))):
        raise layer.error("Stride is stride OR stride_h and stride_w are required.")
    if p.global_pooling:
        kernel = list(bottom_hw)
    elif has("kernel_size"):
        kernel = [p.kernel_size] * 2
    else:
        kernel = [p.kernel_h, p.kernel_w]
    if kernel[0] <= 0 or kernel[1] <= 0:
        raise layer.error("Filter dimensions cannot be zero (kernel %s)" % kernel)
    pad = [p.pad, p.pad] if not has("pad_h") else [p.pad_h, p.pad_w]
    stride = [p.stride, p.stride] if not has("stride_h") else [p.stride_h, p.stride_w]
    if stride[0] <= 0 or stride[1] <= 0:
        raise layer.error("Stride dimensions cannot be zero (stride %s)" % stride)
    if p.global_pooling and (any(pad) or stride != [1, 1]):
        raise layer.error("With Global_pooling: true; only pad = 0 and stride = 1")
    if any(pad):
        if p.pool not in (PP.AVE, PP.MAX):
            raise layer.error("Padding implemented only for average and max pooling.")
        if pad[0] >= kernel[0] or pad[1] >= kernel[1]:
            raise layer.error("pad %s must be smaller than kernel %s" % (pad, kernel))
    return kernel, stride, pad


@register_layer("Pooling")
class PoolingLayer(Layer):
    """2-D pooling; MAX can write Caffe's argmax mask (index h * W + w) as a second top.

    STOCHASTIC follows Caffe's GPU kernels (BVLC's CPU build has no STOCHASTIC pooling):
    sampling in TRAIN, the weighted average sum(x^2)/sum(x) in TEST.
    """

    exact_num_bottom_blobs = 1
    min_top_blobs = 1

    def __init__(self, param):
        super().__init__(param)
        self.max_top_blobs = 2 if param.pooling_param.pool == PP.MAX else 1

    def setup(self, bottom, top):
        p = self.layer_param.pooling_param
        if p.pool not in (PP.MAX, PP.AVE, PP.STOCHASTIC):
            raise self.error("Unknown pooling method.")
        hw = bottom[0].shape[2:4] if bottom[0].num_axes == 4 else (1, 1)
        self.kernel, self.stride, self.pad = pooling_params(self, p, hw)

    def reshape(self, bottom, top):
        b = bottom[0]
        if b.num_axes != 4:
            raise self.error("Input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got %s" % b.shape_string())
        p = self.layer_param.pooling_param
        if p.global_pooling:
            self.kernel = list(b.shape[2:4])
        self.geo = PoolGeometry(self.kernel, self.stride, self.pad, b.shape[2:4],
                                ceil_mode=p.round_mode == PP.CEIL, owner=self)
        shape = b.shape[:2] + tuple(self.geo.out_hw)
        top[0].reshape(shape)
        if len(top) > 1:
            top[1].reshape(shape)

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        pool = self.layer_param.pooling_param.pool
        self.arg = None
        if pool == PP.MAX:
            out, self.arg = max_pool(xp, x, self.geo)
            if len(top) > 1:
                top[1].data[...] = self.geo.caffe_index(xp, self.arg)
        elif pool == PP.AVE:
            out = ave_pool(xp, x, self.geo)
        elif self.phase == caffe_pb2.TRAIN:
            u = xp.asarray(context.rng().uniform(0, 1, size=top[0].shape).astype(x.dtype))
            out, self.arg = stochastic_pool_train(xp, x, self.geo, u)
        else:
            out = stochastic_pool_test(xp, x, self.geo)
        top[0].data[...] = out

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        dtop = top[0].diff
        pool = self.layer_param.pooling_param.pool
        if pool == PP.AVE:
            dx = ave_pool_backward(xp, dtop, self.geo, dtop.dtype)
        elif self.arg is not None:
            dx = max_pool_backward(xp, dtop, self.arg, self.geo, dtop.dtype)
        else:
            raise self.error("STOCHASTIC pooling has no backward in TEST phase")
        bottom[0].diff[...] = dx


def spp_level_geometry(layer, level, hw, pool=PP.MAX):
    """Caffe's SPP level: 2^level bins, kernel ceil(H/bins), stride = kernel, pad to cover."""
    bins = 2 ** level
    kernel, pad = [], []
    for size in hw:
        k = int(math.ceil(size / float(bins)))
        kernel.append(k)
        pad.append((k * bins - size + 1) // 2)
    if any(pad) and (pad[0] >= kernel[0] or pad[1] >= kernel[1]):
        raise layer.error("pyramid level %d over a %dx%d input needs pad %s >= kernel %s"
                          % (level, hw[0], hw[1], pad, kernel))
    if any(pad) and pool == PP.STOCHASTIC:
        raise layer.error("pyramid level %d needs padding %s, and padding is implemented "
                          "only for average and max pooling" % (level, pad))
    return PoolGeometry(kernel, kernel, pad, hw, ceil_mode=True, owner=layer)


@register_layer("SPP")
class SPPLayer(Layer):
    """Spatial pyramid pooling: each level pooled, flattened and concatenated (N, sum C*bins).

    With pyramid_height 1 the top is the single pooling output (N, C, 1, 1), as in Caffe.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.spp_param
        if p.pyramid_height < 1:
            raise self.error("pyramid_height must be at least 1")
        if p.pool not in (PP.MAX, PP.AVE, PP.STOCHASTIC):
            raise self.error("Unknown pooling method.")

    def reshape(self, bottom, top):
        b = bottom[0]
        if b.num_axes != 4:
            raise self.error("Input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got %s" % b.shape_string())
        hw = b.shape[2:4]
        if hw[0] <= 0 or hw[1] <= 0:
            raise self.error("Input dimensions cannot be zero (%s)" % b.shape_string())
        p = self.layer_param.spp_param
        self.levels = [spp_level_geometry(self, lvl, hw, p.pool)
                       for lvl in range(p.pyramid_height)]
        n, c = b.shape[:2]
        if p.pyramid_height == 1:
            top[0].reshape((n, c) + tuple(self.levels[0].out_hw))
        else:
            top[0].reshape(n, sum(c * g.out_hw[0] * g.out_hw[1] for g in self.levels))

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        pool = self.layer_param.spp_param.pool
        n = x.shape[0]
        out = top[0].data.reshape(n, -1)
        self.args = []
        col = 0
        for g in self.levels:
            arg = None
            if pool == PP.MAX:
                y, arg = max_pool(xp, x, g)
            elif pool == PP.AVE:
                y = ave_pool(xp, x, g)
            elif self.phase == caffe_pb2.TRAIN:
                shape = x.shape[:2] + tuple(g.out_hw)
                u = xp.asarray(context.rng().uniform(0, 1, size=shape).astype(x.dtype))
                y, arg = stochastic_pool_train(xp, x, g, u)
            else:
                y = stochastic_pool_test(xp, x, g)
            self.args.append(arg)
            width = y[0].size
            out[:, col:col + width] = y.reshape(n, width)
            col += width

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        n = bottom[0].shape[0]
        dout = top[0].diff.reshape(n, -1)
        dx = bottom[0].diff
        col = 0
        pool = self.layer_param.spp_param.pool
        for i, (g, arg) in enumerate(zip(self.levels, self.args)):
            shape = bottom[0].shape[:2] + tuple(g.out_hw)
            width = shape[1] * shape[2] * shape[3]
            dy = dout[:, col:col + width].reshape(shape)
            col += width
            if pool == PP.AVE:
                part = ave_pool_backward(xp, dy, g, dy.dtype)
            elif arg is not None:
                part = max_pool_backward(xp, dy, arg, g, dy.dtype)
            else:
                raise self.error("STOCHASTIC pooling has no backward in TEST phase")
            if i == 0:
                dx[...] = part
            else:
                dx += part
