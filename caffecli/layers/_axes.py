"""Axis arithmetic the structural layers share, with failures reported as the layer's errors."""


def along_axis(axis, start, stop):
    """Index tuple selecting [start, stop) on ``axis`` and everything elsewhere."""
    return (slice(None),) * axis + (slice(start, stop),)


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
