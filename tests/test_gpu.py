"""GPU mode beyond the golden cases: gradient checks on the device, device_query, time -gpu,
and NCCL.

Everything but NCCL runs on the real GPU where cupy finds one, else on the stand-in device
(so CI runs it too); the golden cases and the layer, solver and pycaffe tests run in GPU mode
through the ``devices`` marker. NCCL needs real GPUs and skips, with the reason, without them.
"""
import os

import numpy
import pytest
from click.testing import CliRunner

from caffecli import backend, comms, context, engines, registry
from caffecli.cli.main import cli
from caffecli.solvers import get_solver
from caffecli.solvers.data_parallel import DataParallel
from conftest import real_gpu_reason
from grad_specs import CASES
from gradcheck import check_gradient

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REAL_GPU = real_gpu_reason()
needs_real_gpu = pytest.mark.skipif(REAL_GPU is not None, reason="NCCL: %s" % REAL_GPU)


# ---- gradient checks on the device (float64, Caffe's rule) -------------------------------
@pytest.mark.parametrize("name,text,bottoms,kw", CASES, ids=[c[0] for c in CASES])
def test_gradient_on_the_device(name, text, bottoms, kw, gpu_mode):
    rs = numpy.random.RandomState(5)
    assert check_gradient(text, [make(rs) for make in bottoms], **kw) > 0


def test_layers_compute_on_device_arrays(gpu_mode):
    from caffecli import Net, TEST
    net = Net(os.path.join(ROOT, "models", "lenet", "lenet.prototxt"), TEST, log=False)
    net.forward(data=numpy.ones((64, 1, 28, 28), numpy.float32))
    conv = net.blobs["conv1"]
    assert conv.data_head == "at_gpu" and backend.is_device_array(conv.gpu_data())
    assert backend.array_module(conv.gpu_data()) is backend.device_module()


def test_a_replayed_cuda_graph_computes_the_eager_passes(monkeypatch, gpu_mode):
    """CAFFECLI_CUDA_GRAPHS=1 on this device: captured, replayed, eager's numbers (to the bit
    on the stand-in; cuBLAS may pick other kernels inside a capture, so to rounding on a GPU)."""
    from test_cuda_graphs import twin_runs
    (eager, graphed), step = twin_runs(monkeypatch, steps=8)
    assert step.graph is not None, step.reason
    for a, b in zip(eager, graphed):
        numpy.testing.assert_allclose(b, a, rtol=0 if REAL_GPU else 1e-5,
                                      atol=0 if REAL_GPU else 1e-7)


def test_lenet_trained_through_a_cuda_graph_matches_eager_training(monkeypatch, tmp_path,
                                                                     gpu_mode):
    """A whole solver iteration (passes and update) as one graph on this device, on the CAFFE
    engine: cuDNN's weight-gradient plans may sum in another order each pass, which six steps
    of training make larger than rounding."""
    import caffecli
    monkeypatch.setenv("CAFFECLI_CUDNN", "0")
    from test_device_model import lenet_solver
    param = lenet_solver(tmp_path)
    weights = {}
    for on in ("0", "1"):
        monkeypatch.setenv("CAFFECLI_CUDA_GRAPHS", on)
        solver = caffecli.get_solver(param)
        solver.step(6)
        weights[on] = [p.data.copy() for p in solver.net.engine.learnable_params]
    assert solver._engine._graph_step.graph is not None, solver._engine._graph_step.reason
    for a, b in zip(weights["0"], weights["1"]):
        numpy.testing.assert_allclose(b, a, rtol=0 if REAL_GPU else 1e-5,
                                      atol=0 if REAL_GPU else 1e-7)


