"""Elementwise activation layers (Caffe's neuron layers): one bottom, one same-shaped top."""
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("ReLU")
class ReLULayer(NeuronLayer):
    """max(x, 0) + negative_slope * min(x, 0)."""

    def forward_impl(self, bottom, top):
        x = bottom[0].data
        slope = self.layer_param.relu_param.negative_slope
        if slope:
            top[0].data[...] = self.xp.where(x > 0, x, x * slope)
        else:
            self.xp.maximum(x, 0, out=top[0].data)

    def backward_impl(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = bottom[0].data  # in place: top data equals max(x,0), same sign test
        slope = self.layer_param.relu_param.negative_slope
        bottom[0].diff[...] = top[0].diff * ((x > 0) + slope * (x <= 0))
