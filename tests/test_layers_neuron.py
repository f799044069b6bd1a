"""Neuron layers: gradient checks, Caffe's in-place quirks, hand-computed values, errors."""
import numpy
import pytest

from caffecli import context
from caffecli.blob import Blob
from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2
from gradcheck import blobs_from, check_gradient, make_layer

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode


def data(shape, low=-1.0, high=1.0, seed=0):
    return numpy.random.RandomState(seed).uniform(low, high, size=shape)


def away_from(x, points, margin=0.05):
    """Push values within ``margin`` of any of ``points`` out to that distance."""
    x = numpy.array(x, dtype=numpy.float64)
    for p in points:
        near = numpy.abs(x - p) < margin
        x[near] = p + numpy.where(x[near] >= p, margin, -margin)
    return x


def run(text, arrays, phase=caffe_pb2.TRAIN, dtype=numpy.float32, top_diff=None, in_place=False):
    """Set up, forward (and backward when top_diff is given); return (layer, bottoms, tops)."""
    layer = make_layer(text, phase)
    bottom = blobs_from(arrays, dtype)
    top = [bottom[0]] if in_place else [Blob(dtype=dtype)]
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    if top_diff is not None:
        top[0].diff[...] = numpy.asarray(top_diff, dtype=dtype)
        layer.Backward(top, [True] * len(bottom), bottom)
    return layer, bottom, top


# ---- gradient checks -------------------------------------------------------------------------
SMOOTH = [
    ('type: "Sigmoid"', (2, 3, 4)),
    ('type: "TanH"', (2, 3, 4)),
    ('type: "BNLL"', (2, 3, 4)),
    ('type: "Swish"', (2, 3, 4)),
    ('type: "Swish" swish_param { beta: 2.5 }', (3, 5)),
    ('type: "Exp"', (2, 3, 4)),
    ('type: "Exp" exp_param { base: 2 scale: 0.5 shift: 0.1 }', (2, 3, 4)),
    ('type: "Exp" exp_param { scale: -1 shift: 1 }', (4, 5)),
]


@pytest.mark.parametrize("text,shape", SMOOTH)
def test_gradient_smooth(text, shape):
    assert check_gradient(text, [data(shape, -2, 2)]) == numpy.prod(shape)


@pytest.mark.parametrize("text", [
    'type: "ReLU"',
    'type: "ReLU" relu_param { negative_slope: 0.1 }',
    'type: "ELU"',
    'type: "ELU" elu_param { alpha: 0.5 }',
    'type: "AbsVal"',
])
def test_gradient_kink_at_zero(text):
    x = away_from(data((2, 3, 4, 5)), [0.0])
    assert check_gradient(text, [x], kink=0.0, kink_range=0.02) > 0


@pytest.mark.parametrize("text", [
    'type: "PReLU"',
    'type: "PReLU" prelu_param { channel_shared: true }',
    'type: "PReLU" prelu_param { filler { type: "uniform" min: -0.5 max: 0.5 } }',
])
@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (4, 3)])
def test_gradient_prelu(text, shape):
    x = away_from(data(shape), [0.0])
    checked = check_gradient(text, [x], kink=0.0, kink_range=0.02)
    assert checked >= numpy.prod(shape)  # bottoms and the slope parameter


@pytest.mark.parametrize("lo,hi", [(-0.5, 0.5), (-0.2, 0.7), (0.1, 0.1)])
def test_gradient_clip(lo, hi):
    text = 'type: "Clip" clip_param { min: %g max: %g }' % (lo, hi)
    x = away_from(data((3, 4, 5)), [lo, hi])
    assert check_gradient(text, [x]) == 60


@pytest.mark.parametrize("power,scale,shift,low", [
    (2.0, 1.0, 0.0, -1.0), (2.0, 1.5, -0.5, -1.0), (3.0, -1.0, 0.0, -1.0),
    (0.5, 1.0, 0.0, 0.5), (0.37, 2.0, 1.5, 0.0), (1.0, 2.5, 0.3, -1.0),
    (0.0, 1.0, 0.0, -1.0), (2.0, 0.0, 1.5, -1.0), (-1.5, 0.8, 2.0, 0.1),
])
def test_gradient_power(power, scale, shift, low):
    text = 'type: "Power" power_param { power: %r scale: %r shift: %r }' % (power, scale, shift)
    x = data((2, 3, 4), low, low + 2)
    if power == 3.0:
        x = away_from(x, [0.0], 0.1)  # y / x is Caffe's formula here
    assert check_gradient(text, [x]) == 24


