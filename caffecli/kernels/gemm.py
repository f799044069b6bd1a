"""Matrix products written into a given buffer: ``out = a @ b`` or ``out += a @ b``.

On the host the product goes straight to BLAS (scipy's sgemm/dgemm, beta 0 or 1), so a weight
gradient accumulates into its diff in place, with no product-sized temporary; any C- or
Fortran-ordered operand is handed over as-is (a C-ordered matrix is a transposed Fortran one).
On the device the same goes to cuBLAS through cupy's ``cupy.cublas.gemm`` (beta 0 or 1 on the
output, C- or Fortran-ordered operands as they are). Anything else (other dtypes, strided
operands, a device module without cuBLAS) uses ``xp.matmul``: the reference path.

BLAS's worker threads spin for about 2^28 cycles (~0.1 s) after each call before they sleep,
taking the cores from the threads that run the non-GEMM work next (kernels/threads.py); unless
the user says otherwise, OPENBLAS_THREAD_TIMEOUT=16 (2^16 cycles) is set before scipy's BLAS
loads: GoogLeNet forward-backward on 2 cores, 3.54 s -> 2.97 s.
"""
import importlib
import os

import numpy

os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "16")
from scipy.linalg import blas  # noqa: E402  (reads the variable when it loads)

_GEMM = {numpy.dtype(numpy.float32): blas.sgemm, numpy.dtype(numpy.float64): blas.dgemm}


def _as_fortran(m):
    """(F-ordered array, trans flag) whose op() is ``m``, or None when ``m`` is neither order."""
    if m.flags.f_contiguous:
        return m, 0
    if m.flags.c_contiguous:
        return m.T, 1
    return None


def _host_gemm(a, b, out, beta):
    """out = a @ b + beta * out by BLAS in place; False (nothing done) where it would copy."""
    call = _GEMM.get(out.dtype)
    if call is None or a.dtype != out.dtype or b.dtype != out.dtype:
        return False
    if out.flags.f_contiguous:
        c, x, y = out, a, b
    elif out.flags.c_contiguous:  # out^T = b^T a^T, out^T being Fortran-ordered
        c, x, y = out.T, b.T, a.T
    else:
        return False
    fx, fy = _as_fortran(x), _as_fortran(y)
    if fx is None or fy is None:
        return False
    call(1.0, fx[0], fy[0], beta=beta, c=c, trans_a=fx[1], trans_b=fy[1], overwrite_c=1)
    return True


_cublas_modules = {}


def _cublas(xp):
    """cupy's cublas helpers (``cupy.cublas``) for device module ``xp``, or None."""
    name = xp.__name__
    if name not in _cublas_modules:
        found = getattr(xp, "cublas", None)
        if found is None:
            try:
                found = importlib.import_module(name + ".cublas")
            except ImportError:
                found = None
        _cublas_modules[name] = found if hasattr(found, "gemm") else None
    return _cublas_modules[name]


def _device_gemm(xp, a, b, out, beta):
    """out = a @ b + beta * out by cuBLAS in place; False (nothing done) where it would copy."""
    cublas = _cublas(xp)
    if cublas is None or out.dtype.char not in "fd" or a.dtype != out.dtype \
            or b.dtype != out.dtype:
        return False
    if not all(m.flags.c_contiguous or m.flags.f_contiguous for m in (a, b, out)):
        return False
    cublas.gemm("N", "N", a, b, out=out, alpha=1.0, beta=beta)
    return True


def gemm(xp, a, b, out, accumulate=False):
    """out = a @ b, or out += a @ b with ``accumulate``, for 2-D a (m, k), b (k, n), out (m, n)."""
    if out.size:
        if a.shape[1] == 0:
            if not accumulate:
                out[...] = 0
            return out
        beta = 1.0 if accumulate else 0.0
        if _host_gemm(a, b, out, beta) if xp is numpy else _device_gemm(xp, a, b, out, beta):
            return out
    if accumulate:
        out += xp.matmul(a, b)
    else:
        xp.matmul(a, b, out=out)
    return out


def gemm_stack(xp, a, b, out, accumulate=False):
    """gemm over the leading axis of (g, m, k), (g, k, n) and (g, m, n) stacks (conv groups)."""
    for i in range(out.shape[0]):
        gemm(xp, a[i], b[i], out[i], accumulate)
    return out
