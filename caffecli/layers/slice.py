"""Slice: cuts the bottom along one axis into the tops (Caffe's slice_layer); the copies split
across the threads."""
from ..kernels.threads import split_copy
from ..layer import Layer
from ..registry import register_layer
from ._axes import axis_blocks, legacy_axis


@register_layer("Slice")
class SliceLayer(Layer):
    """Cuts the bottom along one axis at slice_point (or into equal parts), one top each."""

    exact_num_bottom_blobs = 1
    min_top_blobs = 1

    def tops_alias_bottom(self, bottom_count, top_count):
        return top_count == 1

    def setup(self, bottom, top):
        p = self.layer_param.slice_param
        if p.HasField("axis") and p.HasField("slice_dim"):
            raise self.error("Either axis or slice_dim should be specified; not both.")
        self.slice_points = [int(s) for s in p.slice_point]

    def reshape(self, bottom, top):
        p = self.layer_param.slice_param
        axis = legacy_axis(self, bottom[0], p, "slice_dim", "slice axis")
        dim = bottom[0].shape[axis]
        ntop = len(top)
        if self.slice_points:
            if len(self.slice_points) != ntop - 1:
                raise self.error("%d slice_point(s) need %d tops, got %d"
                                 % (len(self.slice_points), len(self.slice_points) + 1, ntop))
            if ntop > dim:
                raise self.error("%d tops exceed the size %d of slice axis %d of bottom %s"
                                 % (ntop, dim, axis, bottom[0].shape_string()))
            sizes, prev = [], 0
            for point in self.slice_points:
                if point <= prev:
                    raise self.error("slice_point %d must be greater than %d (points must "
                                     "increase from 0)" % (point, prev))
                sizes.append(point - prev)
                prev = point
            if prev > dim:
                raise self.error("slice_point %d out of range for slice axis %d of size %d "
                                 "(bottom %s)" % (prev, axis, dim, bottom[0].shape_string()))
            sizes.append(dim - prev)
        else:
            if dim % ntop:
                raise self.error("Number of top blobs (%d) should evenly divide input slice "
                                 "axis (%d) of bottom %s" % (ntop, dim, bottom[0].shape_string()))
            sizes = [dim // ntop] * ntop
        self.axis, self.sizes = axis, sizes
        shape = list(bottom[0].shape)
        for t, n in zip(top, sizes):
            shape[axis] = n
            t.reshape(shape)
        if ntop == 1:
            top[0].share_data(bottom[0])
            top[0].share_diff(bottom[0])

    def forward(self, bottom, top):
        if len(top) == 1:
            return
        for block, part in axis_blocks(bottom[0].data, [t.data for t in top], [True] * len(top),
                                       self.axis):
            split_copy(self.xp, part, block)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0] or len(top) == 1:
            return
        for block, part in axis_blocks(bottom[0].diff, [t.diff for t in top], [True] * len(top),
                                       self.axis):
            split_copy(self.xp, block, part)
