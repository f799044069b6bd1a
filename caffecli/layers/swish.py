"""Swish: x * sigmoid(beta x) (Caffe's swish_layer)."""
import numpy

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
            by = top[0].data * top[0].data.dtype.type(beta)
            s = self.sigmoid_out
            # swish_layer.cpp: top_diff * (beta * y + sigmoid * (1. - beta * y)), where the
            # double literal makes everything after beta * y double
            wide = by.astype(numpy.float64)
            bottom[0].diff[...] = top[0].diff * (wide + s * (1.0 - wide))
