"""Power: (shift + scale x)^power, with Caffe's special cases in backward (power_layer)."""
from ..kernels import libm
from ..layer import NeuronLayer
from ..registry import register_layer
from ..util.cmath import c_pow


@register_layer("Power")
class PowerLayer(NeuronLayer):
    """(shift + scale * x) ^ power."""

    def setup(self, bottom, top):
        p = self.layer_param.power_param
        self.power, self.scale, self.shift = p.power, p.scale, p.shift
        self.diff_scale = self.power * self.scale

    def forward(self, bottom, top):
        y = top[0].data
        if self.diff_scale == 0:  # the input does not matter
            y[...] = 1.0 if self.power == 0 else c_pow(self.shift, self.power)
            return
        v = bottom[0].data
        if self.scale != 1:
            v = v * self.scale
        if self.shift != 0:
            v = v + self.shift
        if self.power != 1:   # caffe_powx: the C library's pow (powf for float32 data)
            v = libm.power(self.xp, v, self.power)
        y[...] = v

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        ds, power, scale, shift = self.diff_scale, self.power, self.scale, self.shift
        # Caffe's sequence of in-place steps on the bottom diff; in place that buffer is the
        # top diff too, which Caffe overwrites before the final product (we do the same).
        g, dy = bottom[0].diff, top[0].diff
        if ds == 0 or power == 1:
            g[...] = ds
        else:
            x = bottom[0].data
            if power == 2:  # d/dx = 2 scale (shift + scale x)
                g[...] = x * (ds * scale)
                if shift != 0:
                    g += ds * shift
            elif shift == 0:  # d/dx = power * y / x
                g[...] = top[0].data / x
                g *= power
            else:  # d/dx = diff_scale * y / (shift + scale x)
                g[...] = x
                if scale != 1:
                    g *= scale
                if shift != 0:
                    g += shift
                g[...] = top[0].data / g
                if ds != 1:
                    g *= ds
        if ds != 0:
            g[...] = dy * g
