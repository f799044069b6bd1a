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


def usable(*arrays):
    """Whether the kernels take these arrays: C-ordered host float arrays of one dtype and a
    C-ordered host int32 mask."""
    masks = [a for a in arrays if a.dtype == numpy.int32]
    values = [a for a in arrays if a.dtype != numpy.int32]
    return (jit.usable(*values) and len({a.dtype for a in values}) == 1
            and all(isinstance(m, numpy.ndarray) and m.flags.c_contiguous for m in masks))


def max_forward(bottoms, out, mask):
    """out = the elementwise maximum of the bottoms' arrays, mask (int32) = the winner's index."""
    jit.over_parts(kernel(_first_two), bottoms[0], bottoms[1], out, mask)
    for k, x in enumerate(bottoms[2:], 2):
        jit.over_parts(kernel(_later), x, numpy.int32(k), out, mask)


def max_backward(mask, k, dy, dx):
    """dx = dy where bottom ``k`` won, else 0."""
    jit.over_parts(kernel(_routed), mask, numpy.int32(k), dy, dx.dtype.type(0), dx)
