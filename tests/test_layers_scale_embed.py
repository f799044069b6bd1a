"""Scale, Bias, Embed and Parameter: gradient checks, broadcasting, Caffe's diff rules, errors."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.errors import CaffeError
from caffecli import Net, TRAIN
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from gradcheck import blobs_from, check_gradient, make_layer

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode

UNIFORM = 'filler { type: "uniform" min: -1 max: 1 }'


def data(shape, seed=0, low=-1.0, high=1.0):
    return numpy.random.RandomState(seed).uniform(low, high, size=shape)


def setup(text, arrays, dtype=numpy.float64, in_place=False):
    layer = make_layer(text)
    bottom = blobs_from(arrays, dtype)
    top = [bottom[0]] if in_place else [Blob(dtype=dtype)]
    layer.SetUp(bottom, top)
    return layer, bottom, top


# ---- Scale -----------------------------------------------------------------------------------
@pytest.mark.parametrize("param,shape", [
    ("", (2, 3, 4)),
    ("axis: 0 num_axes: 2", (2, 3, 4)),
    ("axis: 1 num_axes: -1", (2, 3, 4)),
    ("num_axes: 0", (2, 3, 4)),
    ("axis: -1", (2, 3, 4)),
    ("axis: 0 num_axes: -1", (2, 3)),  # element-wise
    ("bias_term: true bias_filler { type: 'uniform' min: -1 max: 1 }", (2, 3, 4)),
    ("axis: 2 num_axes: 0 bias_term: true", (2, 3, 4)),
])
def test_scale_gradient_learned(param, shape):
    text = 'type: "Scale" scale_param { %s %s }' % (UNIFORM, param)
    n = check_gradient(text, [data(shape)])
    assert n > numpy.prod(shape)


@pytest.mark.parametrize("xshape,sshape,axis", [
    ((2, 3, 4), (3,), 1), ((2, 3, 4), (2, 3), 0), ((2, 3, 4), (4,), -1),
    ((2, 3, 4), (), 1), ((2, 3, 4), (3, 4), 1), ((2, 3), (2, 3), 0),
])
def test_scale_gradient_two_bottoms(xshape, sshape, axis):
    text = 'type: "Scale" scale_param { axis: %d }' % axis
    assert check_gradient(text, [data(xshape), data(sshape, 1)]) == \
        numpy.prod(xshape) + numpy.prod(sshape)


def test_scale_two_bottoms_with_bias():
    text = 'type: "Scale" scale_param { axis: 1 bias_term: true %s }' % \
        UNIFORM.replace("filler", "bias_filler")
    layer, _, _ = setup(text, [data((2, 3, 4)), data((3,), 1)])
    assert len(layer.blobs) == 1 and layer.blobs[0].shape == (3,)
    assert check_gradient(text, [data((2, 3, 4)), data((3,), 1)]) == 24 + 3 + 3


def test_scale_values_default_filler_and_bias():
    layer, b, t = setup('type: "Scale" scale_param { bias_term: true }', [data((2, 3, 2))])
    numpy.testing.assert_allclose(layer.blobs[0].data, 1.0)  # identity by default
    numpy.testing.assert_allclose(layer.blobs[1].data, 0.0)
    layer.blobs[0].data[...] = [1.0, 2.0, 3.0]
    layer.blobs[1].data[...] = [0.5, 0.0, -1.0]
    layer.Forward(b, t)
    want = b[0].data * numpy.array([1, 2, 3.0])[None, :, None] + \
        numpy.array([0.5, 0, -1.0])[None, :, None]
    numpy.testing.assert_allclose(t[0].data, want)


def test_scale_in_place_matches_out_of_place():
    text = 'type: "Scale" scale_param { %s bias_term: true }' % UNIFORM
    x, dy = data((2, 3, 4)), data((2, 3, 4), 5)
    results = []
    for in_place in (False, True):
        layer, b, t = setup(text, [x], in_place=in_place)
        layer.blobs[0].data[...] = [0.5, -2.0, 1.5]
        layer.blobs[1].data[...] = [0.1, 0.2, 0.3]
        layer.Forward(b, t)
        y = t[0].data.copy()
        t[0].diff[...] = dy
        layer.Backward(t, [True], b)
        results.append((y, b[0].diff.copy(), layer.blobs[0].diff.copy(),
                        layer.blobs[1].diff.copy()))
    for a, c in zip(*results):
        numpy.testing.assert_allclose(a, c, rtol=1e-12)


def _scale_diff_after_two_backwards(text, shape):
    layer, b, t = setup(text, [data(shape)])
    layer.Forward(b, t)
    t[0].diff[...] = 1.0
    layer.Backward(t, [True], b)
    once = layer.blobs[0].diff.copy()
    layer.Backward(t, [True], b)
    return once, layer.blobs[0].diff.copy()


def test_scale_param_diff_accumulates_like_caffe():
    once, twice = _scale_diff_after_two_backwards('type: "Scale"', (2, 3, 4))  # outer 2
    numpy.testing.assert_allclose(twice, 2 * once)
    once, twice = _scale_diff_after_two_backwards(
        'type: "Scale" scale_param { axis: 0 num_axes: 0 }', (2, 3))  # scalar
    numpy.testing.assert_allclose(twice, 2 * once)
    # Caffe writes (not adds) the diff of a learned scale whose outer dimension is 1
    once, twice = _scale_diff_after_two_backwards(
        'type: "Scale" scale_param { axis: 0 }', (3, 4))
    numpy.testing.assert_allclose(twice, once)


def test_scale_errors():
    with pytest.raises(CaffeError, match="mismatch"):
        setup('name: "s" type: "Scale"', [data((2, 3, 4)), data((4,))])
    with pytest.raises(CaffeError, match="num_axes"):
        setup('type: "Scale" scale_param { num_axes: -2 }', [data((2, 3))])
    with pytest.raises(CaffeError, match="extends past"):
        setup('type: "Scale" scale_param { axis: 1 num_axes: 3 }', [data((2, 3))])
    with pytest.raises(CaffeError, match="axis"):
        setup('type: "Scale" scale_param { axis: 3 }', [data((2, 3))])
    with pytest.raises(CaffeError):
        setup('type: "Scale"', [data((2, 3)), data((3,)), data((3,))])


# ---- Bias ------------------------------------------------------------------------------------
@pytest.mark.parametrize("param,shape", [
    ("", (2, 3, 4)), ("axis: 0 num_axes: 2", (2, 3, 4)), ("num_axes: 0", (2, 3)),
    ("axis: -1 num_axes: -1", (2, 3, 4)),
])
def test_bias_gradient_learned(param, shape):
    text = 'type: "Bias" bias_param { %s %s }' % (UNIFORM, param)
    assert check_gradient(text, [data(shape)]) > numpy.prod(shape)


@pytest.mark.parametrize("xshape,bshape,axis", [
    ((2, 3, 4), (3,), 1), ((2, 3, 4), (4,), 2), ((2, 3, 4), (), 1), ((2, 3, 4), (2, 3), 0),
])
def test_bias_gradient_two_bottoms(xshape, bshape, axis):
    text = 'type: "Bias" bias_param { axis: %d }' % axis
    assert check_gradient(text, [data(xshape), data(bshape, 1)]) == \
        numpy.prod(xshape) + numpy.prod(bshape)


def test_bias_values_in_place_and_diff_rules():
    layer, b, t = setup('type: "Bias" bias_param { axis: 1 }',
                        [numpy.zeros((2, 3)), numpy.array([1.0, 2.0, 3.0])], in_place=True)
    layer.Forward(b, t)
    numpy.testing.assert_allclose(t[0].data, [[1, 2, 3], [1, 2, 3.0]])
    t[0].diff[...] = [[1, 2, 3], [4, 5, 6.0]]
    b[1].diff[...] = 100.0
    layer.Backward(t, [True, True], b)
    numpy.testing.assert_allclose(b[1].diff, [5, 7, 9.0])  # a bottom diff is set
    numpy.testing.assert_allclose(b[0].diff, [[1, 2, 3], [4, 5, 6.0]])


def test_bias_errors():
    with pytest.raises(CaffeError, match="mismatch"):
        setup('type: "Bias"', [data((2, 3, 4)), data((2,))])
    with pytest.raises(CaffeError, match="extends past"):
        setup('type: "Bias" bias_param { num_axes: 5 }', [data((2, 3))])


# ---- Embed -----------------------------------------------------------------------------------
EMBED = ('type: "Embed" embed_param { input_dim: 5 num_output: 3 '
         'weight_filler { type: "uniform" min: -1 max: 1 } '
         'bias_filler { type: "uniform" min: -1 max: 1 } %s }')


@pytest.mark.parametrize("extra", ["", "bias_term: false"])
def test_embed_gradient(extra):
    idx = numpy.array([[0, 4, 2], [2, 2, 1]], dtype=float)  # repeats accumulate
    assert check_gradient(EMBED % extra, [idx], check_bottoms=[]) == 15 + (0 if extra else 3)


def test_embed_values_and_shapes():
    layer, b, t = setup(EMBED % "", [numpy.array([[3.0, 0.0]])])
    layer.Forward(b, t)
    assert t[0].shape == (1, 2, 3)
    w, bias = layer.blobs[0].data, layer.blobs[1].data
    numpy.testing.assert_allclose(t[0].data[0], [w[3] + bias, w[0] + bias])
    t[0].diff[...] = 1.0
    layer.Backward(t, [False], b)
    numpy.testing.assert_allclose(layer.blobs[0].diff.sum(axis=1), [3, 0, 0, 3, 0])
    numpy.testing.assert_allclose(layer.blobs[1].diff, [2, 2, 2])


def test_embed_truncates_fractional_index_like_caffe():
    layer, b, t = setup(EMBED % "bias_term: false", [numpy.array([1.7, 0.2])])
    layer.Forward(b, t)
    numpy.testing.assert_allclose(t[0].data, layer.blobs[0].data[[1, 0]])


def test_embed_refuses_index_gradient():
    layer, b, t = setup(EMBED % "", [numpy.array([1.0])])
    layer.Forward(b, t)
    with pytest.raises(CaffeError, match="backpropagate"):
        layer.Backward(t, [True], b)


def test_embed_under_force_backward_refuses_as_caffe_does():
    """Embed keeps Caffe's default AllowForceBackward, so force_backward asks it for the index
    gradient and its backward refuses (Filter and BatchReindex likewise)."""
    text = ('force_backward: true\nlayer { name: "in" type: "Input" top: "i" input_param '
            '{ shape { dim: 2 } } }\nlayer { name: "e" %s bottom: "i" top: "y" }' % (EMBED % ""))
    net = Net(parse_text(text, caffe_pb2.NetParameter()), TRAIN, log=False)
    net.forward_pass()
    with pytest.raises(CaffeError, match="Layer e .*backpropagate to EmbedLayer input"):
        net.backward_pass()


@pytest.mark.parametrize("text,x,match", [
    (EMBED % "", [5.0], "out of range"),
    (EMBED % "", [-1.0], "out of range"),
    ('type: "Embed" embed_param { input_dim: 5 }', [0.0], "num_output"),
    ('type: "Embed" embed_param { num_output: 5 }', [0.0], "input_dim"),
])
def test_embed_errors(text, x, match):
    with pytest.raises(CaffeError, match=match):
        layer, b, t = setup(text, [numpy.array(x)])
        layer.Forward(b, t)


# ---- Parameter -------------------------------------------------------------------------------
def test_parameter_top_shares_blob():
    layer = make_layer('type: "Parameter" parameter_param { shape { dim: 2 dim: 3 } }')
    top = [Blob()]
    layer.SetUp([], top)
    assert layer.blobs[0].shape == (2, 3) and top[0].shape == (2, 3)
    layer.blobs[0].data[...] = numpy.arange(6).reshape(2, 3)
    layer.Forward([], top)
    numpy.testing.assert_allclose(top[0].data, numpy.arange(6).reshape(2, 3))
    top[0].diff[...] = 7.0  # what the next layer writes lands in the parameter's diff
    numpy.testing.assert_allclose(layer.blobs[0].diff, 7.0)


def test_parameter_in_a_net_gets_gradient():
    text = """
      force_backward: true
      layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 2 } } }
      layer { name: "p" type: "Parameter" top: "w" parameter_param { shape { dim: 2 } } }
      layer { name: "s" type: "Scale" bottom: "x" bottom: "w" top: "y"
              scale_param { axis: 0 } }
    """
    net = Net(parse_text(text, caffe_pb2.NetParameter()), caffe_pb2.TRAIN, log=False)
    net.layer_by_name("p").blobs[0].data[...] = [2.0, 3.0]
    net.blob_by_name("x").data[...] = [5.0, 7.0]
    net.forward_pass()
    numpy.testing.assert_allclose(net.blob_by_name("y").data, [10.0, 21.0])
    net.blob_by_name("y").diff[...] = [1.0, 1.0]
    net.clear_param_diffs()
    net.backward_pass()
    numpy.testing.assert_allclose(net.layer_by_name("p").blobs[0].diff, [5.0, 7.0])


def test_parameter_bad_bottom_count():
    layer = make_layer('type: "Parameter" parameter_param { shape { dim: 2 } }')
    with pytest.raises(CaffeError):
        layer.SetUp(blobs_from([numpy.zeros(2)], numpy.float32), [Blob()])