@pytest.mark.parametrize("text", [
    'type: "Log"',
    'type: "Log" log_param { base: 2 scale: 2 shift: 1 }',
    'type: "Log" log_param { scale: 0.5 }',
])
def test_gradient_log(text):
    assert check_gradient(text, [data((2, 3, 4), 0.5, 3.0)]) == 24


@pytest.mark.parametrize("text,phase", [  # a TRAIN mask with ratio > 0 is checked by hand
    ('type: "Dropout" dropout_param { dropout_ratio: 0 }', caffe_pb2.TRAIN),
    ('type: "Dropout" dropout_param { dropout_ratio: 0 }', caffe_pb2.TEST),
    ('type: "Dropout"', caffe_pb2.TEST),
])
def test_gradient_dropout_deterministic(text, phase):
    assert check_gradient(text, [data((3, 4))], phase=phase) == 12


@pytest.mark.parametrize("text", ['type: "Sigmoid"', 'type: "TanH"', 'type: "Swish"',
                                  'type: "ELU"', 'type: "BNLL"'])
def test_gradient_float32(text):
    x = away_from(data((2, 3, 4), -2, 2), [0.0], 0.1)
    assert check_gradient(text, [x], dtype=numpy.float32, stepsize=1e-2, threshold=1e-2,
                          kink=0.0, kink_range=0.05) > 0


# ---- hand-computed values --------------------------------------------------------------------
def test_relu_values_and_float32_stays_float32():
    x = numpy.array([[-2.0, -0.5, 0.0, 0.5, 3.0]])
    _, b, t = run('type: "ReLU" relu_param { negative_slope: 0.1 }', [x],
                  top_diff=numpy.ones((1, 5)) * 2)
    numpy.testing.assert_allclose(t[0].data, [[-0.2, -0.05, 0.0, 0.5, 3.0]], rtol=1e-6)
    numpy.testing.assert_allclose(b[0].diff, [[0.2, 0.2, 0.2, 2.0, 2.0]], rtol=1e-6)
    assert t[0].data.dtype == numpy.float32 and b[0].diff.dtype == numpy.float32


def test_prelu_default_slope_and_channel_layout():
    x = numpy.array([[[-4.0], [2.0]], [[-8.0], [-1.0]]])  # N=2, C=2, 1 value each
    layer, b, t = run('type: "PReLU"', [x], top_diff=numpy.ones((2, 2, 1)))
    numpy.testing.assert_allclose(layer.blobs[0].data, [0.25, 0.25])
    numpy.testing.assert_allclose(t[0].data.reshape(-1), [-1.0, 2.0, -2.0, -0.25])
    # slope diff per channel: sum of x where x <= 0
    numpy.testing.assert_allclose(layer.blobs[0].diff, [-12.0, -1.0])
    numpy.testing.assert_allclose(b[0].diff.reshape(-1), [0.25, 1.0, 0.25, 0.25])


def test_prelu_channel_shared_scalar_blob():
    layer, _, t = run('type: "PReLU" prelu_param { channel_shared: true }',
                      [numpy.array([[-1.0, 1.0, -2.0]])])
    assert layer.blobs[0].shape == ()
    numpy.testing.assert_allclose(t[0].data, [[-0.25, 1.0, -0.5]])


def test_prelu_in_place_uses_saved_input():
    x = away_from(data((2, 3, 4)), [0.0])
    dy = data((2, 3, 4), seed=3)
    ref, rb, rt = run('type: "PReLU"', [x], top_diff=dy)
    inp, ib, it = run('type: "PReLU"', [x], top_diff=dy, in_place=True)
    numpy.testing.assert_allclose(it[0].data, rt[0].data)
    numpy.testing.assert_allclose(ib[0].diff, rb[0].diff, rtol=1e-6)
    numpy.testing.assert_allclose(inp.blobs[0].diff, ref.blobs[0].diff, rtol=1e-5)


def _caffe_prelu(x, dy, slope, slope_diff, shared):
    """prelu_layer.cpp's CPU loops value by value in x's dtype: (top, bottom diff, slope diff),
    the slope diff added to one value after another in memory order."""
    t = x.dtype.type
    n, c = x.shape[:2]
    flat_x, flat_dy = x.reshape(n, c, -1), dy.reshape(n, c, -1)
    y, dx, sd = numpy.empty_like(flat_x), numpy.empty_like(flat_x), slope_diff.copy()
    for i in range(n):
        for ch in range(c):
            k = 0 if shared else ch
            for p in range(flat_x.shape[2]):
                v, g = flat_x[i, ch, p], flat_dy[i, ch, p]
                y[i, ch, p] = (t(0) if v < 0 else v) + slope[k] * (t(0) if t(0) < v else v)
                sd[k] = sd[k] + g * v * t(v <= 0)
                dx[i, ch, p] = g * (t(v > 0) + slope[k] * t(v <= 0))
    return y.reshape(x.shape), dx.reshape(x.shape), sd


