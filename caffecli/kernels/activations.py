"""Activations written once for numpy and cupy, in Caffe's arithmetic."""
import numpy

from . import caffe_gemv, jit, libm, softmax_jit


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


def softmax(xp, x, out=None):
    """Softmax over axis 1 of an (outer, channels, inner) array, max subtracted for stability,
    into ``out`` where given; compiled on the host (kernels/softmax_jit.py)."""
    if jit.usable(x) and (out is None or jit.usable(out)):
        return softmax_jit.forward(x, numpy.empty_like(x) if out is None else out)
    e = x - x.max(axis=1, keepdims=True)
    libm.exp(xp, e, out=e)
    if xp is numpy:   # Caffe's gemv sum in OpenBLAS's order
        y = e / caffe_gemv.channel_sums(e)[:, None, :]
    else:
        y = e / e.sum(axis=1, keepdims=True)
    if out is None:
        return y
    out[...] = y
    return out


def softmax_backward(top_data, top_diff, out=None):
    """d(bottom) = (d(top) - <d(top), top> over the channel axis) * top, for (outer, C, inner),
    into ``out`` where given; compiled on the host."""
    if jit.usable(top_data, top_diff) and (out is None or jit.usable(out)):
        return softmax_jit.backward(top_data, top_diff,
                                    numpy.empty_like(top_data) if out is None else out)
    if isinstance(top_data, numpy.ndarray):   # Caffe's sdot in OpenBLAS's order
        dot = caffe_gemv.channel_dots(top_data, top_diff)[:, None, :]
    else:
        dot = (top_diff * top_data).sum(axis=1, keepdims=True)
    d = (top_diff - dot) * top_data
    if out is None:
        return d
    out[...] = d
    return out
