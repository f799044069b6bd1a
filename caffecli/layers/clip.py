"""Clip: x clamped to [min, max] (Caffe's clip_layer)."""
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("Clip")
class ClipLayer(NeuronLayer):
    """max(min, min(x, max)); the gradient passes where min <= x <= max."""

    def forward(self, bottom, top):
        p = self.layer_param.clip_param
        xp = self.xp
        top[0].data[...] = xp.maximum(xp.minimum(bottom[0].data, p.max), p.min)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            p = self.layer_param.clip_param
            x, dy = bottom[0].data, top[0].diff
            self.xp.multiply(dy, (x >= p.min) & (x <= p.max), out=bottom[0].diff)
