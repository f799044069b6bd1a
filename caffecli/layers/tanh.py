"""TanH: the hyperbolic tangent (Caffe's tanh_layer)."""
from ..kernels import libm
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("TanH")
class TanHLayer(NeuronLayer):
    """tanh(x)."""

    def forward(self, bottom, top):
        libm.tanh(self.xp, bottom[0].data, out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            y = top[0].data
            bottom[0].diff[...] = top[0].diff * (1 - y * y)
