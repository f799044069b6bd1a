"""The broadcast geometry Scale and Bias share: bottom[0] seen as (outer, dim, inner) around the
factor's axes."""


def has_learned_factor(layer, bottom):
    """Scale's and Bias's has_given_blobs: a second bottom is the factor, so only a layer with
    one bottom finds its learned blob given."""
    return len(bottom) == 1 and bool(layer.blobs)


def factor_shape(layer, bottom, axis, num_axes, what):
    """The shape of a learned scale/bias blob: bottom[0]'s axes from ``axis``, ``num_axes`` long."""
    b = bottom[0]
    axis = b.canonical_axis_index(axis)
    if num_axes < -1:
        raise layer.error("num_axes must be non-negative, or -1 to extend to the end of "
                          "bottom[0], got %d" % num_axes)
    if num_axes >= 0 and b.num_axes < axis + num_axes:
        raise layer.error("%s blob's shape extends past bottom[0]'s shape %s when applied "
                          "starting with bottom[0] axis = %d" % (what, b.shape_string(), axis))
    return b.shape[axis:] if num_axes == -1 else b.shape[axis:axis + num_axes]


def broadcast_dims(layer, bottom, factor, axis, what):
    """(outer, dim, inner) for applying ``factor`` to bottom[0] from ``axis``; checks shapes."""
    b = bottom[0]
    axis = 0 if factor.num_axes == 0 else b.canonical_axis_index(axis)
    if b.num_axes < axis + factor.num_axes or \
            b.shape[axis:axis + factor.num_axes] != factor.shape:
        raise layer.error("dimension mismatch: %s blob %s does not match bottom[0] %s at "
                          "axis %d" % (what, factor.shape_string(), b.shape_string(), axis))
    return b.count(0, axis), factor.count(), b.count(axis + factor.num_axes)
