"""Sigmoid: 1 / (1 + exp(-x)), as Caffe computes it (sigmoid_layer)."""
from ..kernels.activations import sigmoid
from ..kernels.libm import sigmoid_backward
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("Sigmoid")
class SigmoidLayer(NeuronLayer):
    """1 / (1 + exp(-x))."""

    def forward(self, bottom, top):
        sigmoid(self.xp, bottom[0].data, top[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            # sigmoid_layer.cpp: top_diff * y * (1. - y), the last factor (a double literal)
            # and the product with it in double
            sigmoid_backward(self.xp, top[0].data, top[0].diff, bottom[0].diff)
