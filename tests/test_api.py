"""The pycaffe-compatible surface: ``import caffecli as caffe`` works like pycaffe does."""
import collections

import numpy
import pytest

import caffecli as caffe
from caffecli.errors import CaffeError
from conftest import real_gpu_reason

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode

NET = """name: "apinet"
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
    bias_filler { type: "gaussian" std: 1 } } }
layer { name: "relu" type: "ReLU" bottom: "ip" top: "ip" }
layer { name: "scale" type: "Power" bottom: "ip" top: "out" power_param { scale: 3 } }
"""

LOSS_NET = """name: "lossnet"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
    bias_filler { type: "gaussian" std: 1 } } }
layer { name: "loss" type: "Reduction" bottom: "ip" top: "loss" loss_weight: 1
  reduction_param { operation: SUMSQ } }
"""

SOLVER = """net: "%s"
base_lr: 0.01
momentum: 0.9
lr_policy: "fixed"
max_iter: 10
display: 0
snapshot_prefix: "%s"
snapshot_after_train: false
random_seed: 5
type: "%s"
"""


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "net.prototxt"
    path.write_text(NET)
    return str(path)


def solver_file(tmp_path, type_name="SGD"):
    net = tmp_path / "loss.prototxt"
    net.write_text(LOSS_NET)
    path = tmp_path / ("solver_%s.prototxt" % type_name)
    path.write_text(SOLVER % (net, tmp_path / "snap", type_name))
    return str(path)


def ip_reference(net, x):
    w, b = (p.data for p in net.params["ip"])
    return numpy.maximum(x @ w.T + b, 0) * 3


# ---- Net -----------------------------------------------------------------------------------
def test_module_surface():
    for name in ("Net", "TRAIN", "TEST", "get_solver", "SGDSolver", "NesterovSolver",
                 "AdaGradSolver", "RMSPropSolver", "AdaDeltaSolver", "AdamSolver",
                 "set_mode_cpu", "set_mode_gpu", "set_device", "set_random_seed",
                 "layer_type_list", "Layer"):
        assert hasattr(caffe, name), name
    assert (caffe.TRAIN, caffe.TEST) == (0, 1)
    types = caffe.layer_type_list()
    assert {"Convolution", "InnerProduct", "Pooling", "ReLU", "Input"} <= set(types)


def test_net_containers(model):
    net = caffe.Net(model, caffe.TEST)
    assert isinstance(net.blobs, collections.OrderedDict)
    assert list(net.blobs) == ["data", "ip", "out"]
    assert list(net.params) == ["ip"]
    assert [tuple(p.data.shape) for p in net.params["ip"]] == [(2, 3), (2,)]
    assert net.inputs == ["data"] and net.outputs == ["out"]
    assert [l.type for l in net.layers] == ["Input", "InnerProduct", "ReLU", "Power"]
    assert list(net.layer_dict) == ["data", "ip", "relu", "scale"]
    net.params["ip"][0].data[...] = 0.25  # the same storage as the layer's own blob
    assert (net.layer_dict["ip"].blobs[0].data == 0.25).all()
    assert net._layer_names == ["data", "ip", "relu", "scale"]
    assert net._blob_names == ["data", "ip", "out"]
    assert net.top_names["relu"] == ["ip"] and net.bottom_names["scale"] == ["ip"]
    assert net.blobs["data"].data.shape == (4, 3) and net.blobs["data"].count == 12


def test_forward_with_inputs(model):
    net = caffe.Net(model, caffe.TEST)
    x = numpy.random.default_rng(0).standard_normal((4, 3)).astype(numpy.float32)
    out = net.forward(data=x)
    assert list(out) == ["out"]
    numpy.testing.assert_allclose(out["out"], ip_reference(net, x), rtol=1e-5, atol=1e-6)
    extra = net.forward(blobs=["ip"], data=x)
    assert set(extra) == {"out", "ip"}
    with pytest.raises(Exception, match="do not match"):
        net.forward(nope=x)
    with pytest.raises(Exception, match="batch sized"):
        net.forward(data=x[:2])


def test_forward_start_end_by_layer_name(model):
    net = caffe.Net(model, caffe.TEST)
    x = numpy.ones((4, 3), numpy.float32)
    net.blobs["data"].data[...] = x
    part = net.forward(end="ip")
    assert list(part) == ["ip"]
    net.blobs["out"].data[...] = -7
    net.blobs["ip"].data[...] = 2.0
    rest = net.forward(start="scale")
    numpy.testing.assert_allclose(rest["out"], 6.0)


def test_writable_params_change_forward(model):
    net = caffe.Net(model, caffe.TEST)
    net.params["ip"][0].data[...] = 0
    net.params["ip"][1].data[...] = [1, -1]
    out = net.forward(data=numpy.ones((4, 3), numpy.float32))["out"]
    numpy.testing.assert_allclose(out, [[3, 0]] * 4)


def test_backward_with_top_diffs(model):
    net = caffe.Net(model, caffe.TEST)
    x = numpy.random.default_rng(1).standard_normal((4, 3)).astype(numpy.float32)
    net.forward(data=x)
    g = numpy.random.default_rng(2).standard_normal((4, 2)).astype(numpy.float32)
    diffs = net.backward(out=g)
    assert list(diffs) == ["data"]
    w, b = (p.data for p in net.params["ip"])
    active = (x @ w.T + b) > 0
    numpy.testing.assert_allclose(diffs["data"], (3 * g * active) @ w, rtol=1e-4, atol=1e-5)
    numpy.testing.assert_allclose(net.params["ip"][1].diff, (3 * g * active).sum(0),
                                  rtol=1e-4, atol=1e-5)
    with pytest.raises(Exception, match="do not match"):
        net.backward(ip=g)
    net.clear_param_diffs()
    assert not net.params["ip"][0].diff.any()


