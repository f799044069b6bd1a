"""Gathers and scatters by index, for either array module."""


def scatter_add(xp, target, index, values):
    """target[index] += values, repeated indices accumulating (numpy's and cupy's ufunc.at)."""
    if hasattr(xp.add, "at"):
        xp.add.at(target, index, values)
    else:  # cupy before ufunc.at
        import cupyx
        cupyx.scatter_add(target, index, values)


def checked_indices(layer, xp, values, limit, check_values=False):
    """``values`` as int64 row indices (truncated toward zero, as C's int cast), each in
    [0, limit), else a CaffeError of ``layer`` naming the first bad one; ``check_values``
    checks the values before truncation (BatchReindex's CHECKs: -0.5 and NaN are refused, not
    read as row 0). On the device the check reads back one flag."""
    flat = values.reshape(-1)
    idx = flat.astype(xp.int64)
    bad = ~((flat >= 0) & (flat < limit)) if check_values else (idx < 0) | (idx >= limit)
    if bool(bad.any()):
        raise layer.error("index %g out of range [0, %d)" % (float(flat[bad][0]), limit))
    return idx
