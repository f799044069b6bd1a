"""The CUDNN engines (kernels/cudnn_engines.py): with ``CAFFECLI_CUDNN=1`` Convolution and
Deconvolution run through cuDNN's conv fprop/dgrad/wgrad graphs, and ReLU/Sigmoid/TanH through
pointwise graphs where a prototxt names ``engine: CUDNN``, computing what the CAFFE engine
computes; plans are built once per shape; where cuDNN declines, the layer falls back to CAFFE
with one INFO line.

On a GPU with nvidia-cudnn-frontend installed (.ci/gpu) they run against cuDNN itself; elsewhere
against tests/cudnn_standin.py on the stand-in device, where they also check what the engines
asked the frontend for.
"""
import importlib
import importlib.util
import os
import sys

import numpy
import pytest
from click.testing import CliRunner

import caffecli
import cudnn_standin
from caffecli import context, engines
from caffecli.cli.main import cli
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from conftest import enter_gpu_mode, real_gpu_reason
from golden import case_names, golden_dir, require_golden, run_layer_case

REAL = real_gpu_reason() is None and importlib.util.find_spec("cudnn") is not None
stand_in_only = pytest.mark.skipif(REAL, reason="checks what the engines ask the stand-in "
                                                "frontend for")


@pytest.fixture
def frontend(monkeypatch):
    """The cuDNN frontend the engines use (the real one on a GPU, else the stand-in), engines
    on; the test starts in CPU mode."""
    monkeypatch.setenv("CAFFECLI_CUDNN", "1")
    monkeypatch.setattr(engines, "_CUDNN", dict(engines._CUDNN))
    monkeypatch.delitem(sys.modules, "caffecli.kernels.cudnn_engines", raising=False)
    if REAL:
        enter_gpu_mode(monkeypatch)
        module = importlib.import_module("cudnn")
    else:
        monkeypatch.setitem(sys.modules, "cudnn", cudnn_standin)
        enter_gpu_mode(monkeypatch)

        missing = engines.cudnn_missing

        def present():   # what cudnn_missing() says where the frontend loads
            if not engines.enabled():
                return missing()
            importlib.import_module("caffecli.kernels.cudnn_engines")
        monkeypatch.setattr(engines, "cudnn_missing", present)
        cudnn_standin.reset()
        module = cudnn_standin
    context.set_mode_cpu()
    yield module
    context.set_mode_cpu()


def conv(name, bottom, top, params, kind="Convolution", engine=""):
    return ('layer { name: "%s" type: "%s" bottom: "%s" top: "%s" convolution_param { %s %s '
            'weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" } } }\n'
            % (name, kind, bottom, top, params, engine))


def run(text, shape, dtype=numpy.float32, passes=1, seed=3):
    """Every blob's data, every parameter's diff and the input's diff after ``passes``
    forward-backward passes in GPU mode, and the net."""
    rs = numpy.random.RandomState(seed)
    context.set_random_seed(5)
    net = caffecli.Net(parse_text('input: "x" input_shape { %s } force_backward: true\n'
                                  % " ".join("dim: %d" % d for d in shape) + text,
                                  caffe_pb2.NetParameter()), caffe_pb2.TRAIN, dtype=dtype,
                       log=False)
    context.set_mode_gpu()
    out = []
    for _ in range(passes):
        net.blob_by_name("x").data[...] = rs.randn(*shape)
        for p in net.engine.learnable_params:
            p.diff[...] = 0.5      # gradients accumulate, as Caffe's do
        net.forward_pass()
        for name in net.blob_names:
            if name != "x":
                net.blob_by_name(name).diff[...] = rs.randn(*net.blob_by_name(name).shape)
        net.backward_pass()
        out += [net.blob_by_name(n).data.copy() for n in net.blob_names]
        out += [p.diff.copy() for p in net.engine.learnable_params]
        out.append(net.blob_by_name("x").diff.copy())
    context.set_mode_cpu()
    return out, net


def assert_close(got, want, dtype=numpy.float32, tol=None):
    tol = tol or (2e-5 if dtype == numpy.float32 else 1e-11)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        numpy.testing.assert_allclose(a, b, rtol=tol, atol=tol * max(1.0, numpy.abs(b).max()))


def twin(text, shape, dtype=numpy.float32, passes=1):
    """(results with the engines as the prototxt says, with every layer on CAFFE, the net)."""
    got, net = run(text, shape, dtype, passes)
    want, _ = run(text.replace("engine: CUDNN", "").replace(
        "convolution_param {", "convolution_param { engine: CAFFE"), shape, dtype, passes)
    return got, want, net


