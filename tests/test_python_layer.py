"""The Python layer (pycaffe's interface) and user-registered layer classes inside training nets."""
import numpy
import pytest

from caffecli.errors import CaffeError
from caffecli.layer import LossLayer
from caffecli import Net
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from caffecli.registry import register_layer
from golden import case_names, run_layer_case
from gradcheck import check_gradient

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode

USER_MODULE = '''
import json
try:
    import caffe
except ImportError:
    import caffecli as caffe


class Scale(caffe.Layer):
    """y = w * x + b with w, b per feature, added with self.blobs.add_blob."""
    def setup(self, bottom, top):
        self.cfg = json.loads(self.param_str or "{}")
        self.seen_phase = self.phase
        if len(self.blobs) == 0:
            self.blobs.add_blob(bottom[0].data.shape[1])
            self.blobs.add_blob(bottom[0].data.shape[1])
            self.blobs[0].data[...] = self.cfg.get("w", 1.0)
            self.blobs[1].data[...] = self.cfg.get("b", 0.0)

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data * self.blobs[0].data + self.blobs[1].data

    def backward(self, top, propagate_down, bottom):
        self.blobs[0].diff[...] += (top[0].diff * bottom[0].data).sum(axis=0)
        self.blobs[1].diff[...] += top[0].diff.sum(axis=0)
        if propagate_down[0]:
            bottom[0].diff[...] = top[0].diff * self.blobs[0].data


class EuclideanLoss(caffe.Layer):
    """The classic pycaffe example loss: sum((a - b)^2) / num / 2."""
    def setup(self, bottom, top):
        if len(bottom) != 2:
            raise Exception("Need two inputs to compute distance.")

    def reshape(self, bottom, top):
        self.d = bottom[0].data - bottom[1].data
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.d = bottom[0].data - bottom[1].data
        top[0].data[...] = (self.d ** 2).sum() / bottom[0].num / 2.

    def backward(self, top, propagate_down, bottom):
        for i in range(2):
            if propagate_down[i]:
                sign = 1 if i == 0 else -1
                bottom[i].diff[...] = sign * self.d / bottom[i].num * top[0].diff


class Broken(caffe.Layer):
    def setup(self, bottom, top):
        raise ValueError("bad param_str " + self.param_str)


class NoForward(caffe.Layer):
    def setup(self, bottom, top):
        pass

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].shape)


class NotALayer(object):
    def __init__(self, param):
        pass
'''


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    (tmp_path / "user_pylayers.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return "user_pylayers"


def py(layer, param_str="", name="py", bottoms=("x",), tops=("y",), module="user_pylayers",
       extra=""):
    return ('layer { name: "%s" type: "Python" %s %s python_param { module: "%s" layer: "%s" '
            "param_str: '%s' } %s }" % (name, " ".join('bottom: "%s"' % b for b in bottoms),
                                        " ".join('top: "%s"' % t for t in tops), module, layer,
                                        param_str, extra))


def inputs(shapes):
    return "".join('layer { name: "%s" type: "Input" top: "%s" input_param { shape { %s } } }'
                   % (n, n, " ".join("dim: %d" % d for d in s)) for n, s in shapes.items())


def net_from(text, phase=caffe_pb2.TRAIN):
    return Net(parse_text(text, caffe_pb2.NetParameter()), phase, log=False)


def sgd_losses(net, steps, lr, feed):
    losses = []
    for _ in range(steps):
        feed(net)
        net.clear_param_diffs()
        losses.append(net.forward_pass())
        net.backward_pass()
        for p in net.learnable_params:
            p.data[...] -= lr * p.diff
    return losses


# ---- golden -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", case_names({"python"}) or ["<none>"])
def test_golden(name):
    if name == "<none>":
        pytest.skip("no golden corpus")
    run_layer_case(name)


# ---- the pycaffe interface --------------------------------------------------------------
def test_param_str_phase_and_added_blobs(user_module):
    for phase in (caffe_pb2.TRAIN, caffe_pb2.TEST):
        net = net_from(inputs({"x": (2, 3)}) + py("Scale", '{"w": 2.0, "b": 0.5}'), phase)
        layer = net.layer_by_name("py")
        assert layer.seen_phase == (0 if phase == caffe_pb2.TRAIN else 1)
        assert layer.cfg == {"w": 2.0, "b": 0.5} and layer.type == "Python"
        assert [b.shape for b in layer.blobs] == [(3,), (3,)]
        assert net.params["py"][0] is layer.blobs[0] and len(net.learnable_params) == 2
        net.blob_by_name("x").data[...] = [[1, 2, 3], [4, 5, 6]]
        net.forward_pass()
        numpy.testing.assert_allclose(net.blob_by_name("y").data,
                                      [[2.5, 4.5, 6.5], [8.5, 10.5, 12.5]])


def test_python_layer_gradient(user_module):
    r = numpy.random.RandomState(0)
    text = ('type: "Python" python_param { module: "user_pylayers" layer: "Scale" '
            "param_str: '{\"w\": 0.7, \"b\": -0.2}' }")
    assert check_gradient(text, [r.uniform(-1, 1, (3, 4))]) > 0


def test_python_loss_gradient(user_module):
    r = numpy.random.RandomState(1)
    text = ('type: "Python" loss_weight: 1 python_param { module: "user_pylayers" '
            'layer: "EuclideanLoss" }')
    assert check_gradient(text, [r.uniform(-1, 1, (3, 4)), r.uniform(-1, 1, (3, 4))]) > 0


def test_python_layer_weights_save_and_load(user_module, tmp_path):
    text = inputs({"x": (2, 3)}) + py("Scale", '{"w": 3.0}')
    net = net_from(text)
    net.layer_by_name("py").blobs[1].data[...] = [1, 2, 3]
    net.save(str(tmp_path / "w.caffemodel"))
    other = net_from(text)
    other.copy_trained_layers_from(str(tmp_path / "w.caffemodel"))
    numpy.testing.assert_array_equal(other.params["py"][1].data, [1, 2, 3])
    numpy.testing.assert_array_equal(other.params["py"][0].data, [3, 3, 3])


def test_module_found_in_current_directory(tmp_path, monkeypatch):
    (tmp_path / "cwd_only_layer.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    net = net_from(inputs({"x": (1, 2)}) + py("Scale", module="cwd_only_layer"))
    assert net.layer_by_name("py").cfg == {}


# ---- errors -----------------------------------------------------------------------------
def test_missing_module_names_module_and_layer():
    with pytest.raises(CaffeError, match="Layer py \\(Python\\).*no_such_module_xyz"):
        net_from(inputs({"x": (1, 2)}) + py("Scale", module="no_such_module_xyz"))


def test_missing_class_names_class(user_module):
    with pytest.raises(CaffeError, match="user_pylayers.*has no class 'Nope'"):
        net_from(inputs({"x": (1, 2)}) + py("Nope"))


def test_exception_in_user_code_becomes_caffe_error(user_module):
    with pytest.raises(CaffeError, match="Layer py \\(Python\\): Broken.setup raised "
                                         "ValueError: bad param_str zz") as err:
        net_from(inputs({"x": (1, 2)}) + py("Broken", "zz"))
    assert isinstance(err.value, ValueError)   # pycaffe re-raises the user's own exception
    with pytest.raises(CaffeError, match="Need two inputs"):
        net_from(inputs({"x": (1, 2)}) + py("EuclideanLoss"))


def test_missing_method_is_reported(user_module):
    net = net_from(inputs({"x": (1, 2)}) + py("NoForward"))
    with pytest.raises(CaffeError, match="Layer py \\(Python\\): NoForward has no method "
                                         "forward"):
        net.forward_pass()


def test_layer_class_must_derive_from_caffe_layer(user_module):
    with pytest.raises(CaffeError, match="NotALayer must be a class deriving from caffe.Layer"):
        net_from(inputs({"x": (1, 2)}) + py("NotALayer"))


def test_errors_from_python_layers_are_runtime_errors(user_module):
    """pycaffe surfaces a Python layer's exception as a RuntimeError; CaffeError is one."""
    with pytest.raises(RuntimeError):
        net_from(inputs({"x": (1, 2)}) + py("Broken", "zz"))


# ---- training with a Python layer and a user-registered layer ----------------------------
@register_layer("TestOnlySquaredError")
class SquaredErrorLoss(LossLayer):
    """A user-registered loss: sum((a - b)^2) / (2 num), written against the engine API."""

    def forward(self, bottom, top):
        self.d = bottom[0].data - bottom[1].data
        top[0].data[...] = (self.d ** 2).sum() / bottom[0].shape[0] / 2

    def backward(self, top, propagate_down, bottom):
        scale = float(top[0].diff) / bottom[0].shape[0]
        if propagate_down[0]:
            bottom[0].diff[...] = scale * self.d
        if propagate_down[1]:
            bottom[1].diff[...] = -scale * self.d


def _regression_feed(seed=3):
    r = numpy.random.RandomState(seed)
    x = r.uniform(-1, 1, (8, 3)).astype(numpy.float32)
    target = (x @ numpy.array([[1.0, -2.0], [0.5, 0.0], [0.0, 1.5]]) + 0.3).astype(numpy.float32)

    def feed(net):
        net.blob_by_name("x").data[...] = x
        net.blob_by_name("t").data[...] = target
    return feed


IP = ('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip" inner_product_param { '
      'num_output: 2 weight_filler { type: "constant" value: 0.1 } '
      'bias_filler { type: "constant" value: 0 } } }')


def test_net_with_python_layers_trains(user_module):
    text = (inputs({"x": (8, 3), "t": (8, 2)}) + IP +
            py("Scale", '{"w": 1.0}', bottoms=("ip",), tops=("s",)) +
            py("EuclideanLoss", name="loss", bottoms=("s", "t"), tops=("loss",),
               extra="loss_weight: 1"))
    net = net_from(text)
    assert len(net.learnable_params) == 4
    losses = sgd_losses(net, 30, 0.2, _regression_feed())
    assert losses[-1] < 0.2 * losses[0], losses
    assert all(b <= a + 1e-6 for a, b in zip(losses, losses[1:]))


def test_net_with_registered_layer_trains(user_module):
    text = (inputs({"x": (8, 3), "t": (8, 2)}) + IP +
            'layer { name: "loss" type: "TestOnlySquaredError" bottom: "ip" bottom: "t" '
            'top: "loss" }')
    net = net_from(text)
    assert net.blob_loss_weights["loss"] == 1
    losses = sgd_losses(net, 60, 0.2, _regression_feed())
    assert losses[-1] < 0.2 * losses[0], losses
    assert all(b <= a + 1e-6 for a, b in zip(losses, losses[1:]))
    w = net.params["ip"][0].data
    assert numpy.abs(w - 0.1).max() > 0.1  # the weights actually moved


def test_registered_and_python_loss_agree(user_module):
    base = inputs({"x": (8, 3), "t": (8, 2)}) + IP
    a = net_from(base + py("EuclideanLoss", name="loss", bottoms=("ip", "t"), tops=("loss",),
                           extra="loss_weight: 1"))
    b = net_from(base + 'layer { name: "loss" type: "TestOnlySquaredError" bottom: "ip" '
                        'bottom: "t" top: "loss" }')
    feed = _regression_feed(5)
    for net in (a, b):
        feed(net)
        net.clear_param_diffs()
        net.forward_backward()
    for pa, pb in zip(a.learnable_params, b.learnable_params):
        numpy.testing.assert_allclose(pa.diff, pb.diff, rtol=1e-5, atol=1e-7)
