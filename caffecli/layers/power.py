"""Power, Exp and Log: elementwise layers with a scale and shift of the input.

Backward follows Caffe's special cases and reads the bottom at backward time, so in-place use
gives Caffe's numbers.
"""
import math

from ..layer import NeuronLayer
from ..registry import register_layer


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
            y[...] = 1.0 if self.power == 0 else _pow(self.shift, self.power)
            return
        v = bottom[0].data
        if self.scale != 1:
            v = v * self.scale
        if self.shift != 0:
            v = v + self.shift
        if self.power != 1:
            v = v ** self.power
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


def _pow(a, b):
    """C's pow: NaN (not a complex number) for a negative base and fractional exponent."""
    try:
        return math.pow(a, b)
    except (ValueError, OverflowError):
        return float("nan") if a < 0 else float("inf")


def _log_base(layer, base):
    """log(base), with base -1 meaning e; CaffeError for a base that is not positive."""
    if base == -1:
        return 1.0
    if not base > 0:
        raise layer.error("base must be strictly positive, got %g" % base)
    return math.log(base)


@register_layer("Exp")
class ExpLayer(NeuronLayer):
    """base ^ (shift + scale * x); base -1 means e."""

    def setup(self, bottom, top):
        p = self.layer_param.exp_param
        log_base = _log_base(self, p.base)
        self.inner_scale = log_base * p.scale
        if p.shift == 0:
            self.outer_scale = 1.0
        else:
            self.outer_scale = p.base ** p.shift if p.base != -1 else math.exp(p.shift)

    def forward(self, bottom, top):
        x = bottom[0].data
        v = x if self.inner_scale == 1 else x * self.inner_scale
        v = self.xp.exp(v)
        if self.outer_scale != 1:
            v *= self.outer_scale
        top[0].data[...] = v

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        g = top[0].data * top[0].diff
        if self.inner_scale != 1:
            g *= self.inner_scale
        bottom[0].diff[...] = g


@register_layer("Log")
class LogLayer(NeuronLayer):
    """log_base(shift + scale * x); base -1 means e."""

    def setup(self, bottom, top):
        p = self.layer_param.log_param
        log_base = _log_base(self, p.base)
        if log_base == 0:
            raise self.error("Inf result: 1/log(base) = 1/log(%g)" % p.base)
        self.base_scale = 1.0 / log_base
        self.input_scale, self.input_shift = p.scale, p.shift
        self.backward_num_scale = self.input_scale / log_base

    def _shifted(self, x):
        if self.input_scale != 1:
            x = x * self.input_scale
        if self.input_shift != 0:
            x = x + self.input_shift
        return x

    def forward(self, bottom, top):
        v = self.xp.log(self._shifted(bottom[0].data))
        if self.base_scale != 1:
            v *= self.base_scale
        top[0].data[...] = v

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        # Caffe's in-place steps on the bottom diff (which is the top diff when in place).
        g, dy = bottom[0].diff, top[0].diff
        g[...] = self._shifted(bottom[0].data)
        g[...] = 1 / g
        if self.backward_num_scale != 1:
            g *= self.backward_num_scale
        g[...] = dy * g
