"""Concat: joins the bottoms along one axis (Caffe's concat_layer); the copies split across
the threads."""
from ..kernels.threads import split_copy
from ..layer import Layer
from ..registry import register_layer
from ._axes import axis_blocks, legacy_axis


@register_layer("Concat")
class ConcatLayer(Layer):
    """Joins the bottoms along one axis; with a single bottom the top shares it."""

    min_bottom_blobs = 1
    exact_num_top_blobs = 1

    def tops_alias_bottom(self, bottom_count, top_count):
        return bottom_count == 1

    def setup(self, bottom, top):
        p = self.layer_param.concat_param
        if p.HasField("axis") and p.HasField("concat_dim"):
            raise self.error("Either axis or concat_dim should be specified; not both.")

    def reshape(self, bottom, top):
        p = self.layer_param.concat_param
        axis = legacy_axis(self, bottom[0], p, "concat_dim", "concat axis")
        shape = list(bottom[0].shape)
        for i, b in enumerate(bottom[1:], 1):
            if b.num_axes != bottom[0].num_axes:
                raise self.error("All inputs must have the same #axes: bottom[0] %s, "
                                 "bottom[%d] %s" % (bottom[0].shape_string(), i,
                                                    b.shape_string()))
            for j in range(len(shape)):
                if j != axis and b.shape[j] != shape[j]:
                    raise self.error("All inputs must have the same shape, except at "
                                     "concat_axis %d: bottom[0] %s, bottom[%d] %s"
                                     % (axis, bottom[0].shape_string(), i, b.shape_string()))
            shape[axis] += b.shape[axis]
        self.axis = axis
        top[0].reshape(shape)
        if len(bottom) == 1:
            top[0].share_data(bottom[0])
            top[0].share_diff(bottom[0])

    def forward(self, bottom, top):
        if len(bottom) == 1:
            return
        for block, part in axis_blocks(top[0].data, [b.data for b in bottom],
                                       [True] * len(bottom), self.axis):
            split_copy(self.xp, block, part)

    def backward(self, top, propagate_down, bottom):
        if len(bottom) == 1:
            return
        for block, part in axis_blocks(top[0].diff, [b.diff for b in bottom], propagate_down,
                                       self.axis):
            split_copy(self.xp, part, block)
