"""Gathers and scatters by index, for either array module."""


def scatter_add(xp, target, index, values):
    """target[index] += values, repeated indices accumulating (numpy's and cupy's ufunc.at)."""
    if hasattr(xp.add, "at"):
        xp.add.at(target, index, values)
    else:  # cupy before ufunc.at
        import cupyx
        cupyx.scatter_add(target, index, values)


def checked_indices(layer, xp, values, limit):
    """``values`` as int64 row indices (truncated toward zero, as C's int cast), each in
    [0, limit), else a CaffeError of ``layer`` naming the first bad one; on the device the check
    reads back one flag."""
    idx = values.reshape(-1).astype(xp.int64)
    bad = (idx < 0) | (idx >= limit)
    if bool(bad.any()):
        raise layer.error("index %g out of range [0, %d)" % (float(values.reshape(-1)[bad][0]),
                                                             limit))
    return idx
