"""Parameter: a learned blob exposed as a top that shares its data and diff (Caffe's
parameter_layer)."""
from ..blob import Blob
from ..layer import Layer
from ..registry import register_layer


@register_layer("Parameter")
class ParameterLayer(Layer):
    """No bottoms; the top shares data and diff with the layer's one parameter blob, so
    gradients written into the top land in the parameter's diff."""

    skip_init_line = "parameter.skipping_init"

    exact_num_bottom_blobs = 0
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        shape = self.layer_param.parameter_param.shape
        if not self.blobs:
            self.blobs = [Blob(shape, dtype=top[0].dtype)]
            self.blobs[0].data[...] = 0
        top[0].reshape(shape)

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        top[0].share_data(self.blobs[0])
        top[0].share_diff(self.blobs[0])
