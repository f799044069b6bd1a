"""Sigmoid: 1 / (1 + exp(-x)), as Caffe computes it (sigmoid_layer)."""
import numpy

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
            # sigmoid_layer.cpp: top_diff * y * (1. - y), the last factor (a double literal)
            # and the product with it in double
            bottom[0].diff[...] = (top[0].diff * y) * (1.0 - y.astype(numpy.float64))
