"""Activations written once for numpy and cupy, in Caffe's arithmetic."""
from . import libm


def sigmoid(xp, z, out=None):
    """Caffe's sigmoid, 0.5 * tanh(0.5 z) + 0.5 in double (stable for large |z|), into ``out``
    where given."""
    return libm.sigmoid(xp, z, out)


def step_mask(x, below):
    """(x > 0) + below * (x <= 0): 1 where x > 0, ``below`` (broadcast) elsewhere."""
    pos = x > 0
    factor = pos.astype(x.dtype)
    factor += below * ~pos
    return factor


def softmax(xp, x):
    """Softmax over axis 1 of an (outer, channels, inner) array, max subtracted for stability."""
    e = x - x.max(axis=1, keepdims=True)
    libm.exp(xp, e, out=e)
    return e / e.sum(axis=1, keepdims=True)


def softmax_backward(top_data, top_diff):
    """d(bottom) = (d(top) - <d(top), top> over the channel axis) * top, for (outer, C, inner)."""
    dot = (top_diff * top_data).sum(axis=1, keepdims=True)
    return (top_diff - dot) * top_data
