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

_OP_N, _OP_T = 0, 1
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


def _operand(x):
    """(op, leading dimension) that makes the column-major view of ``x``'s memory ``x``, or
    None when ``x`` is neither F- nor C-ordered."""
    rows, cols = x.shape
    if x.flags.f_contiguous:
        return _OP_N, max(1, rows)
    if x.flags.c_contiguous:   # its memory is x.T in column-major order
        return _OP_T, max(1, cols)
    return None


def plan(a, b, out):
    """The column-major call computing out = a @ b: (c, x, y, transx, transy, m, n, k, ldx,
    ldy, ldc) with c = x @ y in cuBLAS's terms, or None where an operand would need a copy.
    A C-ordered ``out`` is computed as its transpose, out.T = b.T @ a.T."""
    if out.flags.f_contiguous:
        c, x, y = out, a, b
    elif out.flags.c_contiguous:
        c, x, y = out.T, b.T, a.T
    else:
        return None
    ox, oy = _operand(x), _operand(y)
    if ox is None or oy is None:
        return None
    m, n = c.shape
    return c, x, y, ox[0], oy[0], m, n, x.shape[1], ox[1], oy[1], max(1, m)


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
