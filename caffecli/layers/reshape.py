"""Reshape: a new shape over the same data (Caffe's reshape_layer, with 0 and -1 dims)."""
import numpy

from ..layer import Layer
from ..registry import register_layer


@register_layer("Reshape")
class ReshapeLayer(Layer):
    """Gives the bottom's values a new shape (0 copies a dim, -1 infers one); shares storage."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def tops_alias_bottom(self, bottom_count, top_count):
        return True

    def setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("Reshape Layer does not allow in-place computation.")
        dims = [int(d) for d in self.layer_param.reshape_param.shape.dim]
        self.copy_axes = [i for i, d in enumerate(dims) if d == 0]
        inferred = [i for i, d in enumerate(dims) if d == -1]
        if len(inferred) > 1:
            raise self.error("new shape contains multiple -1 dims; at most a single (1) "
                             "value of -1 may be specified")
        bad = [d for d in dims if d < -1]
        if bad:
            raise self.error("new shape has invalid dim %d (use >0, 0 to copy or -1 to infer)"
                             % bad[0])
        self.inferred_axis = inferred[0] if inferred else -1
        self.constant_count = int(numpy.prod([d for d in dims if d > 0], dtype=numpy.int64))
        self.new_dims = dims

    def reshape(self, bottom, top):
        p = self.layer_param.reshape_param
        b = bottom[0]
        start = p.axis if p.axis >= 0 else b.num_axes + p.axis + 1
        if not 0 <= start <= b.num_axes:
            raise self.error("axis %d out of range for %d-D input blob %s"
                             % (p.axis, b.num_axes, b.shape_string()))
        if p.num_axes < -1:
            raise self.error("num_axes must be >= 0, or -1 for all (got %d)" % p.num_axes)
        end = b.num_axes if p.num_axes == -1 else start + p.num_axes
        if end > b.num_axes:
            raise self.error("end_axis = axis + num_axes = %d is out of range for bottom %s"
                             % (end, b.shape_string()))
        shape = list(b.shape[:start]) + list(self.new_dims) + list(b.shape[end:])
        for i in self.copy_axes:
            if start + i >= b.num_axes:
                raise self.error("new shape contains a 0 at position %d, but there was no "
                                 "corresponding bottom axis to copy (bottom %s)"
                                 % (i, b.shape_string()))
            shape[start + i] = b.shape[start + i]
        if self.inferred_axis >= 0:
            explicit = self.constant_count * b.count(0, start) * b.count(end)
            for i in self.copy_axes:
                explicit *= shape[start + i]
            if explicit == 0 or b.count % explicit:
                raise self.error("bottom count (%d) must be divisible by the product of the "
                                 "specified dimensions (%d)" % (b.count, explicit))
            shape[start + self.inferred_axis] = b.count // explicit
        count = int(numpy.prod(shape, dtype=numpy.int64))
        if count != b.count:
            raise self.error("output count must match input count: top shape %s has %d "
                             "values, bottom %s" % (" ".join(map(str, shape)), count,
                                                   b.shape_string()))
        top[0].reshape(shape)
        top[0].share_data(b)
        top[0].share_diff(b)

    def forward(self, bottom, top):
        pass  # the top shares the bottom's storage

    def backward(self, top, propagate_down, bottom):
        pass
