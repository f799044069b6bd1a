"""Compiled host kernels: plain Python loops that numba compiles on their first call (cached on
disk), for host work that numpy can only do in many passes (pooling, LRN).

numba loads only when such a kernel first runs (importing it takes ~0.4 s), so the command
line, GPU runs and nets without these layers never pay for it. Without numba, or with
``CAFFECLI_JIT=0``, the layers keep their numpy code: the reference the kernels are tested
against. Kernels are ``nogil``: the threads of kernels/threads.py run them on disjoint images.
"""
import importlib.util
import os
import threading

import numpy

from ..util.lazy import LazyModule

numba = LazyModule("numba")
PASS_MIN_PART = 1 << 20  # values per thread for a compiled elementwise pass: fewer are done
                         # before a pool thread wakes
INSTALLED = importlib.util.find_spec("numba") is not None
_compiled = {}
_lock = threading.Lock()


def usable(*arrays):
    """Whether compiled kernels can take these arrays: C-ordered float32/float64 host arrays,
    numba installed and not turned off."""
    return (INSTALLED and os.environ.get("CAFFECLI_JIT", "1") != "0"
            and all(isinstance(a, numpy.ndarray) and a.flags.c_contiguous
                    and a.dtype in (numpy.float32, numpy.float64) for a in arrays))


def kernel(fn, fastmath=False):
    """``fn`` compiled (once, on first use; later processes load it from numba's cache);
    ``fastmath``: LLVM's flags for it (e.g. {"reassoc"}: vectorized sums). Division follows
    C's IEEE rules, as Caffe's loops do: x / 0 is inf or NaN, never an exception."""
    jitted = _compiled.get(fn)
    if jitted is None:
        with _lock:
            jitted = _compiled.get(fn)
            if jitted is None:
                try:
                    jitted = numba.njit(nogil=True, cache=True, fastmath=fastmath,
                                        error_model="numpy")(fn)
                except RuntimeError:    # no writable cache location: compile in memory
                    jitted = numba.njit(nogil=True, fastmath=fastmath, error_model="numpy")(fn)
                _compiled[fn] = jitted
    return jitted
