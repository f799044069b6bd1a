"""Flatten: collapses axes [axis, end_axis] into one, sharing the data (Caffe's flatten_layer)."""
from ..layer import Layer
from ..registry import register_layer
from ._axes import canonical_axis


@register_layer("Flatten")
class FlattenLayer(Layer):
    """Merges axes [axis, end_axis] into one. As in Caffe, the top takes the bottom's data in
    the forward pass and the bottom takes the top's diff in the backward pass: a diff set on
    the top of a Flatten that needs no backward stays out of the bottom's."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def tops_alias_bottom(self, bottom_count, top_count):
        return True

    def reshape(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("Flatten Layer does not allow in-place computation.")
        p = self.layer_param.flatten_param
        b = bottom[0]
        start = canonical_axis(self, b, p.axis, "axis")
        end = canonical_axis(self, b, p.end_axis, "end_axis")
        if end + 1 < start:
            raise self.error("end_axis %d comes before axis %d for bottom %s"
                             % (p.end_axis, p.axis, b.shape_string()))
        shape = list(b.shape[:start]) + [b.count(start, end + 1)] + list(b.shape[end + 1:])
        top[0].reshape(shape)

    def forward(self, bottom, top):
        top[0].share_data(bottom[0])

    def backward(self, top, propagate_down, bottom):
        bottom[0].share_diff(top[0])
