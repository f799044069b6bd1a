"""Eltwise MAX on the host as compiled loops (kernels/jit.py): the forward's value and winner
in one pass per bottom, the backward's routed gradient in one pass per bottom, where numpy made
boolean and int64 temporaries for each step (1.6M values, two bottoms, 2 cores: 10 + 9 ms).

Caffe's order (eltwise_layer.cpp): the first two bottoms compared with ``>`` (a tie or a NaN
goes to the second), then each later bottom replacing the maximum only where it is greater
(a tie keeps the earlier one). layers/eltwise.py keeps the numpy code as the reference and for
device arrays.
"""
import numpy

from . import jit
from .jit import kernel
from .threads import for_parts


def _first_two(a, b, out, mask):
    for i in range(out.size):
        first = a[i] > b[i]
        out[i] = a[i] if first else b[i]
        mask[i] = 0 if first else 1


def _later(x, k, out, mask):
    for i in range(out.size):
        better = x[i] > out[i]
        out[i] = x[i] if better else out[i]
        mask[i] = k if better else mask[i]


def _routed(mask, k, dy, zero, dx):
    for i in range(dx.size):
        dx[i] = dy[i] if mask[i] == k else zero


def _flat(*arrays):
    return [a.reshape(-1) for a in arrays]


def usable(*arrays):
    """Whether the kernels take these arrays: C-ordered host float arrays of one dtype and a
    C-ordered host int32 mask."""
    masks = [a for a in arrays if a.dtype == numpy.int32]
    values = [a for a in arrays if a.dtype != numpy.int32]
    return (jit.usable(*values) and len({a.dtype for a in values}) == 1
            and all(isinstance(m, numpy.ndarray) and m.flags.c_contiguous for m in masks))


def max_forward(bottoms, out, mask):
    """out = the elementwise maximum of the bottoms' arrays, mask (int32) = the winner's index."""
    a, b, y, m = _flat(bottoms[0], bottoms[1], out, mask)
    first, later = kernel(_first_two), kernel(_later)
    for_parts(numpy, lambda s, e: first(a[s:e], b[s:e], y[s:e], m[s:e]), y.size, y.size,
              jit.PASS_MIN_PART)
    for k, x in enumerate(bottoms[2:], 2):
        x = x.reshape(-1)
        for_parts(numpy, lambda s, e: later(x[s:e], numpy.int32(k), y[s:e], m[s:e]), y.size,
                  y.size, jit.PASS_MIN_PART)


def max_backward(mask, k, dy, dx):
    """dx = dy where bottom ``k`` won, else 0."""
    m, g, d = _flat(mask, dy, dx)
    routed = kernel(_routed)
    zero = dx.dtype.type(0)
    for_parts(numpy, lambda s, e: routed(m[s:e], numpy.int32(k), g[s:e], zero, d[s:e]), d.size,
              d.size, jit.PASS_MIN_PART)
