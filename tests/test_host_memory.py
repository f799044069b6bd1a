"""Large host arrays start on 2 MB boundaries (kernels/host_memory.py), so transparent huge
pages cover them whole; small ones are numpy's own."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.kernels import host_memory


@pytest.mark.parametrize("make", [host_memory.empty, host_memory.zeros])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64, numpy.int32])
def test_large_arrays_start_on_a_huge_page(make, dtype):
    size = (3 << 20) // numpy.dtype(dtype).itemsize + 7
    a = make(size, dtype)
    assert a.shape == (size,) and a.dtype == dtype and a.flags.c_contiguous
    assert a.ctypes.data % host_memory.HUGE_PAGE == 0
    a[...] = 1          # every element is its own and writable
    assert a.sum() == size
    if make is host_memory.zeros:
        assert not make(size, dtype).any()


def test_small_arrays_are_numpys_own():
    a = host_memory.zeros(1000, numpy.float32)
    assert a.base is None and a.shape == (1000,) and not a.any()


def test_a_blob_and_a_layers_scratch_on_huge_pages():
    from gradcheck import make_layer
    blob = Blob((4, 256, 32, 32))                 # 4 MB of float32
    assert blob.data.ctypes.data % host_memory.HUGE_PAGE == 0
    assert blob.diff.ctypes.data % host_memory.HUGE_PAGE == 0
    layer = make_layer('type: "ReLU"')
    layer.SetUp([blob], [blob])
    assert layer.scratch("work", (3, 1 << 20), numpy.float32).ctypes.data \
        % host_memory.HUGE_PAGE == 0
