"""Gathers and scatters by index, for either array module."""


def scatter_add(xp, target, index, values):
    """target[index] += values, repeated indices accumulating (numpy's and cupy's ufunc.at)."""
    if hasattr(xp.add, "at"):
        xp.add.at(target, index, values)
    else:  # cupy before ufunc.at
        import cupyx
        cupyx.scatter_add(target, index, values)
