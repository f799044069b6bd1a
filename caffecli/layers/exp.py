"""Exp: base^(shift + scale x), base e by default (Caffe's exp_layer)."""
import numpy

from ..kernels import libm
from ..layer import NeuronLayer
from ..registry import register_layer
from .log import log_of_base


@register_layer("Exp")
class ExpLayer(NeuronLayer):
    """base ^ (shift + scale * x); base -1 means e."""

    def setup(self, bottom, top):
        p = self.layer_param.exp_param
        log_base = log_of_base(self, p.base)
        self.inner_scale = log_base * p.scale
        if p.shift == 0:
            self.outer_scale = 1.0
        else:   # IEEE arithmetic, as Caffe's pow: a shift past the range gives inf, not an error
            shift = numpy.float64(p.shift)
            with numpy.errstate(over="ignore"):
                self.outer_scale = float(numpy.exp(shift) if p.base == -1
                                         else numpy.power(numpy.float64(p.base), shift))

    def forward(self, bottom, top):
        x = bottom[0].data
        v = x if self.inner_scale == 1 else x * self.inner_scale
        v = libm.exp(self.xp, v)
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
