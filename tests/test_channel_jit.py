"""The compiled host per-channel passes (kernels/channel_jit.py) against numpy's arithmetic, bit
for bit, and the Scale and BatchNorm layers' compiled and reference paths against each other."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.kernels import channel_jit, jit
from gradcheck import make_layer

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
R = numpy.random.RandomState(5)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_channel_passes_are_numpys_bits(dtype):
    x = R.randn(2, 5, 7).astype(dtype)
    s, b = R.randn(5).astype(dtype), R.randn(5).astype(dtype)
    sd = (R.rand(5) + 0.5).astype(dtype)
    col = (1, 5, 1)
    cases = [  # (kernel call on (x, y-or-None, keep), numpy's value)
        (lambda x, y, k: channel_jit.scale(x, s, b, 0, 5, y, k),
         x * s.reshape(col) + b.reshape(col)),
        (lambda x, y, k: channel_jit.scale(x, s, None, 0, 5, y, k), x * s.reshape(col)),
        (lambda x, y, k: channel_jit.normalize(x, b, sd, 0, 5, y),
         (x - b.reshape(col)) / sd.reshape(col)),
        (lambda x, y, k: channel_jit.divide(x, sd, 0, 5, y), x / sd.reshape(col)),
    ]
    for call, want in cases:
        y = numpy.full_like(x, numpy.nan)
        call(x, y, None)
        numpy.testing.assert_array_equal(y, want)
        same, keep = x.copy(), numpy.full_like(x, numpy.nan)   # in place
        call(same, None, keep)
        numpy.testing.assert_array_equal(same, want)
    keep = numpy.zeros_like(x)
    same = x.copy()
    channel_jit.scale(same, s, b, 1, 3, None, keep)   # channels 1..2 only, input kept
    numpy.testing.assert_array_equal(keep[:, 1:3], x[:, 1:3])
    assert not keep[:, [0, 3, 4]].any()
    numpy.testing.assert_array_equal(same[:, [0, 3, 4]], x[:, [0, 3, 4]])


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_images_first_moves_with_numpys_bias_add(dtype):
    """(C, n, P) -> (n, C, P) for channels c0..c1 only, the bias added with numpy's rounding
    (a -0.0 stays -0.0 without a bias, becomes the bias's sum with one)."""
    src = R.randn(4, 3, 6).astype(dtype)
    src[1, 2, :2] = (-0.0, numpy.nan)
    bias = R.randn(4).astype(dtype)
    for b in (bias, None):
        y = numpy.full((3, 4, 6), 7, dtype)
        with_bias = b is not None
        jit.kernel(channel_jit._images_first)(src, b if with_bias else numpy.zeros(1, dtype),
                                              with_bias, 1, 3, y)
        want = src.transpose(1, 0, 2) if b is None else src.transpose(1, 0, 2) + b[:, None]
        assert y[:, 1:3].tobytes() == numpy.ascontiguousarray(want[:, 1:3]).tobytes()
        assert (y[:, [0, 3]] == 7).all()


@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("shape", [(3, 4, 50), (1, 4, 50), (3, 1, 50), (1, 1, 50), (3, 4, 1),
                                   (1, 4, 1), (2, 5, 4099), (2, 7, 9), (2, 7, 49), (1, 6, 51),
                                   (3, 5, 196), (2, 7, 4096), (2, 3, 4100), (2, 7, 8)])
@pytest.mark.parametrize("learned", [True, False])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_scale_backward_is_caffes_sums_and_input_gradient(in_place, shape, learned, dtype):
    """The compiled pass: the bias gradient as the Bias layer's gemv per outer item, the scale
    gradient as layers/scale.py's numpy reference of Caffe's steps (every branch: one outer
    item, one channel, a single row, one value a row), bit for bit, and dx = dy * s. Rows of
    9 to 4099 values in the four-row kernel take the one-pass sums (every tail length, the
    last rows of the gemvs and rows of two blocks or of 8 values not)."""
    from caffecli.kernels import caffe_gemv
    from caffecli.layers.scale import _caffe_scale_sums
    rs = numpy.random.RandomState(sum(shape))
    dy = rs.randn(*shape).astype(dtype)
    x = rs.randn(*shape).astype(dtype)
    s = rs.randn(shape[1]).astype(dtype)
    bias0, scale0 = rs.randn(2, shape[1]).astype(dtype)
    want_bias = bias0.copy()
    for o in range(shape[0]):
        want_bias = caffe_gemv.row_totals(dy[o], 1, want_bias)
    want_scale = scale0.copy()
    _caffe_scale_sums(dy * x, want_scale, learned)
    d = dy.copy()
    dx = None if in_place else numpy.full_like(dy, numpy.nan)
    bias, scale = bias0.copy(), scale0.copy()
    channel_jit.scale_backward(d, x, s, 0, shape[1], bias, scale, learned, dx)
    assert (d if in_place else dx).tobytes() == (dy * s.reshape(1, -1, 1)).tobytes()
    assert bias.tobytes() == want_bias.tobytes()
    assert scale.tobytes() == want_scale.tobytes()
    scale = scale0.copy()
    channel_jit.scale_backward(dy.copy(), x, s, 0, shape[1], None, scale, learned)
    assert scale.tobytes() == want_scale.tobytes()


SCALE = 'type: "Scale" scale_param { bias_term: %s filler { type: "gaussian" } ' \
        'bias_filler { type: "gaussian" } }'
BATCH_NORM = 'type: "BatchNorm" batch_norm_param { use_global_stats: true }'


@pytest.mark.parametrize("text", [SCALE % "true", SCALE % "false", BATCH_NORM])
@pytest.mark.parametrize("in_place", [False, True])
def test_layers_compiled_and_reference_agree(text, in_place, monkeypatch):
    """Tops and bottom diffs with the compiled passes and with numpy (CAFFECLI_JIT=0), split
    across threads or not: the same bits; parameter diffs (sums in another order) within
    float32 rounding."""
    shape = (3, 4, 5, 6)
    x, dy = R.randn(*shape).astype(numpy.float32), R.randn(*shape).astype(numpy.float32)
    results = []
    for jit_on, min_part in (("0", 1 << 30), ("1", 1 << 30), ("1", 1)):
        monkeypatch.setenv("CAFFECLI_JIT", jit_on)
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        monkeypatch.setattr(jit, "PASS_MIN_PART", min_part)
        numpy.random.seed(0)
        layer = make_layer(text)
        bottom = Blob(shape)
        bottom.data[...] = x
        top = bottom if in_place else Blob()
        layer.SetUp([bottom], [top])
        if layer.type == "BatchNorm":
            layer.blobs[0].data[...] = numpy.arange(4) * 0.5
            layer.blobs[1].data[...] = numpy.arange(1, 5)
            layer.blobs[2].data[...] = 2
        else:
            for blob in layer.blobs:
                blob.data[...] = numpy.linspace(-2, 2, blob.count).reshape(blob.shape)
        layer.Forward([bottom], [top])
        y = top.data.copy()
        top.diff[...] = dy
        layer.Backward([top], [True], [bottom])
        results.append((y, bottom.diff.copy()) + tuple(b.diff.copy() for b in layer.blobs))
    want = results[0]
    assert not numpy.array_equal(want[0], x)
    for got in results[1:]:
        numpy.testing.assert_array_equal(got[0], want[0])
        numpy.testing.assert_array_equal(got[1], want[1])
        for a, b in zip(got[2:], want[2:]):
            numpy.testing.assert_allclose(a, b, rtol=2e-6, atol=1e-6)
    assert all(numpy.abs(d).sum() > 0 for d in want[1:] if layer.type == "Scale")
