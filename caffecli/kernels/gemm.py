"""Matrix products written into a given buffer: ``out = a @ b`` or ``out += a @ b``.

On the host a product goes to numpy's BLAS (``matmul(out=)``, which hands C- or
Fortran-ordered operands over as they are): on the 2-core EPYC its OpenBLAS build runs
LeNet's skinny products 1.5x as fast as scipy's (50x500 @ 500x4096: 37 vs 23 GFLOP/s) and the
large ones as fast or faster. Not an inner dimension of 1 (an outer product: an inner product
layer's weight gradient at batch 1), which numpy's matmul computes in a loop of its own,
without BLAS, 4-6x slower than scipy's sgemm (CaffeNet's fc6, 4096 x 1 by 1 x 9216: 102 ms
against 17, 2-core Xeon). Written fresh, a float32 product with an inner dimension of 1 to 12
and a large output (a weight gradient at a small batch after a solver's clear) goes to
kernels/outer_jit.py, which writes each value once where BLAS zeroes the output first. A
product accumulated into a diff goes to scipy's sgemm/dgemm with beta 1, in place with no
product-sized temporary, except where the diff is small and the inner dimension long (a
convolution's weight gradient over a whole batch): there kernels/skinny_jit.py's dot products
add into it where it has at most 32768 values, else numpy's product plus an add is the faster
(measured on LeNet conv2's 50x4096 @ 4096x500 before the dot products took it: 38 vs 26
GFLOP/s), the temporary is at most ``SMALL_OUT`` values, and it is computed transposed where
that makes it taller than wide.
On the device the same goes to cuBLAS through cupy's ``cupy.cublas.gemm`` (beta 0 or 1 on the
output, C- or Fortran-ordered operands as they are), and while a CUDA graph captures to the
same cuBLAS call through kernels/cublas_direct.py.
A few rows times a large matrix or its transpose (a fully connected layer's input gradient or
forward at a small batch) goes to kernels/skinny_jit.py, which streams the weights faster.
Anything else (other dtypes, strided operands, a device module without cuBLAS) uses
``xp.matmul``: the reference path.

Both BLAS builds read OPENBLAS_THREAD_TIMEOUT when they load; caffecli/__init__ sets it first
(GoogLeNet forward-backward on 2 cores, 3.54 s -> 2.97 s). Where numpy was imported before
caffecli (``import numpy as np; import caffe``, pycaffe's habit) its BLAS missed it: its
threads are restarted here to read it (kernels/blas_threads.py), and only where that cannot be
done does every product go to scipy's (loaded here, after): ``NUMPY_BLAS_QUIET``. On the
2-core EPYC scipy's build ran CaffeNet's pass 3-6% slower, LeNet's 2-4%.
"""
import importlib
import os

import numpy
from scipy.linalg import blas

from .. import NUMPY_BLAS_QUIET, SHARED_THREADS, replay
from . import blas_threads, cublas_direct, outer_jit, skinny_jit
from .blas_layout import column_major

if not NUMPY_BLAS_QUIET:
    NUMPY_BLAS_QUIET = blas_threads.restart_threads(os.environ["OPENBLAS_THREAD_TIMEOUT"],
                                                    SHARED_THREADS)

SMALL_OUT = 1 << 18  # largest diff (values) accumulated through a temporary product
LONG_INNER = 1024  # shortest inner dimension for which that pays

_GEMM = {numpy.dtype(numpy.float32): blas.sgemm, numpy.dtype(numpy.float64): blas.dgemm}


def _host_gemm(a, b, out, beta):
    """out = a @ b + beta * out by BLAS in place; False (nothing done) where it would copy."""
    call = _GEMM.get(out.dtype)
    if call is None or a.dtype != out.dtype or b.dtype != out.dtype:
        return False
    if NUMPY_BLAS_QUIET and not beta and a.shape[1] != 1:
        numpy.matmul(a, b, out=out)
        return True
    if NUMPY_BLAS_QUIET and out.size <= SMALL_OUT and a.shape[1] >= LONG_INNER:
        # the temporary takes whichever layout gives it more rows than columns: OpenBLAS runs
        # that one faster (LeNet conv2's weight gradient, 50 x 500, before skinny_jit took it:
        # 1.73 -> 1.26 ms)
        out += numpy.matmul(b.T, a.T).T if out.shape[0] < out.shape[1] else numpy.matmul(a, b)
        return True
    found = column_major(a, b, out)
    if found is None:
        return False
    c, fx, fy = found
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
    if replay.capturing():   # cupy refuses cuBLAS calls while its stream captures
        return cublas_direct.gemm(xp, a, b, out, beta)
    cublas.gemm("N", "N", a, b, out=out, alpha=1.0, beta=beta)
    return True


def gemm(xp, a, b, out, accumulate=False):
    """out = a @ b, or out += a @ b with ``accumulate``, for 2-D a (m, k), b (k, n), out (m, n)."""
    if out.size:
        if a.shape[1] == 0:
            if not accumulate:
                out[...] = 0
            return out
        if xp is numpy and accumulate and skinny_jit.applies_sums(a, b, out):
            return skinny_jit.product(a, b, out, accumulate=True)
        if xp is numpy and not accumulate:
            if outer_jit.applies(a, b, out):
                return outer_jit.product(a, b, out)
            if skinny_jit.applies(a, b, out):
                return skinny_jit.product(a, b, out)
            if skinny_jit.applies_rows(a, b, out):
                return skinny_jit.rows_product(a, b, out)
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
