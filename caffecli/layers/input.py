"""Input: net inputs whose shapes come from input_param (filled by the user before forward)."""
from ..layer import Layer
from ..registry import register_layer


@register_layer("Input")
class InputLayer(Layer):
    exact_num_bottom_blobs = 0
    min_top_blobs = 1

    def setup(self, bottom, top):
        shapes = self.layer_param.input_param.shape
        n = len(shapes)
        if n not in (0, 1, len(top)):
            raise self.error("must specify 'shape' once, once per top blob, or not at all: "
                             "%d tops vs. %d shapes" % (len(top), n))
        if n:
            for i, t in enumerate(top):
                t.reshape(list(shapes[0 if n == 1 else i].dim))

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass
