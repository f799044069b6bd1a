"""The GPU backend: every golden layer case and the SyncedMemory contract under cupy.

Skipped, with the reason, where cupy or a CUDA GPU is missing (CI has none); run them on a
GPU machine with `python3 -m pytest -q tests/test_gpu.py`.
"""
import numpy
import pytest

from caffecli import backend
from golden import case_names, run_layer_case
from grad_specs import CASES

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
    full.blobs["x"].data[...] = x.astype(numpy.float32)  # a host write (pycaffe view)
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
        half.blobs["x"].data[...] = x[4 * k:4 * k + 4].astype(numpy.float32)
        half.clear_param_diffs()
        half.forward_backward()
        sync.on_gradients_ready()
        got.append(grads(half))
    for j in range(2):
        assert numpy.allclose((got[0][j] + got[1][j]) / 2, want[j], rtol=1e-5, atol=1e-6)


# ---- gradient checks on the device --------------------------------------------------------
@pytest.mark.parametrize("name,text,bottoms,kw", CASES, ids=[c[0] for c in CASES])
def test_gradient_on_gpu(name, text, bottoms, kw, gpu_mode):
    from gradcheck import check_gradient
    rs = numpy.random.RandomState(5)
    assert check_gradient(text, [make(rs) for make in bottoms], **kw) > 0


# ---- a training net computes the same numbers on both devices ------------------------------
def _lenet_losses(mode, iterations=5):
    import os
    import caffecli
    from caffecli.proto import caffe_pb2
    from caffecli.proto.io import parse_text, read_net_param
    from caffecli.solvers import get_solver
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    lenet = read_net_param(os.path.join(root, "models", "lenet", "lenet.prototxt"))
    lenet.layer[0].input_param.shape[0].dim[0] = 16
    net = caffe_pb2.NetParameter(name="LeNet")
    net.layer.add().CopyFrom(lenet.layer[0])
    net.layer.add().CopyFrom(parse_text(
        'name: "label" type: "Input" top: "label" input_param { shape { dim: 16 } }',
        caffe_pb2.LayerParameter()))
    net.layer.extend(lenet.layer[1:])
    prob = net.layer[-1]
    prob.type, prob.name = "SoftmaxWithLoss", "loss"
    del prob.top[:]
    prob.bottom.append("label")
    prob.top.append("loss")
    param = parse_text('base_lr: 0.01 momentum: 0.9 weight_decay: 0.0005 lr_policy: "inv" '
                       'gamma: 0.0001 power: 0.75 max_iter: 100 random_seed: 7 display: 0 '
                       'snapshot_after_train: false', caffe_pb2.SolverParameter())
    param.net_param.CopyFrom(net)
    mode()
    caffecli.set_random_seed(7)
    solver = get_solver(param)
    r = numpy.random.RandomState(0)
    x = r.rand(16, 1, 28, 28).astype(numpy.float32)
    y = r.randint(0, 10, size=16).astype(numpy.float32)
    losses = []
    for _ in range(iterations):
        solver.net.blobs["data"].data[...] = x        # host writes, pycaffe style
        solver.net.blobs["label"].data[...] = y
        solver.step(1)
        losses.append(float(solver.net.blobs["loss"].data))
    return losses, [p.data.copy() for p in solver.net.params["ip2"]]


def test_lenet_trains_alike_on_cpu_and_gpu():
    cpu_losses, cpu_w = _lenet_losses(backend.set_mode_cpu)
    try:
        gpu_losses, gpu_w = _lenet_losses(lambda: (backend.set_device(0), backend.set_mode_gpu()))
    finally:
        backend.set_mode_cpu()
    assert gpu_losses[-1] < gpu_losses[0]
    assert numpy.allclose(gpu_losses, cpu_losses, rtol=1e-3, atol=1e-4)
    for a, b in zip(gpu_w, cpu_w):
        assert isinstance(a, numpy.ndarray) and numpy.allclose(a, b, rtol=1e-3, atol=1e-4)


# ---- host views, Python layers, the data-parallel driver, the CLI --------------------------
def test_pycaffe_host_views_and_python_layer_on_gpu(gpu_mode, tmp_path, monkeypatch):
    import cupy
    import sys
    from caffecli.net import Net, TEST
    (tmp_path / "gpu_pylayer.py").write_text(
        "import numpy\n"
        "class Double:\n"
        "    def setup(self, bottom, top): pass\n"
        "    def reshape(self, bottom, top): top[0].reshape(*bottom[0].data.shape)\n"
        "    def forward(self, bottom, top):\n"
        "        assert isinstance(bottom[0].data, numpy.ndarray)\n"
        "        top[0].data[...] = 2 * bottom[0].data\n"
        "    def backward(self, top, propagate_down, bottom): pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "net.prototxt").write_text(
        'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }\n'
        'layer { name: "py" type: "Python" bottom: "x" top: "y" '
        'python_param { module: "gpu_pylayer" layer: "Double" } }\n'
        'layer { name: "relu" type: "ReLU" bottom: "y" top: "z" }\n')
    net = Net(str(tmp_path / "net.prototxt"), TEST, log=False)
    net.blobs["x"].data[...] = [[1, -2, 3], [-4, 5, -6]]      # a host write
    out = net.forward()
    assert isinstance(out["z"], numpy.ndarray)
    assert out["z"].tolist() == [[2, 0, 6], [0, 10, 0]]
    assert isinstance(net.blob_by_name("z").data, cupy.ndarray)  # layers computed on device
    sys.modules.pop("gpu_pylayer", None)


def test_data_parallel_driver_with_one_nccl_rank(gpu_mode):
    """The whole DataParallel path (broadcast, NCCL all-reduce, synchronised requests) with a
    one-rank NCCL communicator trains as a plain solver does."""
    from caffecli import parallel
    from caffecli.solvers import get_solver
    from caffecli.solvers.data_parallel import DataParallel
    from test_data_parallel import RankData, solver_param
    from caffecli import registry
    registry.unregister_layer("TestRankData")
    registry.register_layer("TestRankData")(RankData)
    try:
        plain = get_solver(solver_param(8))
        plain.solve()
        with parallel.solver_group(1):
            root = get_solver(solver_param(8))
            DataParallel(root, parallel.NcclComm.for_devices([0]), [0]).run()
        for a, b in zip(root.net.learnable_params, plain.net.learnable_params):
            assert numpy.allclose(backend.to_host(a.data), backend.to_host(b.data),
                                  rtol=1e-5, atol=1e-6)
    finally:
        registry.unregister_layer("TestRankData")


def test_device_query_prints_caffes_fields():
    from click.testing import CliRunner
    from caffecli.cli.main import cli
    result = CliRunner().invoke(cli, ["device_query", "-gpu", "0"])
    assert result.exit_code == 0, result.output
    for field in ("Device id:", "Major revision number:", "Name:", "Total global memory:",
                  "Warp size:", "Maximum dimension of grid:", "Number of multiprocessors:",
                  "Kernel execution timeout:"):
        assert field in result.stderr


def test_time_on_gpu(tmp_path):
    import os
    from click.testing import CliRunner
    from caffecli.cli.main import cli
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = CliRunner().invoke(cli, ["time", "-model", os.path.join(
        root, "models", "lenet", "lenet.prototxt"), "-gpu", "0", "-iterations", "3"])
    backend.set_mode_cpu()
    assert result.exit_code == 0, result.output
    assert "Use GPU with device ID 0" in result.stderr
    assert "Average Forward-Backward:" in result.stderr
