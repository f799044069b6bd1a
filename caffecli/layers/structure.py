"""Structural layers: move, copy or regroup values without arithmetic (Caffe's Concat, Slice,
Flatten, Reshape, Tile, Silence, BatchReindex and Filter)."""
import numpy

from .. import backend
from ..kernels.indexing import scatter_add
from ..layer import Layer
from ..registry import register_layer


def _along(axis, start, stop):
    """Index tuple selecting [start, stop) on ``axis`` and everything elsewhere."""
    return (slice(None),) * axis + (slice(start, stop),)


def _legacy_axis(layer, bottom, param, legacy_field, what):
    """The axis of Concat/Slice: the legacy uint32 field when set, else the canonical ``axis``."""
    if param.HasField(legacy_field):
        axis = int(getattr(param, legacy_field))
        if axis >= 2 ** 31:
            raise layer.error("casting %s from uint32 to int32 produced a negative result"
                              % legacy_field)
        if axis >= bottom.num_axes:
            raise layer.error("%s %d out of range for bottom shape %s"
                              % (legacy_field, axis, bottom.shape_string()))
        return axis
    return _canonical(layer, bottom, param.axis, what)


def _canonical(layer, blob, axis, what="axis"):
    """blob.canonical_axis_index with the failure reported as this layer's error."""
    n = blob.num_axes
    if not -n <= axis < n:
        raise layer.error("%s %d out of range for %d-D bottom with shape %s"
                          % (what, axis, n, blob.shape_string()))
    return axis + n if axis < 0 else axis


@register_layer("Concat")
class ConcatLayer(Layer):
    """Joins the bottoms along one axis; with a single bottom the top shares it."""

    min_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.concat_param
        if p.HasField("axis") and p.HasField("concat_dim"):
            raise self.error("Either axis or concat_dim should be specified; not both.")

    def reshape(self, bottom, top):
        p = self.layer_param.concat_param
        axis = _legacy_axis(self, bottom[0], p, "concat_dim", "concat axis")
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
        out, offset = top[0].data, 0
        for b in bottom:
            n = b.shape[self.axis]
            out[_along(self.axis, offset, offset + n)] = b.data
            offset += n

    def backward(self, top, propagate_down, bottom):
        if len(bottom) == 1:
            return
        grad, offset = top[0].diff, 0
        for b, down in zip(bottom, propagate_down):
            n = b.shape[self.axis]
            if down:
                b.diff[...] = grad[_along(self.axis, offset, offset + n)]
            offset += n


@register_layer("Slice")
class SliceLayer(Layer):
    """Cuts the bottom along one axis at slice_point (or into equal parts), one top each."""

    exact_num_bottom_blobs = 1
    min_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.slice_param
        if p.HasField("axis") and p.HasField("slice_dim"):
            raise self.error("Either axis or slice_dim should be specified; not both.")
        self.slice_points = [int(s) for s in p.slice_point]

    def reshape(self, bottom, top):
        p = self.layer_param.slice_param
        axis = _legacy_axis(self, bottom[0], p, "slice_dim", "slice axis")
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
        src, offset = bottom[0].data, 0
        for t, n in zip(top, self.sizes):
            t.data[...] = src[_along(self.axis, offset, offset + n)]
            offset += n

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0] or len(top) == 1:
            return
        grad, offset = bottom[0].diff, 0
        for t, n in zip(top, self.sizes):
            grad[_along(self.axis, offset, offset + n)] = t.diff
            offset += n


@register_layer("Flatten")
class FlattenLayer(Layer):
    """Merges axes [axis, end_axis] into one; the top shares the bottom's data and diff."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("Flatten Layer does not allow in-place computation.")
        p = self.layer_param.flatten_param
        b = bottom[0]
        start = _canonical(self, b, p.axis, "axis")
        end = _canonical(self, b, p.end_axis, "end_axis")
        if end + 1 < start:
            raise self.error("end_axis %d comes before axis %d for bottom %s"
                             % (p.end_axis, p.axis, b.shape_string()))
        shape = list(b.shape[:start]) + [b.count(start, end + 1)] + list(b.shape[end + 1:])
        top[0].reshape(shape)
        top[0].share_data(b)
        top[0].share_diff(b)

    def forward(self, bottom, top):
        pass  # the top shares the bottom's storage

    def backward(self, top, propagate_down, bottom):
        pass


@register_layer("Reshape")
class ReshapeLayer(Layer):
    """Gives the bottom's values a new shape (0 copies a dim, -1 infers one); shares storage."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

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


