"""Softmax along one axis (Caffe's softmax_layer), plus the helpers the softmax losses share."""
from ..errors import CaffeError
from ..layer import Layer
from ..registry import register_layer


def split_axis(blob, axis):
    """(outer, channels, inner) of ``blob`` around the canonical ``axis``."""
    return blob.count(0, axis), blob.shape[axis], blob.count(axis + 1)


def softmax(xp, x):
    """Softmax over axis 1 of an (outer, channels, inner) array, max subtracted for stability."""
    e = xp.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def softmax_backward(top_data, top_diff):
    """d(bottom) = (d(top) - <d(top), top> over the channel axis) * top, for (outer, C, inner)."""
    dot = (top_diff * top_data).sum(axis=1, keepdims=True)
    return (top_diff - dot) * top_data


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
        y = softmax(self.xp, bottom[0].data.reshape(self.dims))
        top[0].data.reshape(self.dims)[...] = y

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        d = softmax_backward(top[0].data.reshape(self.dims), top[0].diff.reshape(self.dims))
        bottom[0].diff.reshape(self.dims)[...] = d