def test_save_and_load_forms(model, tmp_path):
    net = caffe.Net(model, caffe.TEST)
    weights = str(tmp_path / "w.caffemodel")
    net.save(weights)
    want = [p.data.copy() for p in net.params["ip"]]
    for other in (caffe.Net(model, weights, caffe.TEST),
                  caffe.Net(model, caffe.TEST, weights=weights),
                  caffe.Net(model, weights=weights, phase=caffe.TEST)):
        assert other.phase == caffe.TEST
        for p, w in zip(other.params["ip"], want):
            numpy.testing.assert_array_equal(p.data, w)
    fresh = caffe.Net(model, caffe.TRAIN)
    assert fresh.phase == caffe.TRAIN
    fresh.copy_from(weights)
    numpy.testing.assert_array_equal(fresh.params["ip"][0].data, want[0])


def test_net_with_weights_positional_train_phase(model, tmp_path):
    net = caffe.Net(model, caffe.TEST)
    weights = str(tmp_path / "w.caffemodel")
    net.save(weights)
    train = caffe.Net(model, weights, caffe.TRAIN)
    assert train.phase == caffe.TRAIN
    numpy.testing.assert_array_equal(train.params["ip"][1].data, net.params["ip"][1].data)


def test_reshape_after_input_shape_change(model):
    net = caffe.Net(model, caffe.TEST)
    net.blobs["data"].reshape(7, 3)
    net.reshape()
    assert net.blobs["out"].data.shape == (7, 2)
    out = net.forward(data=numpy.ones((7, 3), numpy.float32))
    assert out["out"].shape == (7, 2)


def test_share_with(model):
    a = caffe.Net(model, caffe.TEST)
    b = caffe.Net(model, caffe.TEST)
    b.share_with(a)
    a.params["ip"][0].data[...] = 0.25
    numpy.testing.assert_array_equal(b.params["ip"][0].data, 0.25)


def test_random_seed_reproduces_fillers(model):
    caffe.set_random_seed(123)
    a = caffe.Net(model, caffe.TEST)
    caffe.set_random_seed(123)
    b = caffe.Net(model, caffe.TEST)
    c = caffe.Net(model, caffe.TEST)
    numpy.testing.assert_array_equal(a.params["ip"][0].data, b.params["ip"][0].data)
    assert not numpy.array_equal(b.params["ip"][0].data, c.params["ip"][0].data)


def test_modes():
    caffe.set_mode_cpu()
    caffe.set_device(0)
    if real_gpu_reason() is not None and not caffe.backend.is_standin():
        with pytest.raises(CaffeError):
            caffe.set_mode_gpu()
    assert caffe.context.mode() == "CPU"


def test_unknown_layer_name():
    net = caffe.Net(caffe.proto.io.parse_text(NET, caffe.proto.caffe_pb2.NetParameter()),
                    caffe.TEST)
    with pytest.raises(ValueError):     # pycaffe: list.index of an unknown name
        net.forward(start="nope")


# ---- solvers -------------------------------------------------------------------------------
SOLVER_CLASSES = {"SGD": caffe.SGDSolver, "Nesterov": caffe.NesterovSolver,
                  "AdaGrad": caffe.AdaGradSolver, "RMSProp": caffe.RMSPropSolver,
                  "AdaDelta": caffe.AdaDeltaSolver, "Adam": caffe.AdamSolver}


@pytest.mark.parametrize("type_name", sorted(SOLVER_CLASSES))
def test_typed_solvers_step(tmp_path, type_name):
    path = solver_file(tmp_path, "SGD")
    if type_name in ("AdaGrad", "RMSProp"):  # Caffe refuses momentum with these two
        with open(path) as f:
            text = f.read().replace("momentum: 0.9\n", "")
        with open(path, "w") as f:
            f.write(text)
    solver = SOLVER_CLASSES[type_name](path)
    assert type(solver).__name__ == type_name + "Solver"
    assert solver.iter == 0 and solver.test_nets == []
    before = solver.net.params["ip"][1].data.copy()
    loss0 = float(solver.net.forward()["loss"])
    solver.step(3)
    assert solver.iter == 3
    assert not numpy.array_equal(before, solver.net.params["ip"][1].data)
    assert float(solver.net.forward()["loss"]) < loss0


def test_get_solver_uses_the_file_type(tmp_path):
    solver = caffe.get_solver(solver_file(tmp_path, "Adam"))
    assert type(solver).__name__ == "AdamSolver"
    solver.solve()
    assert solver.iter == 10


def test_solver_snapshot_and_restore(tmp_path):
    solver = caffe.SGDSolver(solver_file(tmp_path))
    solver.step(4)
    solver.snapshot()
    state = tmp_path / "snap_iter_4.solverstate"
    assert state.exists() and (tmp_path / "snap_iter_4.caffemodel").exists()
    weights = [p.data.copy() for p in solver.net.params["ip"]]
    solver.step(2)
    other = caffe.SGDSolver(solver_file(tmp_path))
    other.restore(str(state))
    assert other.iter == 4
    for p, w in zip(other.net.params["ip"], weights):
        numpy.testing.assert_array_equal(p.data, w)
