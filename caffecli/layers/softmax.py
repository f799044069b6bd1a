"""Softmax: exp(x - max) / sum(exp(x - max)) along one axis (Caffe's softmax_layer)."""
from ..errors import CaffeError
from ..kernels.activations import softmax, softmax_backward
from ..layer import Layer
from ..registry import register_layer
from ._axes import split_axis


@register_layer("Softmax")
class SoftmaxLayer(Layer):
    """exp(x - max) / sum(exp(x - max)) over ``softmax_param.axis`` (default 1)."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        try:
            self.axis = bottom[0].canonical_axis_index(self.layer_param.softmax_param.axis)
        except CaffeError as e:
            raise self.error("softmax_param.axis: %s" % e)
        self.dims = split_axis(bottom[0], self.axis)
        top[0].reshape_like(bottom[0])

    def forward(self, bottom, top):
        softmax(self.xp, bottom[0].data.reshape(self.dims), top[0].data.reshape(self.dims))

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        softmax_backward(top[0].data.reshape(self.dims), top[0].diff.reshape(self.dims),
                         bottom[0].diff.reshape(self.dims))
