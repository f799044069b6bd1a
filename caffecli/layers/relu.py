"""ReLU: max(x, 0) + negative_slope * min(x, 0) (Caffe's relu_layer)."""
from ..kernels.activations import step_mask
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("ReLU")
class ReLULayer(NeuronLayer):
    """max(x, 0) + negative_slope * min(x, 0)."""

    def forward(self, bottom, top):
        x = bottom[0].data
        slope = self.layer_param.relu_param.negative_slope
        if slope:
            top[0].data[...] = (self.xp.maximum(x, 0)
                                + x.dtype.type(slope) * self.xp.minimum(x, 0))
        else:
            self.xp.maximum(x, 0, out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = bottom[0].data  # in place: top data equals max(x,0), same sign test
        dy = top[0].diff
        slope = self.layer_param.relu_param.negative_slope
        self.xp.multiply(dy, step_mask(x, x.dtype.type(slope)) if slope else x > 0,
                         out=bottom[0].diff)
