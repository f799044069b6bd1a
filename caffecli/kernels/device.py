"""Device kernels: the CUDA C of kernels/cuda/ (one file per layer family, and the solvers'
updates), compiled once per family, dtype and device through the array module's RawModule
(cupy's NVRTC; the stand-in builds the same source as host C++), launched over a grid-stride
range.

These are the CAFFE engine's device code where one kernel replaces many array operations. The
layers keep their array-module code as the reference and the path where kernels are off
(``CAFFECLI_DEVICE_KERNELS=0``), or cannot be built (a stand-in without a C++ compiler).
"""
import os
import threading

import numpy

from ..util import environ

THREADS = 256            # threads per block (CAFFECLI_THREADS in common.cuh)
MAX_BLOCKS = 65535       # blocks of a block-reduction launch
_SOURCES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cuda")
_REAL = {numpy.dtype(numpy.float32): "float", numpy.dtype(numpy.float64): "double"}
_modules = {}
_lock = threading.Lock()


def source(family, dtype):
    """The CUDA C of ``family`` (a file of kernels/cuda/) for ``dtype`` data."""
    def read(name):
        with open(os.path.join(_SOURCES, name)) as f:
            return f.read()
    return "typedef %s real;\n%s\n%s" % (_REAL[numpy.dtype(dtype)], read("common.cuh"),
                                        read(family + ".cu"))


def usable(xp, *arrays):
    """Whether device kernels can run on these arrays of ``xp``: a device module with
    RawModule, float32/float64 data, kernels not turned off, and a compiler for the stand-in."""
    if getattr(xp, "RawModule", None) is None or \
            environ.get("CAFFECLI_DEVICE_KERNELS") == "0":
        return False
    if any(numpy.dtype(a.dtype) not in _REAL for a in arrays):
        return False
    compiler = getattr(xp, "kernel_compiler", None)     # the stand-in's C++ compiler
    return compiler is None or compiler() is not None


def function(xp, family, name, dtype):
    """Kernel ``name`` of ``family`` for ``dtype``, its module built on first use on the
    current device (eager passes run before a CUDA graph captures, so no capture builds one)."""
    key = (xp.__name__, xp.cuda.Device().id, family, numpy.dtype(dtype).str)
    module = _modules.get(key)
    if module is None:
        with _lock:
            module = _modules.get(key)
            if module is None:
                module = _modules[key] = xp.RawModule(code=source(family, dtype))
    return module.get_function(name)


def launch(xp, family, name, total, dtype, *args):
    """Run kernel ``name`` over ``total`` elements: its first argument is ``total`` (int32),
    then ``args``, which must be device arrays or numpy scalars of the kernel's C types."""
    if total >= 2 ** 31:
        raise ValueError("kernel %s: %d elements exceed the int32 indexing of caffecli's "
                         "device kernels (as Caffe's)" % (name, total))
    if total == 0:
        return
    blocks = (total + THREADS - 1) // THREADS
    function(xp, family, name, dtype)((blocks,), (THREADS,), (numpy.int32(total),) + args)


def launch_blocks(xp, family, name, total, dtype, *args, blocks=None):
    """Run block-reduction kernel ``name`` (common.cuh's block_sum): ``blocks`` blocks of
    THREADS, by default one per item of ``total`` (at most MAX_BLOCKS; the kernel strides over
    the rest); a kernel whose whole grid makes one sum takes one block."""
    if total > 0:
        count = min(total, MAX_BLOCKS) if blocks is None else blocks
        function(xp, family, name, dtype)((count,), (THREADS,), (numpy.int32(total),) + args)


def ints(*values):
    """Python ints as the int32 scalars the kernels declare."""
    return tuple(numpy.int32(v) for v in values)
