"""The kernels the host's OpenBLAS builds run (numpy's and scipy's), for tests of bits.

caffecli's compiled kernels that reproduce a product's bits (outer_jit, Winograd's filter
transforms, col2im by output position, a product taken transposed) and the golden cases'
bit-for-bit solver runs follow the summation orders of OpenBLAS's SKYLAKEX kernels. Other
kernels (an AVX2 core's, or any that OPENBLAS_CORETYPE=Haswell forces) round some products, and
a product against its transpose, differently in the last places: there the same computations
are checked within a few units of rounding instead.
"""
import numpy
from scipy.linalg import blas  # noqa: F401  (loads scipy's OpenBLAS, with numpy's)

from caffecli.kernels.blas_threads import core_names


def cores():
    """The kernel names (lower case) of every OpenBLAS loaded in this process."""
    return core_names()


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
