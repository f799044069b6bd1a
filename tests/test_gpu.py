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


def test_nccl_one_rank_path_averages_half_batches(gpu_mode):
    """NCCL will not put two ranks on one GPU: run the data-parallel path with a one-rank
    communicator on each half batch and check the average equals the full batch gradient."""
    from caffecli import parallel
    from test_parallel import make_net, grads
    x = numpy.random.RandomState(0).randn(8, 5)
    full = make_net(8, numpy.float32)
    full.blobs["x"].data[...] = backend.to_device(x.astype(numpy.float32))
    full.clear_param_diffs()
    full.forward_backward()
    want = grads(full)
    half = make_net(4, numpy.float32)
    for j in range(2):
        half.params["ip"][j].data[...] = full.params["ip"][j].data
    comm = parallel.NcclComm.for_devices([0])
    sync = parallel.GradientSync(half, comm, 0)
    got = []
    for k in range(2):
        half.blobs["x"].data[...] = backend.to_device(x[4 * k:4 * k + 4].astype(numpy.float32))
        half.clear_param_diffs()
        half.forward_backward()
        sync.on_gradients_ready()
        got.append(grads(half))
    for j in range(2):
        assert numpy.allclose((got[0][j] + got[1][j]) / 2, want[j], rtol=1e-5, atol=1e-6)
