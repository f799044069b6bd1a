"""BatchNorm and MVN: gradient checks, Caffe's running statistics, eps placement, errors."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.errors import CaffeError
from caffecli import Net
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from gradcheck import blobs_from, check_gradient, make_layer

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode


def data(shape, seed=0, low=-1.0, high=1.0):
    return numpy.random.RandomState(seed).uniform(low, high, size=shape)


def run(text, arrays, phase=caffe_pb2.TRAIN, dtype=numpy.float64, top_diff=None,
        in_place=False, blobs=None):
    layer = make_layer(text, phase)
    if blobs is not None:
        layer.blobs = blobs_from(blobs, dtype)
    bottom = blobs_from(arrays, dtype)
    top = [bottom[0]] if in_place else [Blob(dtype=dtype)]
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    if top_diff is not None:
        top[0].diff[...] = numpy.asarray(top_diff, dtype=dtype).reshape(top[0].shape)
        layer.Backward(top, [True], bottom)
    return layer, bottom, top


def test_mvn_in_place_backward_follows_caffes_axpby():
    """In place the top diff is the bottom diff that Caffe's backward overwrites step by step;
    its last step, axpby, scales that buffer and then adds it to itself (x = [0, 2], dy =
    [1, 3]: [-2, 2] -> [2, -2]; out of place the gradient is [0, 0])."""
    _, bottom, _ = run('type: "MVN"', [numpy.array([[[[0.0, 2.0]]]])], top_diff=[1.0, 3.0],
                       in_place=True)
    numpy.testing.assert_allclose(bottom[0].diff.reshape(-1), [2, -2], rtol=1e-8)
    _, bottom, _ = run('type: "MVN"', [numpy.array([[[[0.0, 2.0]]]])], top_diff=[1.0, 3.0])
    numpy.testing.assert_allclose(bottom[0].diff.reshape(-1), [0, 0], atol=1e-6)


# ---- BatchNorm -------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(4, 3, 2, 3), (5, 2), (3, 2, 4)])
def test_batchnorm_gradient_batch_stats(shape):
    assert check_gradient('type: "BatchNorm"', [data(shape)], check_params=False) \
        == numpy.prod(shape)


def test_batchnorm_gradient_global_stats():
    layer = make_layer('type: "BatchNorm" batch_norm_param { use_global_stats: true }')
    layer.blobs = blobs_from([[0.3, -1.0, 2.0], [1.5, 0.5, 4.0], [2.0]], numpy.float64)
    assert check_gradient(layer, [data((2, 3, 4))], check_params=False) == 24


def test_batchnorm_train_values_and_running_stats():
    x = data((4, 2, 3))
    layer, b, t = run('type: "BatchNorm" batch_norm_param { moving_average_fraction: 0.9 '
                      'eps: 0.001 }', [x],
                      blobs=[[1.0, 2.0], [3.0, 4.0], [0.5]])
    mean = x.mean(axis=(0, 2))
    var = x.var(axis=(0, 2))
    want = (x - mean[None, :, None]) / numpy.sqrt(var[None, :, None] + 0.001)
    numpy.testing.assert_allclose(t[0].data, want, rtol=1e-10)
    numpy.testing.assert_allclose(layer.blobs[2].data, [0.5 * 0.9 + 1])
    numpy.testing.assert_allclose(layer.blobs[0].data, mean + 0.9 * numpy.array([1.0, 2.0]))
    m = 12  # values per channel: unbiased variance goes into the running sum
    numpy.testing.assert_allclose(layer.blobs[1].data,
                                  var * m / (m - 1) + 0.9 * numpy.array([3.0, 4.0]))


def test_batchnorm_test_phase_divides_by_scale_factor():
    x = data((3, 2, 2))
    layer, b, t = run('type: "BatchNorm"', [x], phase=caffe_pb2.TEST,
                      blobs=[[2.0, -4.0], [8.0, 2.0], [4.0]], top_diff=numpy.ones((3, 2, 2)))
    mean, var = numpy.array([0.5, -1.0]), numpy.array([2.0, 0.5])
    std = numpy.sqrt(var + 1e-5)[None, :, None]
    numpy.testing.assert_allclose(t[0].data, (x - mean[None, :, None]) / std, rtol=1e-6)
    numpy.testing.assert_allclose(b[0].diff, numpy.ones((3, 2, 2)) / std, rtol=1e-6)
    numpy.testing.assert_allclose(layer.blobs[2].data, [4.0])  # untouched in TEST


def test_batchnorm_zero_scale_factor_means_zero_stats():
    x = data((2, 2, 3))
    _, _, t = run('type: "BatchNorm" batch_norm_param { use_global_stats: true eps: 0.25 }',
                  [x])
    numpy.testing.assert_allclose(t[0].data, x / 0.5)


def test_batchnorm_forces_lr_mult_zero():
    layer, _, _ = run('type: "BatchNorm"', [data((2, 3))])
    assert [p.lr_mult for p in layer.layer_param.param] == [0.0, 0.0, 0.0]
    layer, _, _ = run('type: "BatchNorm" param { lr_mult: 0 decay_mult: 0 }', [data((2, 3))])
    assert len(layer.layer_param.param) == 3
    with pytest.raises(CaffeError, match="batch normalization statistics"):
        run('type: "BatchNorm" param { lr_mult: 1 }', [data((2, 3))])


def test_batchnorm_net_treats_statistics_as_fixed():
    net_text = """
      layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
      layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" }
    """
    net = Net(parse_text(net_text, caffe_pb2.NetParameter()), caffe_pb2.TRAIN, log=False)
    assert net.params_lr == [0.0, 0.0, 0.0]


def test_batchnorm_in_place_matches_out_of_place():
    x, dy = data((4, 3, 2)), data((4, 3, 2), seed=1)
    _, b1, t1 = run('type: "BatchNorm"', [x], top_diff=dy)
    _, b2, t2 = run('type: "BatchNorm"', [x], top_diff=dy, in_place=True)
    numpy.testing.assert_allclose(t2[0].data, t1[0].data)
    numpy.testing.assert_allclose(b2[0].diff, b1[0].diff, rtol=1e-12, atol=1e-14)


def test_batchnorm_float32_stays_float32():
    layer, b, t = run('type: "BatchNorm"', [data((4, 3))], dtype=numpy.float32,
                      top_diff=data((4, 3), seed=2))
    assert t[0].data.dtype == numpy.float32 and b[0].diff.dtype == numpy.float32
    assert layer.blobs[0].data.dtype == numpy.float32


def test_batchnorm_channel_mismatch_on_reshape():
    layer, b, t = run('name: "bn" type: "BatchNorm"', [data((2, 3))])
    b[0].reshape(2, 4)
    with pytest.raises(CaffeError, match="bn"):
        layer.Forward(b, t)
    with pytest.raises(CaffeError):
        run('type: "BatchNorm"', [data((5,))])


# ---- MVN -------------------------------------------------------------------------------------
@pytest.mark.parametrize("param", [
    "", "mvn_param { across_channels: true }", "mvn_param { normalize_variance: false }",
    "mvn_param { normalize_variance: false across_channels: true }",
])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (3, 2, 6)])
def test_mvn_gradient(param, shape):
    assert check_gradient('type: "MVN" ' + param, [data(shape)]) == numpy.prod(shape)


def test_mvn_eps_added_to_std_and_4d_top():
    x = data((2, 3), seed=4)
    layer, b, t = run('type: "MVN" mvn_param { across_channels: true eps: 0.1 }', [x])
    assert t[0].shape == (2, 3, 1, 1)  # Caffe's legacy 4-D Reshape
    centered = x - x.mean(axis=1, keepdims=True)
    std = numpy.sqrt((centered ** 2).mean(axis=1, keepdims=True))
    numpy.testing.assert_allclose(t[0].data.reshape(2, 3), centered / (std + 0.1))


def test_mvn_per_channel_2d_is_zero():
    _, _, t = run('type: "MVN"', [data((3, 4))])
    numpy.testing.assert_allclose(t[0].data, 0.0)


def test_mvn_backward_uses_caffe_formula_with_eps():
    """Caffe's backward divides by (std + eps) and ignores eps elsewhere."""
    x, dy = data((1, 1, 5), seed=6), data((1, 1, 5), seed=7)
    _, b, t = run('type: "MVN" mvn_param { eps: 0.5 }', [x], top_diff=dy)
    y = t[0].data.reshape(-1)
    d = dy.reshape(-1)
    std = numpy.sqrt(((x - x.mean()) ** 2).mean()) + 0.5
    want = (d - d.mean() - (y * d).mean() * y) / std
    numpy.testing.assert_allclose(b[0].diff.reshape(-1), want)


