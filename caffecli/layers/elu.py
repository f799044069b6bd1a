"""ELU: x for x > 0, alpha (exp(x) - 1) otherwise (Caffe's elu_layer)."""
from ..kernels import libm
from ..kernels.activations import step_mask
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("ELU")
class ELULayer(NeuronLayer):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        alpha = self.layer_param.elu_param.alpha
        top[0].data[...] = xp.maximum(x, 0) + alpha * (libm.exp(xp, xp.minimum(x, 0)) - 1)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x, y, dy = bottom[0].data, top[0].data, top[0].diff
        alpha = self.layer_param.elu_param.alpha
        self.xp.multiply(dy, step_mask(x, y + alpha), out=bottom[0].diff)
