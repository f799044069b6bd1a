"""Sigmoid: 1 / (1 + exp(-x)), as Caffe computes it (sigmoid_layer)."""
from ..kernels.activations import sigmoid
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("Sigmoid")
class SigmoidLayer(NeuronLayer):
    """1 / (1 + exp(-x))."""

    def forward(self, bottom, top):
        top[0].data[...] = sigmoid(self.xp, bottom[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            y = top[0].data
            bottom[0].diff[...] = top[0].diff * y * (1 - y)
