"""ELU: x for x > 0, alpha (exp(x) - 1) otherwise (Caffe's elu_layer)."""
from ..kernels import libm
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("ELU")
class ELULayer(NeuronLayer):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""

    def forward(self, bottom, top):
        libm.elu(self.xp, bottom[0].data, self.layer_param.elu_param.alpha, top[0].data)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        libm.elu_backward(self.xp, bottom[0].data, top[0].data, top[0].diff,
                          self.layer_param.elu_param.alpha, bottom[0].diff)