@pytest.mark.parametrize("shared", [False, True])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_prelu_is_caffes_cpu_loops_bit_for_bit(shared, in_place, dtype, device_mode):
    """The host's compiled forward and backward (kernels/relu_jit.py) against prelu_layer.cpp's
    loops: the same tops, bottom diffs and slope diffs (summed in Caffe's order onto the diff
    already there), per channel and shared, in place or not. The device sums in another order
    (as Caffe's GPU code does): there within rounding."""
    text = 'type: "PReLU" prelu_param { channel_shared: %s filler { type: "uniform" min: -0.5 ' \
           'max: 0.5 } }' % ("true" if shared else "false")
    x = data((3, 4, 5, 6), -2, 2, seed=8).astype(dtype)
    x.flat[::17] = 0
    dy = data((3, 4, 5, 6), seed=9).astype(dtype)
    layer = make_layer(text, caffe_pb2.TRAIN)
    bottom = blobs_from([x], dtype)
    top = [bottom[0]] if in_place else [Blob(dtype=dtype)]
    layer.SetUp(bottom, top)
    slope = layer.blobs[0].data.reshape(-1).copy()
    layer.blobs[0].diff[...] = 0.125
    start = layer.blobs[0].diff.reshape(-1).copy()
    layer.Forward(bottom, top)
    y = top[0].data.copy()
    top[0].diff[...] = dy
    layer.Backward(top, [True], bottom)
    want = _caffe_prelu(x, dy, slope, start, shared)
    got = [numpy.asarray(a) for a in (y, bottom[0].diff, layer.blobs[0].diff.reshape(-1))]
    for g, w in zip(got, want):
        if device_mode == "cpu":
            assert g.tobytes() == w.tobytes()
        else:
            tol = 1e-5 if dtype == numpy.float32 else 1e-12
            numpy.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_elu_values():
    _, b, t = run('type: "ELU" elu_param { alpha: 2 }', [numpy.array([[-1.0, 0.0, 1.5]])],
                  top_diff=[[1.0, 1.0, 1.0]])
    numpy.testing.assert_allclose(t[0].data, [[2 * (numpy.exp(-1) - 1), 0.0, 1.5]], rtol=1e-6)
    # x <= 0: alpha + y; x = 0 takes the negative branch as Caffe (alpha + 0)
    numpy.testing.assert_allclose(b[0].diff, [[2 * numpy.exp(-1), 2.0, 1.0]], rtol=1e-6)


def test_sigmoid_tanh_bnll_values():
    x = numpy.array([[-100.0, -1.0, 0.0, 1.0, 100.0]])
    _, _, t = run('type: "Sigmoid"', [x])
    numpy.testing.assert_allclose(t[0].data, 1 / (1 + numpy.exp(-x)), rtol=1e-6, atol=1e-7)
    _, _, t = run('type: "TanH"', [x])
    numpy.testing.assert_allclose(t[0].data, numpy.tanh(x), rtol=1e-6)
    _, b, t = run('type: "BNLL"', [x], top_diff=numpy.ones((1, 5)))
    numpy.testing.assert_allclose(t[0].data, [[0.0, numpy.log1p(numpy.exp(-1)), numpy.log(2),
                                                1 + numpy.log1p(numpy.exp(-1)), 100.0]],
                                  rtol=1e-6, atol=1e-30)
    assert numpy.isfinite(b[0].diff).all()
    numpy.testing.assert_allclose(b[0].diff[0, 2], 0.5)


def test_absval_sign_of_zero_is_zero():
    _, b, t = run('type: "AbsVal"', [numpy.array([[-2.0, 0.0, 3.0]])], top_diff=[[5.0, 5.0, 5.0]])
    numpy.testing.assert_allclose(t[0].data, [[2.0, 0.0, 3.0]])
    numpy.testing.assert_allclose(b[0].diff, [[-5.0, 0.0, 5.0]])


def test_clip_gradient_at_bounds_inclusive():
    x = numpy.array([[-1.0, -0.5, 0.0, 0.5, 1.0]])
    _, b, t = run('type: "Clip" clip_param { min: -0.5 max: 0.5 }', [x],
                  top_diff=numpy.ones((1, 5)))
    numpy.testing.assert_allclose(t[0].data, [[-0.5, -0.5, 0.0, 0.5, 0.5]])
    numpy.testing.assert_allclose(b[0].diff, [[0.0, 1.0, 1.0, 1.0, 0.0]])


