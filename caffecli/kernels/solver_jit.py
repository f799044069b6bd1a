"""The solvers' whole update of one parameter on the host as one compiled pass (kernels/jit.py):
normalize (iter_size), regularize (L1/L2), the solver's update value, and w -= update, where
the numpy steps made six to ten passes over the parameter and its histories, on one core
(CaffeNet's 61M values with SGD on 2 cores: 194 ms an iteration there, 20-29 ms here).

Each step rounds as the numpy code of solvers/sgd.py and solvers/adaptive.py does, in the
same order (as Caffe: its axpy/axpby steps one rounding, kernels/blas_steps.py, the rest in the
data's type, powx(., 0.5) the C library's pow), so the values are that reference's bit for
bit; the threads (kernels/threads.py) take disjoint ranges. The
device has the same updates as kernels/cuda/solvers.cu.
"""
import numpy

from . import jit
from .jit import kernel

_LOOPS = {}   # (kind, reg): the update loop, made once
wide = numpy.float64   # the loops' float64 steps (one rounding for float32 data)
SOLVERS = ("sgd_update", "nesterov_update", "adagrad_update", "rmsprop_update",
           "adadelta_update", "adam_update")


def _specialized(kind, reg):
    """The update loop of solver ``kind`` (an index into SOLVERS) with regularization ``reg``
    (0 none, 1 L1, 2 L2), compiled with both as constants so that numba drops the other
    branches and vectorizes the loop (one testing them for every value ran the SGD update of
    CaffeNet's fc6, 37.7M values, at 52 ms on 2 cores; this one at 18)."""
    key = (kind, reg)
    if key not in _LOOPS:
        def update(w, g, h, h2, lr, norm, decay, a, b, c, e, f, zero, one, half):
            """Parameter w, its gradient g (left holding the update, as Caffe's diff) and
            histories h and h2, all of one size; a, b, c, e, f: the solver's constants
            (``_constants``). Indices from 0, so numba drops its negative-index wrap and
            the loop vectorizes. Caffe's axpy/axpby steps are one rounding (kernels/
            blas_steps.py): taken in float64, stored to the data's type; its powx(., 0.5) is
            pow (``half``: 0.5 in the data's type)."""
            for i in range(w.size):
                d = g[i] * norm
                if reg == 2:
                    g[i] = wide(decay) * wide(w[i]) + wide(d)
                    d = g[i]
                elif reg == 1:
                    v = w[i]
                    sign = one if v > 0 else (-one if v < 0 else (zero if v == 0 else v))
                    g[i] = wide(decay) * wide(sign) + wide(d)
                    d = g[i]
                if kind == 0:                      # SGD: a momentum
                    h[i] = wide(lr) * wide(d) + wide(h[i] * a)
                    hv = h[i]
                elif kind == 1:                    # Nesterov: a momentum, b = 1 + momentum
                    previous = h[i]
                    h[i] = wide(lr) * wide(d) + wide(previous * a)
                    g[i] = wide(b) * wide(h[i]) + wide(-a * previous)
                    hv = g[i]
                elif kind == 2:                    # AdaGrad: a delta
                    s = h[i] + d * d
                    h[i] = s
                    hv = lr * (d / (s ** half + a))
                elif kind == 3:                    # RMSProp: a decay, b = 1 - decay, c delta
                    h[i] = wide(b) * wide(d * d) + wide(h[i] * a)
                    hv = lr * (d / (h[i] ** half + c))
                elif kind == 4:                    # AdaDelta: a momentum, b = 1 - momentum, c delta
                    h[i] = wide(b) * wide(d * d) + wide(h[i] * a)
                    d = d * ((h2[i] + c) / (h[i] + c)) ** half
                    h2[i] = wide(b) * wide(d * d) + wide(h2[i] * a)
                    hv = d * lr
                else:                              # Adam: a, b betas, c delta, e, f 1 - betas
                    h[i] = wide(e) * wide(d) + wide(h[i] * a)
                    h2[i] = wide(f) * wide(d * d) + wide(h2[i] * b)
                    hv = lr * (h[i] / (h2[i] ** half + c))
                g[i] = hv
                w[i] = w[i] - hv
        _LOOPS[key] = update
    return kernel(_LOOPS[key])


def _constants(kind, constants):
    """The kernel's a, b, c, e, f from the solver's kernel_constants (float32, as Caffe's):
    with 1 + momentum (Nesterov) and 1 - decay (RMSProp, AdaDelta, Adam) rounded in float32,
    as the numpy code rounds them, whatever the data's type."""
    one = numpy.float32(1)
    if kind == 1:
        constants = (constants[0], one + constants[0])
    elif kind in (3, 4):
        constants = (constants[0], one - constants[0], constants[1])
    elif kind == 5:
        constants = tuple(constants) + (one - constants[0], one - constants[1])
    return (tuple(constants) + (numpy.float32(0),) * 5)[:5]


def update(name, w, g, histories, lr, norm, reg, decay, constants):
    """The update ``name`` (SOLVERS) of flat arrays w and g with their histories, in place, on
    every core; ``lr`` the parameter's rate (Adam's times its bias correction), ``constants``
    the solver's kernel_constants."""
    t = w.dtype.type
    h, h2 = histories[0], histories[-1]    # one history set: h2 is h, unread
    kind = SOLVERS.index(name)
    k = tuple(t(v) for v in _constants(kind, constants))
    run = _specialized(kind, reg)
    jit.over_parts(run, w, g, h, h2, t(lr), t(norm), t(decay), *k, t(0), t(1), t(0.5))
