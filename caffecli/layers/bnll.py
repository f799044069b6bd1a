"""BNLL: log(1 + exp(x)), the binomial normal log likelihood (Caffe's bnll_layer)."""
import numpy

from ..kernels import libm
from ..layer import NeuronLayer
from ..registry import register_layer

BNLL_THRESHOLD = 50.0


@register_layer("BNLL")
class BNLLLayer(NeuronLayer):
    """Binomial normal log likelihood, log(1 + exp(x)), computed without overflow."""

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        libm.bnll(xp, x, out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            xp = self.xp
            e = libm.exp(xp, xp.minimum(bottom[0].data, bottom[0].data.dtype.type(BNLL_THRESHOLD)))
            # Caffe: top_diff * expval / (expval + 1.), the sum and the quotient in double
            bottom[0].diff[...] = (top[0].diff * e) / (e.astype(numpy.float64) + 1.0)
