"""LRN: local response normalization across channels or within each channel (Caffe's lrn_layer).

ACROSS_CHANNELS runs compiled on the host where it can (kernels/lrn_jit.py, Caffe's running
channel sums) and as device kernels on the GPU (kernels/cuda/lrn.cu); the numpy code here is
the reference, and the path where neither applies. WITHIN_CHANNEL reproduces Caffe's
composition (square -> AVE pooling with its padded divisor -> power (1 + alpha * s)^-beta ->
product with the input), so ``k`` is unused there as in Caffe; on the host that runs as one
compiled pass a plane (lrn_jit.within_forward / within_backward).
"""
import numpy

from ..kernels import device, lrn_jit
from ..kernels.jit import usable as compiled_usable
from ..kernels.pooling import geometry, ave_pool, ave_pool_backward
from ..kernels.threads import for_parts
from ..layer import Layer
from ..proto import caffe_pb2
from ..registry import register_layer

LRNP = caffe_pb2.LRNParameter


@register_layer("LRN")
class LRNLayer(Layer):
    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.lrn_param
        self.size = int(p.local_size)
        if self.size % 2 != 1:
            raise self.error("LRN only supports odd values for local_size (got %d)" % self.size)
        self.pre_pad = (self.size - 1) // 2
        self.alpha, self.beta, self.k = float(p.alpha), float(p.beta), float(p.k)
        if p.norm_region not in (LRNP.ACROSS_CHANNELS, LRNP.WITHIN_CHANNEL):
            raise self.error("Unknown normalization region.")
        self.across = p.norm_region == LRNP.ACROSS_CHANNELS
        self.powed = None
        # the zoo's beta on float32 data, by refined square roots where the engine is DEFAULT
        # (kernels/lrn_jit.py: the power 13x faster than powf, its bits but in its own misrounded
        # 0.06%); ``engine: CAFFE`` and float64 data keep pow
        self.roots = self.beta == 0.75 and p.engine == p.DEFAULT

    def reshape(self, bottom, top):
        b = bottom[0]
        if b.num_axes != 4:
            raise self.error("Input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got %s" % b.shape_string())
        top[0].reshape(b.shape)
        if not self.across:
            self.geo = geometry([self.size] * 2, [1, 1], [self.pre_pad] * 2, b.shape[2:4],
                                owner=self)

    def _channel_window_sum(self, v, out):
        """out = sum over channels c - pre_pad .. c + pre_pad of v (zero outside), one add per
        offset."""
        xp = self.xp
        n, c = v.shape[:2]
        padded = xp.zeros((n, c + self.size - 1) + v.shape[2:], dtype=v.dtype)
        padded[:, self.pre_pad:self.pre_pad + c] = v
        out[...] = padded[:, 0:c]
        for o in range(1, self.size):
            out += padded[:, o:o + c]
        return out

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        dt = x.dtype.type
        if self.across:
            self.scale = self.scratch("scale", x.shape, x.dtype)
            in_place = top[0] is bottom[0]
            y = self.scratch("y", x.shape, x.dtype) if in_place else top[0].data
            compiled = compiled_usable(x, y, self.scale)
            # scale^-beta, kept for the compiled backward (None: this forward did not fill it)
            self.powed = self.scratch("powed", x.shape, x.dtype) if compiled else None

            def part(a, b):
                xa, scale = x[a:b], self.scale[a:b]
                self._channel_window_sum(xa * xa, scale)
                scale *= dt(self.alpha / self.size)
                scale += dt(self.k)
                y[a:b] = xa * xp.power(scale, dt(-self.beta))
            if compiled:
                lrn_jit.forward(x, self.size, self.alpha, self.beta, self.k, self.scale,
                                self.powed, y, self.roots and x.dtype == numpy.float32)
            else:
                for_parts(xp, part, x.shape[0], x.size)
            if in_place:   # Caffe writes scale^-beta over the input, then multiplies by it
                powed = xp.power(self.scale, dt(-self.beta))
                xp.multiply(powed, powed, out=top[0].data)
        elif top[0] is not bottom[0] and compiled_usable(x, top[0].data):
            self.base = self.scratch("base", x.shape, x.dtype)
            self.power = self.scratch("power", x.shape, x.dtype)
            lrn_jit.within_forward(x, self.size, self.geo.ave_divisor(xp, x.dtype), self.alpha,
                                   self.beta, self.base, self.power, top[0].data,
                                   self.roots and x.dtype == numpy.float32)
        else:
            self.base = ave_pool(xp, x * x, self.geo) * dt(self.alpha) + dt(1)
            self.power = xp.power(self.base, dt(-self.beta))
            top[0].data[...] = x * self.power

    def forward_gpu(self, bottom, top):
        """ACROSS_CHANNELS as one device kernel (kernels/cuda/lrn.cu); WITHIN_CHANNEL composes
        pooling as on the host."""
        x, y = bottom[0].data, top[0].data
        if not (self.across and device.usable(self.xp, x)) or top[0] is bottom[0]:
            return self.forward(bottom, top)
        dt = x.dtype.type
        self.scale, self.powed = self.scratch("scale", x.shape, x.dtype), None
        n, c, h, w = x.shape
        device.launch(self.xp, "lrn", "lrn_forward", n * h * w, x.dtype, x,
                      *device.ints(c, h * w, self.size), dt(self.alpha / self.size), dt(self.k),
                      dt(-self.beta), self.scale, y)

    def backward_gpu(self, top, propagate_down, bottom):
        x, dy = bottom[0].data, top[0].diff
        if not (self.across and propagate_down[0] and device.usable(self.xp, x)) \
                or top[0] is bottom[0]:
            return self.backward(top, propagate_down, bottom)
        dt = x.dtype.type
        n, c, h, w = x.shape
        device.launch(self.xp, "lrn", "lrn_backward", n * h * w, x.dtype, x, top[0].data, dy,
                      self.scale, *device.ints(c, h * w, self.size), dt(-self.beta),
                      dt(2 * self.alpha * self.beta / self.size), bottom[0].diff)

    def _backward_in_place(self, blob):
        """Caffe's ACROSS_CHANNELS backward when the top is the bottom: it writes scale^-beta
        over the diff (the top diff too) and squares it before reading the top diff, so the
        gradient is (scale^-2beta) - 2 alpha beta / size * y * window sum(scale^-2beta * y /
        scale), y being the in-place top (scale^-2beta as well)."""
        xp, dt = self.xp, self.scale.dtype.type
        y, dx = blob.data, blob.diff
        powed = xp.power(self.scale, dt(-self.beta))
        squared = powed * powed
        ratio = squared * y / self.scale
        accum = self._channel_window_sum(ratio, ratio)
        dx[...] = squared - dt(2 * self.alpha * self.beta / self.size) * (y * accum)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        x = bottom[0].data
        dy = top[0].diff
        dt = x.dtype.type
        if self.across and top[0] is bottom[0]:
            self._backward_in_place(top[0])
        elif self.across:
            y, dx = top[0].data, bottom[0].diff
            compiled = self.powed is not None and compiled_usable(x, y, dy, self.scale, dx)

            def part(a, b):
                scale = self.scale[a:b]
                ratio = dy[a:b] * y[a:b] / scale
                accum = self._channel_window_sum(ratio, ratio)
                dx[a:b] = (dy[a:b] * xp.power(scale, dt(-self.beta))
                           - dt(2 * self.alpha * self.beta / self.size) * x[a:b] * accum)
            if compiled:
                lrn_jit.backward(x, y, dy, self.scale, self.powed, self.size, self.alpha,
                                 self.beta, dx)
            else:
                for_parts(xp, part, x.shape[0], x.size)
        elif top[0] is not bottom[0] and compiled_usable(x, dy, bottom[0].diff, self.power):
            lrn_jit.within_backward(x, dy, self.base, self.power, self.size,
                                    self.geo.ave_divisor(xp, x.dtype), self.alpha, self.beta,
                                    bottom[0].diff)
        else:   # Caffe's power layer: its top / its base * (-beta * alpha, rounded)
            d_pool = (x * dy) * (self.power / self.base * (dt(-self.beta) * dt(self.alpha)))
            d_sq = ave_pool_backward(xp, d_pool, self.geo, x.dtype)
            bottom[0].diff[...] = dy * self.power + d_sq * (dt(2) * x)