@register_layer("Tile")
class TileLayer(Layer):
    """Repeats the bottom ``tiles`` times along ``axis`` (whole blocks from axis on)."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        p = self.layer_param.tile_param
        b = bottom[0]
        self.axis = _canonical(self, b, p.axis)
        if not p.HasField("tiles"):
            raise self.error("Number of tiles must be specified")
        if p.tiles <= 0:
            raise self.error("Number of tiles must be positive (got %d)" % p.tiles)
        self.tiles = int(p.tiles)
        shape = list(b.shape)
        shape[self.axis] *= self.tiles
        top[0].reshape(shape)
        self.outer = b.count(0, self.axis)
        self.inner = b.count(self.axis)

    def forward(self, bottom, top):
        src = bottom[0].data.reshape(self.outer, 1, self.inner)
        top[0].data.reshape(self.outer, self.tiles, self.inner)[...] = src

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        grad = top[0].diff.reshape(self.outer, self.tiles, self.inner)
        out = bottom[0].diff.reshape(self.outer, self.inner)
        out[...] = grad[:, 0]
        for t in range(1, self.tiles):  # Caffe's order of accumulation
            out += grad[:, t]


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


@register_layer("BatchReindex")
class BatchReindexLayer(Layer):
    """top[i] = bottom[0][index[i]] along the first axis; backward sums repeated picks."""

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        if bottom[1].num_axes != 1:
            raise self.error("the index bottom must have 1 axis, got shape %s"
                             % bottom[1].shape_string())
        if bottom[0].num_axes < 1:
            raise self.error("the data bottom needs at least 1 axis")
        top[0].reshape((bottom[1].shape[0],) + tuple(bottom[0].shape[1:]))

    def _indices(self, bottom):
        """The index bottom as ints (truncated like static_cast<int>), range-checked."""
        host = backend.to_host(bottom[1].data)
        n = bottom[0].shape[0]
        if host.size and (host.min() < 0 or host.max() >= n):
            bad = host[(host < 0) | (host >= n)][0]
            raise self.error("index %g out of range for a batch of %d (bottom %s)"
                             % (bad, n, bottom[0].shape_string()))
        return self.xp.asarray(host.astype(numpy.int64))

    def forward(self, bottom, top):
        idx = self._indices(bottom)
        if top[0].count == 0:
            return
        top[0].data[...] = bottom[0].data[idx]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("Cannot backprop to index.")
        if not propagate_down[0]:
            return
        grad = bottom[0].diff
        grad[...] = 0
        if top[0].count:
            scatter_add(self.xp, grad, self.xp.asarray(
                backend.to_host(bottom[1].data).astype(numpy.int64)), top[0].diff)


@register_layer("Filter")
class FilterLayer(Layer):
    """Keeps the items (first-axis entries) whose selector (last bottom) is nonzero."""

    min_bottom_blobs = 2
    min_top_blobs = 1

    def setup(self, bottom, top):
        if len(top) != len(bottom) - 1:
            raise self.error("needs one top per data bottom (bottoms but the selector): "
                             "%d bottoms, %d tops" % (len(bottom), len(top)))
        self.first_reshape = True
        self.selected = numpy.zeros(0, dtype=numpy.int64)

    def reshape(self, bottom, top):
        sel = bottom[-1]
        if sel.num_axes < 1:
            raise self.error("the selector needs at least 1 axis")
        if any(d != 1 for d in sel.shape[1:]):
            raise self.error("Selector blob dimensions must be singletons (1), except the "
                             "first: selector %s" % sel.shape_string())
        for i, b in enumerate(bottom[:-1]):
            if b.num_axes < 1 or b.shape[0] != sel.shape[0]:
                raise self.error("Each bottom should have the same 0th dimension as the "
                                 "selector blob: bottom[%d] %s, selector %s"
                                 % (i, b.shape_string(), sel.shape_string()))
        values = backend.to_host(sel.data).reshape(-1)
        self.selected = numpy.flatnonzero(values != 0)
        n = len(self.selected)
        if self.first_reshape:  # the selector holds no data yet at set-up
            n = bottom[0].shape[0]
            self.first_reshape = False
        for t, b in zip(top, bottom):
            t.reshape((n,) + tuple(b.shape[1:]))

    def forward(self, bottom, top):
        idx = self.xp.asarray(self.selected)
        for t, b in zip(top, bottom):
            t.data[...] = b.data[idx]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[-1]:
            raise self.error("Layer cannot backpropagate to filter index inputs")
        idx = self.xp.asarray(self.selected)
        for i, t in enumerate(top):
            if propagate_down[i]:
                grad = bottom[i].diff
                grad[...] = 0
                grad[idx] = t.diff
