"""Axis arithmetic the structural layers share, with failures reported as the layer's errors."""
from math import prod

from ..errors import CaffeError


def axis_blocks(joined, parts, wanted, axis):
    """For each wanted array of ``parts`` (Concat's bottoms, Slice's tops), laid side by side
    along ``axis`` in ``joined``: (its block of joined, itself), both as (outer, n * inner)
    views, which kernels/threads.split_copy copies on every core."""
    if not joined.size:
        return
    outer = prod(joined.shape[:axis])
    rows = joined.reshape(outer, -1)
    offset = 0
    for part, want in zip(parts, wanted):
        width = part.size // outer
        if want:
            yield rows[:, offset:offset + width], part.reshape(outer, width)
        offset += width


def legacy_axis(layer, bottom, param, legacy_field, what):
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
    return canonical_axis(layer, bottom, param.axis, what)


def canonical_axis(layer, blob, axis, what="axis"):
    """blob.canonical_axis_index with the failure reported as this layer's error."""
    n = blob.num_axes
    if not -n <= axis < n:
        raise layer.error("%s %d out of range for %d-D bottom with shape %s"
                          % (what, axis, n, blob.shape_string()))
    return axis + n if axis < 0 else axis


def split_axis(blob, axis):
    """(outer, channels, inner) of ``blob`` around the canonical ``axis``."""
    return blob.count(0, axis), blob.shape[axis], blob.count(axis + 1)


def label_positions(layer, bottom, param_name, word):
    """(axis, outer, classes, inner) of the predictions bottom[0] around the ``axis`` of
    ``layer_param.<param_name>``, checked against one label in bottom[1] per outer x inner
    position, as Caffe's loss and accuracy layers check (``word`` names the axis there)."""
    try:
        axis = bottom[0].canonical_axis_index(getattr(layer.layer_param, param_name).axis)
    except CaffeError as e:
        raise layer.error("%s.axis: %s" % (param_name, e))
    outer, classes, inner = split_axis(bottom[0], axis)
    if outer * inner != bottom[1].count():
        raise layer.error(
            "Number of labels must match number of predictions; e.g., if %s axis == 1 "
            "and prediction shape is (N, C, H, W), label count (number of labels) must be "
            "N*H*W, with integer values in {0, 1, ..., C-1} (prediction %s, label %s)"
            % (word, bottom[0].shape_string(), bottom[1].shape_string()))
    return axis, outer, classes, inner
