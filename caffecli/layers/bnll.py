"""BNLL: log(1 + exp(x)), the binomial normal log likelihood (Caffe's bnll_layer)."""
from ..layer import NeuronLayer
from ..registry import register_layer

BNLL_THRESHOLD = 50.0


@register_layer("BNLL")
class BNLLLayer(NeuronLayer):
    """Binomial normal log likelihood, log(1 + exp(x)), computed without overflow."""

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        top[0].data[...] = xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            xp = self.xp
            e = xp.exp(xp.minimum(bottom[0].data, BNLL_THRESHOLD))
            bottom[0].diff[...] = top[0].diff * e / (e + 1)