def test_threshold_values_and_no_backward():
    x = numpy.array([[-1.0, 0.5, 0.6, 2.0]])
    layer, b, t = run('type: "Threshold" threshold_param { threshold: 0.5 }', [x])
    numpy.testing.assert_allclose(t[0].data, [[0.0, 0.0, 1.0, 1.0]])  # strictly greater
    with pytest.raises(CaffeError, match="Threshold"):
        layer.Backward(t, [True], b)


def test_swish_values():
    x = numpy.array([[-1.0, 0.0, 2.0]])
    _, b, t = run('type: "Swish" swish_param { beta: 2 }', [x], top_diff=[[1.0, 1.0, 1.0]])
    s = 1 / (1 + numpy.exp(-2 * x))
    numpy.testing.assert_allclose(t[0].data, x * s, rtol=1e-6)
    numpy.testing.assert_allclose(b[0].diff, s + 2 * x * s * (1 - s), rtol=1e-5)


def test_power_values_and_constant_cases():
    x = numpy.array([[1.0, 2.0, 3.0]])
    _, b, t = run('type: "Power" power_param { power: 2 scale: 2 shift: 1 }', [x],
                  top_diff=[[1.0, 1.0, 1.0]])
    numpy.testing.assert_allclose(t[0].data, [[9.0, 25.0, 49.0]])
    numpy.testing.assert_allclose(b[0].diff, [[12.0, 20.0, 28.0]])
    _, b, t = run('type: "Power" power_param { power: 3 scale: 0 shift: 2 }', [x],
                  top_diff=[[1.0, 1.0, 1.0]])
    numpy.testing.assert_allclose(t[0].data, [[8.0, 8.0, 8.0]])
    numpy.testing.assert_allclose(b[0].diff, 0.0)
    _, _, t = run('type: "Power" power_param { power: 0 shift: 5 }', [x])
    numpy.testing.assert_allclose(t[0].data, 1.0)
    _, _, t = run('type: "Power" power_param { power: 0.5 scale: 0 shift: -4 }', [x])
    assert numpy.isnan(t[0].data).all()  # C's pow of a negative base


def test_power_in_place_reproduces_caffe():
    """In place, Caffe overwrites the top diff with dy/dx before multiplying: (dy/dx)^2."""
    x = numpy.array([[0.2958239, -0.7985178]])
    _, b, t = run('type: "Power" power_param { power: 2 scale: 1.5 shift: -0.5 }', [x],
                  top_diff=[[7.0, -3.0]], in_place=True)
    y = (1.5 * x - 0.5) ** 2
    g = 3 * 1.5 * y + 3 * -0.5  # Caffe reads its own output as the input
    numpy.testing.assert_allclose(t[0].data, y, rtol=1e-6)
    numpy.testing.assert_allclose(b[0].diff, g * g, rtol=1e-5)


def test_log_in_place_reproduces_caffe():
    x = numpy.array([[1.5, 4.0]])
    _, b, _ = run('type: "Log"', [x], top_diff=[[7.0, 7.0]], in_place=True)
    y = numpy.log(x)
    numpy.testing.assert_allclose(b[0].diff, (1 / y) ** 2, rtol=1e-5)


@pytest.mark.filterwarnings("ignore:divide by zero")
def test_log_with_scale_zero_scales_as_caffes_blas():
    """Caffe scales with sscal, which writes zeros for a factor of 0: log(0 * x + shift) and a
    gradient of 0 (BVLC Caffe's output), not inf * 0 = NaN."""
    x = numpy.array([[1.5, -2.0, numpy.inf]])
    _, b, t = run('type: "Log" log_param { scale: 0 shift: 2 }', [x], top_diff=[[1.0, 3.0, 1.0]])
    numpy.testing.assert_allclose(t[0].data, numpy.log(2.0) * numpy.ones((1, 3)), rtol=1e-6)
    assert (b[0].diff == 0).all()
    _, b, t = run('type: "Log" log_param { scale: 0 }', [x[:, :2]], top_diff=[[1.0, 3.0]])
    assert (t[0].data == -numpy.inf).all() and (b[0].diff == 0).all()


def test_exp_shift_past_the_float_range_is_infinite_as_caffes_pow():
    """Caffe's outer scale base^shift is IEEE arithmetic: 10^1e9 is inf (e^-1e9 is 0), not an
    error, and the tops follow from it."""
    x = numpy.array([[-1.0, 0.0, 1.0]], numpy.float32)
    _, _, t = run('type: "Exp" exp_param { base: 10 scale: -0.32 shift: 1e9 }', [x])
    assert numpy.isposinf(t[0].data).all()
    _, _, t = run('type: "Exp" exp_param { shift: -1e9 }', [x])
    assert (t[0].data == 0).all()


