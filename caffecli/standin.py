"""A stand-in for cupy: device memory is numpy memory behind an array type of its own.

``CAFFECLI_STANDIN_GPU=1`` (or ``=N`` for N devices) makes caffecli use this module wherever it
would use cupy, so every device path runs, and is tested, on a machine without a GPU. Like cupy,
it refuses to mix its arrays with numpy arrays and turns no device array into a numpy one
silently; unlike cupy, it counts every host<->device copy (``transfers``; ``transfers_of`` a
thread).

Its streams capture CUDA graphs (standin_graph.py), and a host<->device copy on a capturing
stream fails as CUDA fails it; a cuBLAS-backed call (a product, ``cublas.gemm``) fails there as
cupy fails it, while ``cublas_library`` takes the direct calls cuBLAS itself records.
"""
import contextlib
import ctypes
import operator
import os
import sys
import threading
import types

import numpy
from numpy.lib.mixins import NDArrayOperatorsMixin
from numpy.lib.stride_tricks import as_strided

from . import standin_graph as graph
from . import standin_kernels

transfers = {"h2d": 0, "d2h": 0}
_by_thread = {}   # thread ident -> its own counts since the last reset


def reset_transfers():
    transfers.update(h2d=0, d2h=0)
    _by_thread.clear()


def transfers_of(thread=None):
    """The copies ``thread`` (default: the calling one) made since the last reset."""
    ident = (thread or threading.current_thread()).ident
    return dict(_by_thread.get(ident, {"h2d": 0, "d2h": 0}))


def _count(direction):
    graph.refuse("a %s copy" % direction)
    transfers[direction] += 1
    mine = _by_thread.setdefault(threading.get_ident(), {"h2d": 0, "d2h": 0})
    mine[direction] += 1


def _unwrap(obj):
    """numpy arrays behind stand-in arrays, in arguments; host arrays are refused, as cupy does."""
    if type(obj) is ndarray:
        return obj._a
    if isinstance(obj, numpy.ndarray):
        raise TypeError("Unsupported type %r: a host (numpy) array given to a device operation; "
                        "copy it with asarray() first" % type(obj))
    if isinstance(obj, (list, tuple)):
        return type(obj)(_unwrap(o) for o in obj)
    return obj


def _wrap(obj):
    """Results as stand-in arrays; scalars become 0-d device arrays, as cupy's reductions give."""
    if isinstance(obj, numpy.ndarray):
        return ndarray(obj)
    if isinstance(obj, numpy.generic):
        return ndarray(numpy.asarray(obj))
    if isinstance(obj, tuple):
        return tuple(_wrap(o) for o in obj)
    if isinstance(obj, list):
        return [_wrap(o) for o in obj]
    return obj


_CUBLAS_BACKED = {"matmul", "dot", "vdot", "inner", "tensordot", "einsum"}


def _call(fn, args, kwargs):
    args, kwargs = _unwrap(args), {k: _unwrap(v) for k, v in kwargs.items()}
    tape = graph.active()
    if tape is None:
        return _wrap(fn(*args, **kwargs))
    if getattr(fn, "__name__", None) in _CUBLAS_BACKED:
        _refuse_cublas()
    inputs = tape.before(fn, args, kwargs)
    result = _wrap(fn(*args, **kwargs))
    tape.record(fn, args, kwargs, inputs, result)
    return result


class MemoryPointer:
    """cupy.cuda.MemoryPointer as far as ``ptr`` goes: the address of a view's first element
    (what cuDNN's frontend and NCCL take)."""

    __slots__ = ("ptr",)

    def __init__(self, array):
        self.ptr = array.__array_interface__["data"][0]


