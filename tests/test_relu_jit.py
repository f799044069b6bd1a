"""The compiled host ReLU (kernels/relu_jit.py) against the numpy reference and Caffe's
arithmetic, and the layer's choice between them."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.kernels import jit, relu_jit
from gradcheck import make_layer

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")


def caffe_relu(x, dy, slope):
    """relu_layer.cpp: max(x, 0) + slope min(x, 0) and dy ((x > 0) + slope (x <= 0))."""
    with numpy.errstate(invalid="ignore"):
        y = numpy.maximum(x, 0) + slope * numpy.minimum(x, 0)
        y[numpy.isnan(x)] = numpy.nan
        dx = dy * ((x > 0) + slope * (x <= 0)).astype(x.dtype)
    return y, dx


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("slope", [0.0, 0.1])
def test_compiled_relu_is_caffes_arithmetic(dtype, slope):
    rs = numpy.random.RandomState(1)
    x = rs.randn(1000).astype(dtype)
    dy = rs.randn(1000).astype(dtype)
    x[:5] = [numpy.nan, 0.0, numpy.inf, -2.0, -numpy.inf]
    dy[3] = numpy.inf                               # where x <= 0: inf * slope (NaN for 0)
    want_y, want_dx = caffe_relu(x, dy, dtype(slope))
    y, dx = numpy.full_like(x, 7), numpy.full_like(x, 7)
    relu_jit.forward(x, dtype(slope), y)
    relu_jit.backward(x, dy, dtype(slope), dx)
    numpy.testing.assert_array_equal(y, want_y)
    numpy.testing.assert_array_equal(dx, want_dx)
    assert numpy.isnan(dx[3]) == (slope == 0) and numpy.isnan(y[4]) == (slope == 0)
    relu_jit.backward(x, dy, dtype(slope))          # in place: into dy, then x
    relu_jit.forward(x, dtype(slope))
    numpy.testing.assert_array_equal(dy, want_dx)
    numpy.testing.assert_array_equal(x, want_y)


@pytest.mark.parametrize("slope", [0.0, 0.25])
@pytest.mark.parametrize("jit_on", ["1", "0"])
def test_relu_layer_compiled_and_reference_agree(slope, jit_on, monkeypatch):
    """The same tops and diffs with the compiled kernels and with numpy (CAFFECLI_JIT=0), in
    place and not, over a size that splits across threads."""
    monkeypatch.setenv("CAFFECLI_JIT", jit_on)
    monkeypatch.setattr("caffecli.kernels.jit.PASS_MIN_PART", 1000)
    calls = []
    for name in ("forward", "backward"):
        real = getattr(relu_jit, name)
        monkeypatch.setattr(relu_jit, name,
                            lambda *a, real=real, name=name: (calls.append(name), real(*a)))
    rs = numpy.random.RandomState(2)
    x = rs.randn(4, 3, 20, 20).astype(numpy.float32)
    dy = rs.randn(*x.shape).astype(numpy.float32)
    want_y, want_dx = caffe_relu(x, dy, numpy.float32(slope))
    for in_place in (False, True):
        layer = make_layer('type: "ReLU" relu_param { negative_slope: %g }' % slope)
        bottom = Blob(x.shape)
        bottom.data[...] = x
        top = bottom if in_place else Blob()
        layer.SetUp([bottom], [top])
        layer.Forward([bottom], [top])
        numpy.testing.assert_array_equal(top.data, want_y)
        top.diff[...] = dy
        layer.Backward([top], [True], [bottom])
        numpy.testing.assert_allclose(bottom.diff, want_dx, rtol=0, atol=0)
    if jit_on == "1":  # each pass at least once per layer (in parts where threads split it)
        assert calls.count("forward") >= 2 and calls.count("backward") >= 2
    else:
        assert not calls


@pytest.mark.skipif(not jit.INSTALLED, reason="numba not installed (the [jit] extra)")
@pytest.mark.parametrize("slope", [0.0, 0.5, -0.5])
def test_forward_zeros_carry_caffes_sign(slope):
    """Caffe's max(x, 0) + slope * min(x, 0): a negative x under slope 0 gives +0 (not x * 0,
    -0), an input -0 stays -0 (std::max keeps its first argument on a tie), +0 stays +0
    whatever the slope's sign."""
    x = numpy.array([-2.0, -0.0, 0.0, 3.0, numpy.nan], numpy.float32)
    s = numpy.float32(slope)
    with numpy.errstate(invalid="ignore"):   # std::max(a, b) is a < b ? b : a, min b < a ? b : a
        want = numpy.where(x < 0, 0, x) + s * numpy.where(0 < x, 0, x)
    for y in (numpy.empty_like(x), None):
        got = x.copy()
        relu_jit.forward(got, s, y)
        got = got if y is None else y
        numpy.testing.assert_array_equal(got, want)
        assert (numpy.signbit(got) == numpy.signbit(want)).all()