GEOMETRIES = {
    "3x3 pad 1": "num_output: 6 kernel_size: 3 pad: 1",
    "conv1 11x11 stride 4": "num_output: 4 kernel_size: 11 stride: 4",
    "5x5 stride 2 pad 2, 2 groups": "num_output: 6 kernel_size: 5 stride: 2 pad: 2 group: 2",
    "1x1, no bias": "num_output: 5 kernel_size: 1 bias_term: false",
    "3x2 kernel, stride 2x1": "num_output: 3 kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 1 "
                              "pad_h: 1",
}


@pytest.mark.parametrize("kind", ["Convolution", "Deconvolution"])
@pytest.mark.parametrize("geometry", sorted(GEOMETRIES))
def test_cudnn_convolution_computes_what_the_caffe_engine_computes(frontend, kind, geometry):
    text = conv("c", "x", "y", GEOMETRIES[geometry], kind) + \
        'layer { name: "r" type: "ReLU" bottom: "y" top: "y" }\n'
    got, want, net = twin(text, (2, 4, 23, 23), passes=2)
    assert_close(got, want)
    assert [layer.engine_name() for layer in net.layers] == ["CAFFE", "CUDNN", "CAFFE"]


def test_float64_two_bottoms_and_shared_weights(frontend):
    text = ('layer { name: "s" type: "Scale" bottom: "x" top: "x2" '
            'scale_param { filler { value: 0.5 } } }\n'
            + conv("c", 'x" bottom: "x2', 'y" top: "y2', "num_output: 3 kernel_size: 3 pad: 1"))
    for name, bottom, top in (("c2", "y", "z"), ("c3", "y2", "z2")):
        text += conv(name, bottom, top, "num_output: 2 kernel_size: 3").replace(
            'convolution_param', 'param { name: "w" } param { name: "b" } convolution_param')
    got, want, net = twin(text, (2, 3, 9, 9), numpy.float64, passes=2)
    assert_close(got, want, numpy.float64)
    assert [layer.engine_name() for layer in net.layers
            if layer.type == "Convolution"] == ["CUDNN"] * 3


@stand_in_only
def test_plans_are_built_once_per_shape_and_fp32_plans_leave_tf32_out(frontend):
    text = conv("c", "x", "y", "num_output: 4 kernel_size: 3")
    _, net = run(text, (2, 3, 8, 8), passes=3)
    builds = [d for what, d in frontend.log if what == "build"]
    assert [b[0] for b in builds] == [["conv_fprop"], ["conv_wgrad"], ["conv_dgrad"]]
    assert builds[0][2] == {"image": [2, 3, 8, 8], "filter": [4, 3, 3, 3],
                            "conv_fprop.out": [2, 4, 6, 6]}
    for b in builds:
        assert {n.name for n in b[1]} == {"TENSOR_CORE", "DOWN_CONVERT_INPUTS",
                                          "REDUCED_PRECISION_REDUCTION"}
    assert sum(what == "execute" for what, _ in frontend.log) == 9
    # a new batch size is a new shape: new plans; float64 plans keep every note
    frontend.reset()
    run(text, (3, 3, 8, 8), numpy.float64)
    builds = [d for what, d in frontend.log if what == "build"]
    assert len(builds) == 3 and all(b[1] == [] for b in builds)
    assert builds[0][2]["image"] == [3, 3, 8, 8]


def image_and_filter(dims):
    """The image and filter dims of a convolution graph the stand-in frontend saw."""
    return (dims.get("image") or dims["conv_dgrad.out"],
            dims.get("filter") or dims["conv_wgrad.out"])


@stand_in_only
def test_a_declined_grouped_graph_runs_one_group_at_a_time(frontend):
    def no_groups(op, dims):
        image, filt = image_and_filter(dims)
        return "grouped convolution declined" if image[1] != filt[1] else None
    frontend.decline[0] = no_groups
    text = conv("c", "x", "y", "num_output: 6 kernel_size: 3 pad: 1 group: 2")
    got, want, net = twin(text, (2, 4, 7, 7))
    assert_close(got, want)
    assert net.layers[1].engine_name() == "CUDNN"
    builds = [d[2] for what, d in frontend.log if what == "build"]
    assert len(builds) == 3
    assert [image_and_filter(d) for d in builds] == [([2, 2, 7, 7], [3, 2, 3, 3])] * 3
    assert sum(what == "execute" for what, _ in frontend.log) == 6   # 3 ops x 2 groups


