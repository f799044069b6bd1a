"""Swish: x * sigmoid(beta x) (Caffe's swish_layer)."""
from ..kernels.activations import sigmoid
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("Swish")
class SwishLayer(NeuronLayer):
    """x * sigmoid(beta * x)."""

    def forward(self, bottom, top):
        x = bottom[0].data
        beta = self.layer_param.swish_param.beta
        self.sigmoid_out = sigmoid(self.xp, x * beta)
        top[0].data[...] = x * self.sigmoid_out

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            beta = self.layer_param.swish_param.beta
            by = top[0].data * beta
            s = self.sigmoid_out
            bottom[0].diff[...] = top[0].diff * (by + s * (1 - by))
