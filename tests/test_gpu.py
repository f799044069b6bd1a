"""The GPU backend: every golden layer case and the SyncedMemory contract under cupy.

Skipped, with the reason, where cupy or a CUDA GPU is missing (CI has none); run them on a
GPU machine with `python3 -m pytest -q tests/test_gpu.py`.
"""
import numpy
import pytest

from caffecli import backend
from golden import case_names, run_layer_case

REASON = backend.gpu_unavailable_reason(0)
pytestmark = pytest.mark.skipif(REASON is not None, reason="GPU tests: %s" % REASON)


@pytest.fixture
def gpu_mode():
    backend.set_device(0)
    backend.set_mode_gpu()
    yield
    backend.set_mode_cpu()


@pytest.mark.parametrize("name", case_names(exclude={"solver", "data", "cli"}) or ["none"])
def test_golden_case_on_gpu(name, gpu_mode):
    net = run_layer_case(name)
    import cupy
    # the net really computed on the device
    assert all(isinstance(b.data, cupy.ndarray) for b in net.all_blobs if b.count)


def test_host_write_reaches_device(gpu_mode):
    import cupy
    from caffecli.blob import Blob
    b = Blob((2, 3))
    b.data[...] = 1                      # device write
    h = b.host_data
    assert isinstance(h, numpy.ndarray) and h.tolist() == [[1] * 3] * 2
    h[...] = 4                           # host write
    assert isinstance(b.data, cupy.ndarray) and float(b.data.sum()) == 24.0