def test_what_cudnn_cannot_run_falls_back_to_caffe_saying_so(frontend, logs):
    # 3 spatial axes: Caffe's cuDNN convolution takes 2; the engine declines at reshape
    text = conv("c3", "x", "y", "num_output: 2 kernel_size: 3")
    got, want, net = twin(text, (2, 2, 5, 6, 6))
    assert_close(got, want)
    assert net.layers[1].engine_name() == "CAFFE"
    assert logs.getvalue().count("Layer c3: cuDNN cannot run it (Caffe's cuDNN convolution "
                                 "takes 2 spatial axes, not 3); using engine CAFFE") == 1
    # dilation, by Caffe's rule: DEFAULT quietly runs CAFFE, CUDNN by name says why not
    text = conv("d", "x", "y", "num_output: 2 kernel_size: 3 dilation: 2")
    _, net = run(text, (1, 2, 9, 9))
    assert net.layers[1].engine_name() == "CAFFE"
    assert "Layer d:" not in logs.getvalue()
    run(text.replace("dilation: 2", "dilation: 2 engine: CUDNN"), (1, 2, 9, 9))
    assert "Layer d: cuDNN doesn't support the dilated convolution" in logs.getvalue()


@stand_in_only
def test_a_declined_backward_runs_on_caffe_after_a_cudnn_forward(frontend, logs):
    frontend.decline[0] = lambda op, dims: "no wgrad here" if op == "conv_wgrad" else None
    text = conv("c", "x", "y", "num_output: 4 kernel_size: 3 pad: 1")
    got, want, net = twin(text, (2, 3, 6, 6), passes=2)
    assert_close(got, want)
    assert net.layers[1].engine_name() == "CUDNN"
    assert logs.getvalue().count("Layer c: cuDNN cannot run it (cudnnGraphNotSupportedError: "
                                 "no wgrad here)") == 1
    assert [d for what, d in frontend.log if what == "execute"].count(["conv_fprop"]) == 2


POINTWISE = [('ReLU', 'relu_param { engine: CUDNN }'),
             ('ReLU', 'relu_param { engine: CUDNN negative_slope: 0.2 }'),
             ('Sigmoid', 'sigmoid_param { engine: CUDNN }'),
             ('TanH', 'tanh_param { engine: CUDNN }')]


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("kind,param", POINTWISE)
def test_pointwise_engines_by_name(frontend, kind, param, in_place):
    top = "x1" if in_place else "y"
    text = ('layer { name: "s" type: "Scale" bottom: "x" top: "x1" scale_param { '
            'filler { value: 1.5 } } }\n'
            'layer { name: "p" type: "%s" bottom: "x1" top: "%s" %s }\n' % (kind, top, param))
    got, net = run(text, (2, 3, 4, 5), passes=2)
    want, caffe = run(text.replace("engine: CUDNN", "engine: CAFFE"), (2, 3, 4, 5), passes=2)
    # cuDNN's tanh is good to about 1e-4 relative on an H200 (Caffe's cuDNN TanH runs the same)
    assert_close(got, want, tol=1e-3 if REAL and kind == "TanH" else None)
    assert net.layers[2].engine_name() == "CUDNN" and caffe.layers[2].engine_name() == "CAFFE"
    # DEFAULT keeps caffecli's own kernels for these
    _, net = run(text.replace("engine: CUDNN", ""), (2, 3, 4, 5))
    assert net.layers[2].engine_name() == "CAFFE"


@stand_in_only
def test_a_pointwise_graph_tries_its_layouts_in_turn(frontend, logs):
    """A flat (1, 1, count) declaration first; where cuDNN declines it, channels-last 4-D;
    where both are declined, CAFFE runs the layer, saying why once."""
    text = 'layer { name: "p" type: "TanH" bottom: "x" top: "y" tanh_param { engine: CUDNN } }\n'
    want, _ = run(text.replace("CUDNN", "CAFFE"), (2, 3, 4, 5))
    for flat, four_d in ((None, None), ("flat", None), ("flat", "4-D")):
        frontend.reset()
        frontend.decline[0] = lambda op, dims: flat if len(next(iter(dims.values()))) == 3 \
            else four_d
        got, net = run(text, (2, 3, 4, 5))
        assert_close(got, want)
        shapes = [d for what, d in frontend.log if what == "execute"]
        if four_d:
            assert net.layers[1].engine_name() == "CAFFE" and not shapes
            assert logs.getvalue().count("Layer p: cuDNN cannot run it "
                                         "(cudnnGraphNotSupportedError: flat)") == 1
        else:
            assert net.layers[1].engine_name() == "CUDNN" and len(shapes) == 2


