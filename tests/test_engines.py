"""Engine selection (Caffe's layer_factory): which layers may run on cuDNN, the fallback to
caffecli's own device code with its INFO line, and a CUDNN engine's hooks and plan cache, on
the stand-in device."""
import numpy
import pytest

import caffecli
from caffecli import context, engines
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text


def layer_param(text):
    return parse_text(text, caffe_pb2.LayerParameter())


@pytest.mark.parametrize("text,expected", [
    ('type: "Convolution" convolution_param { engine: CUDNN }', "CUDNN"),
    ('type: "Pooling"', "DEFAULT"),
    ('type: "ReLU" relu_param { engine: CAFFE }', "CAFFE"),
    ('type: "InnerProduct"', None),
])
def test_the_engine_a_layer_asks_for(text, expected):
    assert engines.requested(layer_param(text)) == expected


@pytest.mark.parametrize("text,tops,limited", [
    ('type: "Convolution" convolution_param { dilation: 2 }', 1, "dilated convolution"),
    ('type: "Deconvolution" convolution_param { dilation: 1 }', 1, None),
    ('type: "Pooling" pooling_param { pool: AVE }', 2, "multiple tops"),
    ('type: "Pooling" pooling_param { pool: MAX }', 1, "max pooling"),
    ('type: "Pooling" pooling_param { pool: AVE }', 1, None),
    ('type: "LRN" lrn_param { local_size: 17 }', 1, "limit of 16"),
    ('type: "LRN" lrn_param { local_size: 17 norm_region: WITHIN_CHANNEL }', 1, None),
])
def test_caffes_rules_for_what_cudnn_cannot_run(text, tops, limited):
    reason = engines.cudnn_limit(layer_param(text), tops)
    assert (reason is None) if limited is None else (limited in reason)


def test_without_cudnn_a_layer_that_asked_for_it_says_so_once(standin, logs, monkeypatch):
    monkeypatch.setenv("CAFFECLI_CUDNN", "1")
    asked = layer_param('name: "c1" type: "ReLU" relu_param { engine: CUDNN }')
    assert engines.choose(asked, 1) == (engines.CAFFE, "the stand-in device has no cuDNN")
    assert engines.choose(layer_param('name: "c2" type: "ReLU"'), 1)[0] == engines.CAFFE
    lines = logs.getvalue().splitlines()
    assert len(lines) == 1 and "Layer c1: the stand-in device has no cuDNN; using engine " \
        "CAFFE" in lines[0] and "engines.py" in lines[0]


class FakeCudnnReLU:
    """A CUDNN engine for ReLU in the array module: counts its calls and its plans."""
    calls = []

    def __init__(self, layer):
        self.layer = layer
        self.plans = engines.PlanCache(lambda shape: self.calls.append(("plan", shape)) or shape)

    def reshape(self, bottom, top):
        self.plans.get(tuple(bottom[0].shape))

    def forward(self, bottom, top):
        self.calls.append(("forward", self.layer.name))
        top[0].data[...] = bottom[0].data * (bottom[0].data > 0)

    def backward(self, top, propagate_down, bottom):
        self.calls.append(("backward", self.layer.name))
        bottom[0].diff[...] = top[0].diff * (bottom[0].data > 0)


NET = '''input: "x" input_shape { dim: 2 dim: 3 dim: 4 dim: 4 } force_backward: true
layer { name: "r1" type: "ReLU" bottom: "x" top: "a" }
layer { name: "r2" type: "ReLU" bottom: "a" top: "b" relu_param { engine: CAFFE } }
layer { name: "p" type: "Pooling" bottom: "b" top: "y" top: "mask"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }'''


def run(net, x):
    net.blobs["x"].data[...] = x
    net.engine.forward_pass()
    net.blobs["y"].diff[...] = 1
    net.engine.backward_pass()
    return net.blobs["y"].data.copy(), net.blobs["x"].diff.copy()


def test_a_cudnn_engine_runs_where_it_may_and_builds_one_plan_per_shape(
        standin, monkeypatch, logs):
    monkeypatch.setattr(engines, "cudnn_missing", lambda: None)
    monkeypatch.setitem(engines._CUDNN, "ReLU", FakeCudnnReLU)
    monkeypatch.setitem(engines._CUDNN, "Pooling", FakeCudnnReLU)
    monkeypatch.setattr(FakeCudnnReLU, "calls", [])
    x = numpy.random.RandomState(2).randn(2, 3, 4, 4).astype(numpy.float32)
    param = parse_text(NET, caffe_pb2.NetParameter())
    expected = run(caffecli.Net(param, caffecli.TRAIN, log=False), x)     # CPU: no engine
    assert FakeCudnnReLU.calls == []
    net = caffecli.Net(param, caffecli.TRAIN, log=False)
    context.set_mode_gpu()
    for _ in range(2):
        got = run(net, x)
    context.set_mode_cpu()
    for a, b in zip(got, expected):
        numpy.testing.assert_array_equal(a, b)
    # only r1 (DEFAULT) runs on the CUDNN engine: r2 asked for CAFFE, and the pooling layer
    # has two tops, which Caffe's factory logs
    assert FakeCudnnReLU.calls == [("plan", (2, 3, 4, 4)), ("forward", "r1"), ("backward", "r1"),
                                   ("forward", "r1"), ("backward", "r1")]
    assert [layer.engine_name() for layer in net.layers] == ["CAFFE", "CUDNN", "CAFFE", "CAFFE"]
    assert "cuDNN does not support multiple tops. Using Caffe's own pooling layer." \
        in logs.getvalue()


def test_the_plan_cache_keeps_the_most_recently_used_plans():
    built = []
    cache = engines.PlanCache(lambda key: built.append(key) or key * 10, limit=2)
    assert [cache.get(k) for k in (1, 2, 1, 3, 1, 2)] == [10, 20, 10, 30, 10, 20]
    # 1 2 built; 1 reused; 3 built, dropping 2 (1 was used later); 1 reused; 2 built again
    assert built == [1, 2, 3, 2]