def test_mvn_in_place_reproduces_caffe_aliasing():
    x, dy = data((1, 2, 4), seed=8), data((1, 2, 4), seed=9)
    _, b, t = run('type: "MVN"', [x], top_diff=dy, in_place=True)
    y = t[0].data.reshape(2, 4)
    d = dy.reshape(2, 4)
    std = numpy.sqrt(x.reshape(2, 4).var(axis=1, keepdims=True)) + 1e-9
    # Caffe's steps when the bottom diff is the top diff
    g = y * d
    g = numpy.broadcast_to(g.sum(axis=1, keepdims=True), g.shape) * y
    g = g + g.sum(axis=1, keepdims=True)
    g = 2 * (g * (-1.0 / 4)) / std   # axpby as Caffe defines it: scale y, then add x (= y)
    numpy.testing.assert_allclose(b[0].diff.reshape(2, 4), g, rtol=1e-9, atol=1e-12)


def test_mvn_more_than_4_axes_fails():
    with pytest.raises(CaffeError):
        run('type: "MVN"', [data((1, 2, 1, 2, 2))])


def test_batchnorm_needs_three_blobs():
    with pytest.raises(CaffeError, match="3 blobs"):
        run('type: "BatchNorm"', [data((2, 3))], blobs=[[0.0, 0, 0], [1.0, 1, 1]])