def test_exp_log_bases():
    x = numpy.array([[0.0, 1.0, 2.0]])
    _, b, t = run('type: "Exp" exp_param { base: 2 scale: 0.5 shift: 1 }', [x],
                  top_diff=[[1.0, 1.0, 1.0]])
    numpy.testing.assert_allclose(t[0].data, 2.0 ** (1 + 0.5 * x), rtol=1e-6)
    numpy.testing.assert_allclose(b[0].diff, 2.0 ** (1 + 0.5 * x) * 0.5 * numpy.log(2),
                                  rtol=1e-6)
    _, b, t = run('type: "Log" log_param { base: 10 scale: 2 shift: 1 }', [x + 1],
                  top_diff=[[1.0, 1.0, 1.0]])
    numpy.testing.assert_allclose(t[0].data, numpy.log10(2 * (x + 1) + 1), rtol=1e-6)
    numpy.testing.assert_allclose(b[0].diff, 2 / ((2 * (x + 1) + 1) * numpy.log(10)),
                                  rtol=1e-6)


def test_dropout_train_mask_and_scale():
    context.set_random_seed(5)
    x = data((50, 40), 1.0, 2.0)
    layer, b, t = run('type: "Dropout" dropout_param { dropout_ratio: 0.25 }', [x],
                      top_diff=numpy.ones((50, 40)))
    kept = t[0].data != 0
    assert 0.65 < kept.mean() < 0.85
    numpy.testing.assert_allclose(t[0].data[kept], (x[kept] / 0.75).astype(numpy.float32),
                                  rtol=1e-6)
    numpy.testing.assert_allclose(b[0].diff, kept / 0.75, rtol=1e-6)


def test_dropout_test_phase_is_identity_and_seeded_train_reproducible():
    x = data((4, 5))
    _, b, t = run('type: "Dropout"', [x], phase=caffe_pb2.TEST, top_diff=x * 2)
    numpy.testing.assert_allclose(t[0].data, x.astype(numpy.float32))
    numpy.testing.assert_allclose(b[0].diff, (x * 2).astype(numpy.float32))
    outs = []
    for _ in range(2):
        context.set_random_seed(11)
        outs.append(run('type: "Dropout"', [x])[2][0].data.copy())
    numpy.testing.assert_array_equal(outs[0], outs[1])


def test_dropout_in_place_train():
    context.set_random_seed(3)
    x = data((6, 7), 1.0, 2.0)
    _, b, t = run('type: "Dropout"', [x], top_diff=numpy.ones((6, 7)), in_place=True)
    kept = t[0].data != 0
    numpy.testing.assert_allclose(t[0].data[kept], (2 * x[kept]).astype(numpy.float32),
                                  rtol=1e-6)
    numpy.testing.assert_allclose(b[0].diff, kept * 2.0)


# ---- errors ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text,shape,match", [
    ('type: "PReLU"', (5,), "axes"),
    ('type: "PReLU"', (1, 2, 3, 4, 5), "axes"),
    ('type: "Exp" exp_param { base: -2 }', (2, 3), "strictly positive"),
    ('type: "Log" log_param { base: 0 }', (2, 3), "strictly positive"),
    ('type: "Log" log_param { base: 1 }', (2, 3), "Inf"),
    ('type: "Dropout" dropout_param { dropout_ratio: 1 }', (2, 3), "dropout_ratio"),
    ('type: "Dropout" dropout_param { dropout_ratio: -0.1 }', (2, 3), "dropout_ratio"),
])
def test_bad_params_raise(text, shape, match):
    with pytest.raises(CaffeError, match=match):
        run('name: "bad" ' + text, [numpy.zeros(shape)])


def test_prelu_preloaded_slope_count_mismatch():
    p = 'type: "PReLU" blobs { shape { dim: 2 } data: 0.1 data: 0.2 }'
    with pytest.raises(CaffeError, match="inconsistent"):
        run(p, [numpy.zeros((2, 3, 4))])


def test_absval_refuses_in_place():
    with pytest.raises(CaffeError, match="in-place"):
        run('type: "AbsVal"', [numpy.zeros((2, 3))], in_place=True)


def test_neuron_blob_counts():
    layer = make_layer('name: "r" type: "ReLU"')
    with pytest.raises(CaffeError, match="r"):
        layer.SetUp(blobs_from([numpy.zeros(2), numpy.zeros(2)], numpy.float32), [Blob()])