# ---- the command line ---------------------------------------------------------------------
def test_device_query_prints_caffes_fields(gpu_mode, monkeypatch):
    monkeypatch.delenv("CAFFECLI_CUDNN", raising=False)
    monkeypatch.delenv("CAFFECLI_CUDA_GRAPHS", raising=False)
    result = CliRunner().invoke(cli, ["device_query", "-gpu", "0"])
    assert result.exit_code == 0, result.output
    for field in ("Device id:", "Major revision number:", "Name:", "Total global memory:",
                  "Warp size:", "Maximum dimension of grid:", "Number of multiprocessors:",
                  "Kernel execution timeout:"):
        assert field in result.stderr
    for software in ("cupy:", "CUDA runtime:", "CUDA driver:", "cuDNN:", "cuDNN engines:"):
        assert software in result.stderr
    line = "cuDNN engines:                 " + (engines.cudnn_missing() or "on (Convolution")
    assert line in result.stderr
    assert "CUDA graphs:                   on (CAFFECLI_CUDA_GRAPHS=0 turns them off)" \
        in result.stderr
    monkeypatch.setenv("CAFFECLI_CUDNN", "0")
    monkeypatch.setenv("CAFFECLI_CUDA_GRAPHS", "0")
    result = CliRunner().invoke(cli, ["device_query", "-gpu", "0"])
    assert "cuDNN engines:                 caffecli's cuDNN engines are turned off " \
        "(CAFFECLI_CUDNN=0)" in result.stderr
    assert "CUDA graphs:                   off (CAFFECLI_CUDA_GRAPHS=0)" in result.stderr
    if REAL_GPU is None:             # a real CUDA reports its versions; the stand-in 0
        assert "CUDA runtime:                  1" in result.stderr


def test_time_on_gpu(gpu_mode):
    result = CliRunner().invoke(cli, ["time", "-model", os.path.join(
        ROOT, "models", "lenet", "lenet.prototxt"), "-gpu", "0", "-iterations", "3"])
    context.set_mode_cpu()
    assert result.exit_code == 0, result.output
    assert "Use GPU with device ID 0" in result.stderr
    assert "Average Forward-Backward:" in result.stderr


# ---- NCCL (real GPUs only) ----------------------------------------------------------------
@needs_real_gpu
def test_nccl_one_rank_path_averages_half_batches(gpu_mode):
    """NCCL will not put two ranks on one GPU: run the data-parallel path with a one-rank
    communicator on each half batch and check the average equals the full batch gradient."""
    from test_parallel import make_net, grads
    x = numpy.random.RandomState(0).randn(8, 5)
    full = make_net(8, numpy.float32)
    full.blobs["x"].data[...] = x.astype(numpy.float32)
    full.clear_param_diffs()
    full.forward_backward()
    want = grads(full)
    half = make_net(4, numpy.float32)
    for j in range(2):
        half.params["ip"][j].data[...] = full.params["ip"][j].data
    sync = comms.GradientSync(half, comms.NcclComm.for_devices([0]), 0)
    got = []
    for k in range(2):
        half.blobs["x"].data[...] = x[4 * k:4 * k + 4].astype(numpy.float32)
        half.clear_param_diffs()
        half.forward_backward()
        sync.on_gradients_ready()
        got.append(grads(half))
    for j in range(2):
        assert numpy.allclose((got[0][j] + got[1][j]) / 2, want[j], rtol=1e-5, atol=1e-6)


@needs_real_gpu
def test_data_parallel_driver_with_one_nccl_rank(gpu_mode):
    """The whole DataParallel path (broadcast, NCCL all-reduce, synchronised requests) with a
    one-rank NCCL communicator trains as a plain solver does."""
    from test_data_parallel import RankData, solver_param
    registry.unregister_layer("TestRankData")
    registry.register_layer("TestRankData")(RankData)
    try:
        plain = get_solver(solver_param(8))
        plain.solve()
        with context.solver_group(1):
            root = get_solver(solver_param(8))
            DataParallel(root, comms.NcclComm.for_devices([0]), [0]).run()
        for a, b in zip(root.net.learnable_params, plain.net.learnable_params):
            assert numpy.allclose(a.data, b.data, rtol=1e-5, atol=1e-6)
    finally:
        registry.unregister_layer("TestRankData")