def test_engines_are_on_by_default_and_off_with_cudnn_0(monkeypatch, frontend):
    monkeypatch.delenv("CAFFECLI_CUDNN", raising=False)
    param = parse_text('name: "c" type: "Convolution"', caffe_pb2.LayerParameter())
    assert engines.choose(param, 1) == (engines.CUDNN, None)
    monkeypatch.setenv("CAFFECLI_CUDNN", "0")
    assert engines.choose(param, 1) == (
        engines.CAFFE, "caffecli's cuDNN engines are turned off (CAFFECLI_CUDNN=0)")


def test_a_frontend_that_fails_to_load_is_a_reason_not_a_crash(monkeypatch):
    monkeypatch.setenv("CAFFECLI_CUDNN", "1")
    monkeypatch.setattr(engines.backend, "is_standin", lambda: False)
    monkeypatch.setattr(engines.importlib.util, "find_spec", lambda name: object())
    monkeypatch.setitem(sys.modules, "cudnn", None)          # import cudnn raises ImportError
    monkeypatch.delitem(sys.modules, "caffecli.kernels.cudnn_engines", raising=False)
    assert engines.cudnn_missing().startswith("the cuDNN frontend failed to load (ModuleNotFound")


@stand_in_only
def test_a_captured_graph_replays_the_cudnn_plans(frontend, monkeypatch):
    """CUDA graphs capture cuDNN's executes (on the stand-in, as recorded device operations)
    and replays give the eager numbers to the bit."""
    from test_cuda_graphs import NET, passes
    runs, steps = [], []
    for on in ("0", "1"):
        monkeypatch.setenv("CAFFECLI_CUDA_GRAPHS", on)
        context.set_mode_gpu()
        context.set_random_seed(11)
        net = caffecli.Net(parse_text(NET % "MAX", caffe_pb2.NetParameter()), caffecli.TRAIN,
                           log=False)
        runs.append(passes(net, 6, (6,)))
        steps.append(net.engine.__dict__.get("_graph_step"))
        context.set_mode_cpu()
    assert net.layers[[layer.name for layer in net.layers].index("conv")].engine_name() == "CUDNN"
    assert steps[1] is not None and steps[1].graph is not None
    for a, b in zip(*runs):
        assert numpy.array_equal(a, b)


def _convolution_cases():
    """The golden layer cases whose nets hold a Convolution or Deconvolution."""
    names = []
    for name in case_names(exclude={"solver", "data", "cli"}):
        path = os.path.join(golden_dir(), name, "net.prototxt")
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
            if 'type: "Convolution"' in text or 'type: "Deconvolution"' in text:
                names.append(name)
    return names


@pytest.mark.parametrize("name", _convolution_cases() or ["<no golden corpus>"])
def test_golden_convolution_cases_on_the_cudnn_engines(frontend, name):
    """Caffe's own numbers, every golden net with a (de)convolution, on the cuDNN engines."""
    if name == "<no golden corpus>":
        require_golden()
    context.set_mode_gpu()
    run_layer_case(name)
    if not REAL:    # all but dilated and 3-D convolutions ran on cuDNN
        with open(os.path.join(golden_dir(), name, "net.prototxt")) as f:
            declined = "dilation" in f.read() or "nd3d" in name
        assert any(what == "execute" for what, _ in frontend.log) != declined, name


def test_caffe_time_on_the_gpu_times_the_cudnn_layers(frontend):
    """``caffecli time -gpu 0`` runs LeNet's convolutions on the cuDNN engine and still times
    every layer forward and backward."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = CliRunner().invoke(cli, ["time", "-model", os.path.join(
        root, "models", "lenet", "lenet.prototxt"), "-gpu", "0", "-iterations", "2"])
    context.set_mode_cpu()
    assert result.exit_code == 0, result.output
    for layer in ("conv1", "conv2"):
        assert "%10s\tforward: " % layer in result.stderr
        assert "%10s\tbackward: " % layer in result.stderr
    if not REAL:
        executed = [d for what, d in frontend.log if what == "execute"]
        assert executed.count(["conv_fprop"]) >= 2 * 3      # 2 layers x (warm-up + 2)