class ndarray(NDArrayOperatorsMixin):  # noqa: N801 - cupy's name
    """A device array: numpy memory that only device operations and explicit copies touch."""

    __slots__ = ("_a",)
    __array_priority__ = 100

    def __init__(self, array):
        self._a = array

    shape = property(lambda self: self._a.shape)
    dtype = property(lambda self: self._a.dtype)
    ndim = property(lambda self: self._a.ndim)
    size = property(lambda self: self._a.size)
    nbytes = property(lambda self: self._a.nbytes)
    strides = property(lambda self: self._a.strides)
    itemsize = property(lambda self: self._a.itemsize)
    flags = property(lambda self: self._a.flags)
    T = property(lambda self: ndarray(self._a.T))
    data = property(lambda self: MemoryPointer(self._a))

    def __getattr__(self, name):
        if name.startswith("__"):  # __array_interface__ and friends would leak to the host
            raise AttributeError(name)
        attr = getattr(self._a, name)
        if not callable(attr):
            return _wrap(attr)
        return lambda *args, **kwargs: _call(attr, args, kwargs)

    def __array__(self, *args, **kwargs):
        raise TypeError("Implicit conversion to a NumPy array is not allowed. Please use "
                        "`.get()` to construct a NumPy array explicitly.")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out")
        result = _call(getattr(ufunc, method), inputs, kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return result

    def __array_function__(self, func, types_, args, kwargs):
        return _call(func, args, kwargs)

    def __getitem__(self, key):
        return _call(operator.getitem, (self, key), {})

    def __setitem__(self, key, value):
        _call(operator.setitem, (self, key, value), {})

    def __len__(self):
        return len(self._a)

    def __iter__(self):
        return (self[i] for i in range(len(self._a)))

    def _scalar(self, kind):
        _count("d2h")
        return kind(self._a)

    def __float__(self):
        return self._scalar(float)

    def __int__(self):
        return self._scalar(int)

    def __bool__(self):
        return self._scalar(bool)

    def __index__(self):
        return self._scalar(int)

    def item(self, *args):
        _count("d2h")
        return self._a.item(*args)

    def tolist(self):
        _count("d2h")
        return self._a.tolist()

    def get(self, stream=None, order="C", out=None):
        """A host copy (into ``out`` when given), as cupy's ndarray.get."""
        _count("d2h")
        if out is None:
            return numpy.array(self._a, order=order)
        out[...] = self._a
        return out

    def set(self, array, stream=None):
        """Copy host ``array`` in, as cupy's ndarray.set."""
        _count("h2d")
        self._a[...] = array

    def __repr__(self):
        return "standin." + repr(self._a)


def asarray(a, dtype=None, order=None):
    """``a`` as a device array: a host array or list is copied in (counted)."""
    if type(a) is ndarray:
        return a if dtype is None or a.dtype == dtype else a.astype(dtype)
    _count("h2d")
    return ndarray(numpy.array(a, dtype=dtype, order=order or "K", copy=True))


def array(a, dtype=None, copy=True, order="K"):
    if type(a) is ndarray:
        return _call(numpy.array, (a,), dict(dtype=dtype, copy=copy, order=order))
    return asarray(a, dtype=dtype, order=order)


def ascontiguousarray(a, dtype=None):
    if type(a) is ndarray:
        return _call(numpy.ascontiguousarray, (a,), dict(dtype=dtype))
    return asarray(a, dtype=dtype, order="C")


def asnumpy(a, stream=None, out=None):
    """A host copy of ``a`` (counted when it is a device array), as cupy.asnumpy."""
    if type(a) is ndarray:
        return a.get(out=out)
    return numpy.asarray(a)


def sort(a, axis=-1, kind=None):
    """A sorted copy; stable, as cupy's sort always is."""
    return _call(numpy.sort, (a,), dict(axis=axis, kind="stable"))


def argsort(a, axis=-1, kind=None):
    return _call(numpy.argsort, (a,), dict(axis=axis, kind="stable"))


def get_array_module(*arrays):
    return _this if any(type(a) is ndarray for a in arrays) else numpy


class _Ufunc:
    """A numpy ufunc that refuses host arrays and returns device arrays."""

    def __init__(self, ufunc):
        self._u = ufunc

    def __call__(self, *args, **kwargs):
        out = kwargs.get("out")
        result = _call(self._u, args, kwargs)
        return (out[0] if isinstance(out, tuple) and len(out) == 1 else out) \
            if out is not None else result

    def __getattr__(self, name):
        attr = getattr(self._u, name)
        return (lambda *a, **k: _call(attr, a, k)) if callable(attr) else attr


def _proxy(obj):
    """The device version of a numpy attribute: functions wrapped, types and constants as is."""
    if isinstance(obj, numpy.ufunc):
        return _Ufunc(obj)
    if isinstance(obj, types.ModuleType):
        return _Namespace(obj)
    if isinstance(obj, type) or not callable(obj):
        return obj
    return lambda *args, **kwargs: _call(obj, args, kwargs)


class _Namespace:
    """A numpy submodule (random, linalg, lib.stride_tricks) seen from the device."""

    def __init__(self, module):
        self._m = module

    def __getattr__(self, name):
        value = _proxy(getattr(self._m, name))
        setattr(self, name, value)
        return value


def __getattr__(name):
    value = _proxy(getattr(numpy, name))
    globals()[name] = value
    return value


def device_count():
    """How many stand-in devices there are (the value of CAFFECLI_STANDIN_GPU, at least 1)."""
    value = os.environ.get("CAFFECLI_STANDIN_GPU", "1")
    return max(int(value), 1) if value.isdigit() else 1


class _Device(graph.Immediate):
    """cupy.cuda.Device: the current device of this thread."""

    def __init__(self, device=0):
        self.id = int(device)

    def use(self):
        pass


def _device_properties(device):
    return {"name": b"caffecli stand-in device", "major": 0, "minor": 0,
            "totalGlobalMem": 0, "sharedMemPerBlock": 0, "regsPerBlock": 0, "warpSize": 32,
            "memPitch": 0, "maxThreadsPerBlock": 1024, "maxThreadsDim": (1024, 1024, 64),
            "maxGridSize": (2 ** 31 - 1, 65535, 65535), "clockRate": 0,
            "totalConstMem": 0, "textureAlignment": 0, "deviceOverlap": 0,
            "multiProcessorCount": 1, "kernelExecTimeoutEnabled": 0}


cuda = types.SimpleNamespace(
    Device=_Device, Stream=graph.Stream, get_current_stream=lambda: graph.Stream(null=True),
    Graph=graph.Graph, MemoryPool=graph.MemoryPool,
    device=types.SimpleNamespace(get_cublas_handle=lambda: 1),
    using_allocator=lambda allocator=None: contextlib.nullcontext(),
    alloc_pinned_memory=bytearray,
    runtime=types.SimpleNamespace(getDeviceCount=device_count,
                                  getDeviceProperties=_device_properties,
                                  runtimeGetVersion=lambda: 0, driverGetVersion=lambda: 0))


def _gemm_in_place(transa, transb, a, b, target, alpha, beta):
    """target = alpha * op(a) @ op(b) + beta * target, on numpy arrays (one recorded step).
    The product is taken the same way up whichever way the caller's arrays lie: the output
    at least as tall as wide (C-ordered when square), else its transpose from the transposed
    operands. An eager call (``cublas.gemm``, row-major arrays) and the same product made
    through cuBLAS's column-major call (``cublas_library``, where a graph captures) then give
    the same bits, as the one cuBLAS call behind both does; the host BLAS need not round a
    product and its transpose alike (OpenBLAS's AVX2 kernels do not)."""
    def op(m, trans):
        return m.T if trans in ("T", 1) else m
    x, y, out = op(a, transa), op(b, transb), target
    rows, cols = out.shape
    if rows < cols or (rows == cols and not out.flags.c_contiguous):
        x, y, out = y.T, x.T, out.T
    product = alpha * (x @ y)
    if beta:
        out *= beta
        out += product
    else:
        out[...] = product


def _refuse_cublas():
    """What cupy says of any cuBLAS call (its products, cupy.cublas) while a stream captures."""
    if graph.active() is not None:
        raise NotImplementedError("calling cuBLAS API during stream capture is currently "
                                  "unsupported")


def _cublas_gemm(transa, transb, a, b, out=None, alpha=1.0, beta=0.0):
    """cupy.cublas.gemm: out = alpha * op(a) @ op(b) + beta * out, in place."""
    _refuse_cublas()
    _call(_gemm_in_place, (transa, transb, a, b, out, alpha, beta), {})
    return out


cublas = types.SimpleNamespace(gemm=_cublas_gemm)


def _column_major(pointer, rows, cols, ld, dtype):
    """The (rows, cols) column-major matrix of leading dimension ``ld`` at ``pointer``."""
    itemsize = numpy.dtype(dtype).itemsize
    extent = ((cols - 1) * ld + rows) * itemsize
    flat = numpy.frombuffer((ctypes.c_char * extent).from_address(pointer), dtype=dtype)
    return ndarray(as_strided(flat, (rows, cols), (itemsize, ld * itemsize), writeable=True))


def _gemm_by_pointer(dtype, handle, transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c,
                     ldc):
    """cublas<S|D>gemm_v2 on memory found by address; cuBLAS's status (7: a bad argument)."""
    a_rows, b_rows = (m if transa == 0 else k), (k if transb == 0 else n)
    if min(m, n, k) < 0 or lda < max(1, a_rows) or ldb < max(1, b_rows) or ldc < max(1, m):
        return 7
    x = _column_major(a, a_rows, k if transa == 0 else m, lda, dtype)
    y = _column_major(b, b_rows, n if transb == 0 else k, ldb, dtype)
    _call(_gemm_in_place, (transa, transb, x, y, _column_major(c, m, n, ldc, dtype),
                           alpha.contents.value, beta.contents.value), {})
    return 0


cublas_library = types.SimpleNamespace(   # libcublas as kernels/cublas_direct.py calls it
    cublasSgemm_v2=lambda *args: _gemm_by_pointer(numpy.float32, *args),
    cublasDgemm_v2=lambda *args: _gemm_by_pointer(numpy.float64, *args),
    cublasSetStream_v2=lambda handle, stream: 0, cublasSetPointerMode_v2=lambda handle, mode: 0)


class RawModule(standin_kernels.RawModule):
    """cupy.RawModule: CUDA C kernels run as host C++ (standin_kernels.py), each launch one
    device operation (recorded while a graph captures)."""

    launch = staticmethod(lambda run, args: _call(run, args, {}))


kernel_compiler = standin_kernels.compiler

__version__ = "stand-in (numpy %s)" % numpy.__version__
_this = sys.modules[__name__]
