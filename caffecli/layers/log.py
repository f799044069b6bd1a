"""Log: log_base(shift + scale x), base e by default (Caffe's log_layer)."""
import math

from ..kernels import libm
from ..layer import NeuronLayer
from ..registry import register_layer


def log_of_base(layer, base):
    """log(base), with base -1 meaning e; CaffeError for a base that is not positive."""
    if base == -1:
        return 1.0
    if not base > 0:
        raise layer.error("base must be strictly positive, got %g" % base)
    return math.log(base)


@register_layer("Log")
class LogLayer(NeuronLayer):
    """log_base(shift + scale * x); base -1 means e."""

    def setup(self, bottom, top):
        p = self.layer_param.log_param
        log_base = log_of_base(self, p.base)
        if log_base == 0:
            raise self.error("Inf result: 1/log(base) = 1/log(%g)" % p.base)
        self.base_scale = 1.0 / log_base
        self.input_scale, self.input_shift = p.scale, p.shift
        self.backward_num_scale = self.input_scale / log_base

    def _scaled(self, x, alpha):
        """x * alpha as Caffe's caffe_scal: OpenBLAS's sscal writes zeros for alpha 0, so an
        infinite x gives 0 there, not NaN."""
        return x * alpha if alpha != 0 else self.xp.zeros_like(x)

    def _shifted(self, x):
        if self.input_scale != 1:
            x = self._scaled(x, self.input_scale)
        if self.input_shift != 0:
            x = x + self.input_shift
        return x

    def forward(self, bottom, top):
        v = libm.log(self.xp, self._shifted(bottom[0].data))
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
            g[...] = self._scaled(g, self.backward_num_scale)
        g[...] = dy * g
