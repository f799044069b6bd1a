"""Threshold: 1 where x > threshold, else 0 (Caffe's threshold_layer)."""
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("Threshold")
class ThresholdLayer(NeuronLayer):
    """1 where x > threshold, else 0; not differentiable (Caffe has no backward)."""

    def forward(self, bottom, top):
        t = self.layer_param.threshold_param.threshold
        top[0].data[...] = bottom[0].data > t

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("Backward is not implemented (the threshold function is not "
                             "differentiable)")
