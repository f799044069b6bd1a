"""AbsVal: |x| (Caffe's absval_layer)."""
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("AbsVal")
class AbsValLayer(NeuronLayer):
    """|x|; Caffe refuses in-place use (backward needs the sign of the input)."""

    def setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("AbsVal Layer does not allow in-place computation.")

    def forward(self, bottom, top):
        self.xp.abs(bottom[0].data, out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = self.xp.sign(bottom[0].data) * top[0].diff
