"""cuBLAS's sgemm/dgemm called through ctypes on cupy's own handle, for the products a CUDA
graph records: cupy refuses every cuBLAS call while its stream captures ("calling cuBLAS API
during stream capture is currently unsupported"), though cuBLAS itself captures GEMMs fine.

The library is the libcublas cupy already loaded (found in /proc/self/maps), or the stand-in
device's emulation of it (``xp.cublas_library``); the handle is cupy's for the current device,
bound here to the capturing stream (cupy binds it back to its own on its next call). alpha and
beta are host scalars, fixed into the graph at capture.
"""
import ctypes

import numpy

from .blas_layout import column_major

_POINTER_MODE_HOST = 0
_lib = None


def _library(xp):
    """The libcublas this process loaded (cupy's), as a ctypes library with typed gemms."""
    global _lib
    standin = getattr(xp, "cublas_library", None)
    if standin is not None:
        return standin
    if _lib is None:
        with open("/proc/self/maps") as maps:
            path = next((line.split()[-1] for line in maps if "/libcublas.so" in line), None)
        lib = ctypes.CDLL(path or "libcublas.so")
        for name, real in (("cublasSgemm_v2", ctypes.c_float), ("cublasDgemm_v2", ctypes.c_double)):
            fn = getattr(lib, name)
            fn.argtypes = [ctypes.c_void_p] + [ctypes.c_int] * 5 + [
                ctypes.POINTER(real), ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p,
                ctypes.c_int, ctypes.POINTER(real), ctypes.c_void_p, ctypes.c_int]
            fn.restype = ctypes.c_int
        lib.cublasSetStream_v2.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.cublasSetPointerMode_v2.argtypes = [ctypes.c_void_p, ctypes.c_int]
        _lib = lib
    return _lib


def plan(a, b, out):
    """The cuBLAS call computing out = a @ b: (c, x, y, transx, transy, m, n, k, ldx, ldy,
    ldc), c = op(x) @ op(y) on Fortran-ordered arrays, or None where an operand would need a
    copy."""
    found = column_major(a, b, out)
    if found is None:
        return None
    c, (x, tx), (y, ty) = found
    m, n = c.shape
    return c, x, y, tx, ty, m, n, a.shape[1], max(1, x.shape[0]), max(1, y.shape[0]), max(1, m)


def gemm(xp, a, b, out, beta):
    """out = a @ b + beta * out on cupy's current stream, recordable in a graph; False
    (nothing done) where an operand would need a copy or the dtype is not float32/float64."""
    found = plan(a, b, out)
    kind = numpy.dtype(out.dtype)
    if found is None or kind.char not in "fd":
        return False
    c, x, y, tx, ty, m, n, k, ldx, ldy, ldc = found
    lib = _library(xp)
    handle = xp.cuda.device.get_cublas_handle()
    lib.cublasSetStream_v2(handle, xp.cuda.get_current_stream().ptr)
    lib.cublasSetPointerMode_v2(handle, _POINTER_MODE_HOST)
    call, real = ((lib.cublasSgemm_v2, ctypes.c_float) if kind.char == "f"
                  else (lib.cublasDgemm_v2, ctypes.c_double))
    status = call(handle, tx, ty, m, n, k, ctypes.pointer(real(1.0)), x.data.ptr, ldx,
                  y.data.ptr, ldy, ctypes.pointer(real(beta)), c.data.ptr, ldc)
    if status:
        raise RuntimeError("cuBLAS %s failed with status %d (m=%d n=%d k=%d)"
                           % ("sgemm" if kind.char == "f" else "dgemm", status, m, n, k))
    return True
