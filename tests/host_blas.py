"""The kernels the host's OpenBLAS builds run (numpy's and scipy's), for tests of bits.

caffecli's compiled kernels that reproduce a product's bits (outer_jit, Winograd's filter
transforms, col2im by output position, a product taken transposed) and the golden cases'
bit-for-bit solver runs follow the summation orders of OpenBLAS's SKYLAKEX kernels. Other
kernels (an AVX2 core's, or any that OPENBLAS_CORETYPE=Haswell forces) round some products, and
a product against its transpose, differently in the last places: there the same computations
are checked within a few units of rounding instead.
"""
import ctypes
import os

import numpy
from scipy.linalg import blas  # noqa: F401  (loads scipy's OpenBLAS, with numpy's)

_CORENAMES = ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
              "openblas_get_corename")


def cores():
    """The kernel names (lower case) of every OpenBLAS loaded in this process."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps
                            if "openblas" in os.path.basename(line.split()[-1])})
    except OSError:
        return []
    found = []
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        name = next((n for n in _CORENAMES if hasattr(lib, n)), None)
        if name is not None:
            getattr(lib, name).restype = ctypes.c_char_p
            found.append(getattr(lib, name)().decode().lower())
    return found


def skylakex():
    """Whether every loaded OpenBLAS runs SKYLAKEX kernels (the orders followed)."""
    found = cores()
    return bool(found) and all(core == "skylakex" for core in found)


def assert_bits_or_close(got, want, what=""):
    """got is want bit for bit where OpenBLAS runs SKYLAKEX kernels; else within a few units of
    rounding of want's largest magnitude (float32: 1e-5, float64: 1e-13), with the same
    shape, and not all zero where want is not."""
    got, want = numpy.asarray(got), numpy.asarray(want)
    if skylakex():
        assert got.shape == want.shape and got.tobytes() == want.tobytes(), what
        return
    tol = 1e-5 if want.dtype == numpy.float32 else 1e-13
    scale = float(numpy.abs(want).max()) if want.size else 0.0
    numpy.testing.assert_allclose(got, want, rtol=tol, atol=tol * scale, err_msg=what)
    assert not (scale and not numpy.any(got)), what
