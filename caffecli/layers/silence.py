"""Silence: consumes its bottoms so they are not net outputs (Caffe's silence_layer)."""
from ..layer import Layer
from ..registry import register_layer


@register_layer("Silence")
class SilenceLayer(Layer):
    """Consumes any bottoms so they are not net outputs; backward zeroes their diffs."""

    min_bottom_blobs = 1
    exact_num_top_blobs = 0

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        for b, down in zip(bottom, propagate_down):
            if down:
                b.diff[...] = 0
