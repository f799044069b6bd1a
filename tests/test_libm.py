"""exp, log and tanh through the C library (kernels/libm.py): the same bits as the library's
own functions, in every layout, and Caffe's double-precision expressions built on them."""
import ctypes
import ctypes.util
import math

import numpy
import pytest

from caffecli.kernels import jit, libm

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
R = numpy.random.RandomState(5)


def c_function(name, dtype):
    """The C library's ``name`` (``name`` + "f" for float32) over an array, one call a value."""
    path = ctypes.util.find_library("m")
    if path is None:
        pytest.skip("no C math library to compare with")
    c_type = ctypes.c_float if dtype == numpy.float32 else ctypes.c_double
    fn = getattr(ctypes.CDLL(path), name + ("f" if dtype == numpy.float32 else ""))
    fn.restype, fn.argtypes = c_type, [c_type]
    return lambda a: numpy.array([fn(float(v)) for v in a.ravel()], dtype).reshape(a.shape)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("name,values", [("exp", R.randn(3000) * 8), ("log", R.rand(3000) * 50),
                                         ("tanh", R.randn(3000) * 3)])
def test_each_value_is_the_c_librarys(dtype, name, values):
    x = values.astype(dtype)
    want = c_function(name, dtype)(x)
    got = getattr(libm, name)(numpy, x)
    assert got.dtype == dtype and got.tobytes() == want.tobytes()


def test_any_layout_and_out_and_split_across_threads(monkeypatch):
    from caffecli.kernels import threads
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    monkeypatch.setattr(libm, "MIN_PART", 7)
    x = R.randn(40, 30).astype(numpy.float32)
    want = c_function("exp", numpy.float32)(x)
    strided = libm.exp(numpy, x[:, ::2])                   # a view: copied first
    assert strided.tobytes() == numpy.ascontiguousarray(want[:, ::2]).tobytes()
    out = numpy.zeros((30, 40), numpy.float32).T           # a Fortran-ordered target
    assert libm.exp(numpy, x, out=out) is out and (out == want).all()
    y = x.copy()
    libm.exp(numpy, y, out=y)                               # in place
    assert y.tobytes() == want.tobytes()
    assert threads.num_threads() == 3


def test_without_compiled_loops_numpys_functions_run(monkeypatch):
    monkeypatch.setenv("CAFFECLI_JIT", "0")
    x = R.randn(100).astype(numpy.float32)
    numpy.testing.assert_array_equal(libm.tanh(numpy, x), numpy.tanh(x))
    numpy.testing.assert_allclose(libm.sigmoid(numpy, x), 1 / (1 + numpy.exp(-x)), rtol=1e-6)


def test_caffes_expressions_in_double():
    """sigmoid_layer's 0.5 tanh(0.5 x) + 0.5, bnll_layer's log(1. + exp(x)), and lstm_unit's
    sigmoid and tanh, with the precision of each step as C++ gives it."""
    x = (R.randn(500) * 6).astype(numpy.float32)
    tanh64, exp64 = c_function("tanh", numpy.float64), c_function("exp", numpy.float64)
    exp32, log64 = c_function("exp", numpy.float32), c_function("log", numpy.float64)
    wide = x.astype(numpy.float64)
    sigmoid = (0.5 * tanh64(0.5 * wide) + 0.5).astype(numpy.float32)
    assert libm.sigmoid(numpy, x).tobytes() == sigmoid.tobytes()
    bnll = numpy.where(x > 0, wide + log64(1.0 + exp32(-x).astype(numpy.float64)),
                       log64(1.0 + exp32(x).astype(numpy.float64))).astype(numpy.float32)
    assert libm.bnll(numpy, x).tobytes() == bnll.tobytes()
    lstm_sigmoid = (1.0 / (1.0 + exp32(-x).astype(numpy.float64))).astype(numpy.float32)
    assert libm.lstm_sigmoid(numpy, x).tobytes() == lstm_sigmoid.tobytes()
    lstm_tanh = (2.0 * (1.0 / (1.0 + exp64(-2.0 * wide))) - 1.0).astype(numpy.float32)
    assert libm.lstm_tanh(numpy, x).tobytes() == lstm_tanh.tobytes()
    assert math.isclose(float(libm.sigmoid(numpy, numpy.float32([0]))[0]), 0.5)


def test_float32_sigmoid_through_exp_is_caffes_tanh_expression_bit_for_bit():
    """float32's shortcut (1 / (1 + exp(-x)) where it provably rounds alike) against Caffe's
    0.5 * tanh(0.5 x) + 0.5 in double through the C library: the same bits over a million
    values across the range, the tails (where the shortcut must give way), the neighbours of
    rounding boundaries, zeros, infinities and NaN. Fails if the shortcut is taken unchecked."""
    rs = numpy.random.RandomState(11)
    x = numpy.concatenate([
        rs.randn(600000) * 4, rs.randn(200000) * 20, rs.uniform(-120, 120, 200000),
        numpy.arange(-2000, 2000) * 0.05, [0.0, -0.0, numpy.inf, -numpy.inf, numpy.nan, 1e-30,
                                           -1e-30, 88.7, -88.7, 103.9, -103.9, 1e30, -1e30]]
    ).astype(numpy.float32)
    x = numpy.concatenate([x, numpy.nextafter(x[:1000], numpy.float32(numpy.inf))])
    tanh64 = numpy.frompyfunc(math.tanh, 1, 1)
    wide = x.astype(numpy.float64)
    want = (0.5 * tanh64(0.5 * wide).astype(numpy.float64) + 0.5).astype(numpy.float32)
    got = libm.sigmoid(numpy, x)
    assert got.tobytes() == want.tobytes()
    # the shortcut alone (Caffe's expression never consulted) differs somewhere: the check bites
    with numpy.errstate(over="ignore"):
        quick = (1.0 / (1.0 + numpy.exp(-wide))).astype(numpy.float32)
    assert quick.tobytes() != want.tobytes()


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_sigmoid_backward_compiled_is_the_numpy_expression(dtype):
    y = libm.sigmoid(numpy, (R.randn(7, 300) * 3).astype(dtype))
    dy = R.randn(7, 300).astype(dtype)
    want = ((dy * y) * (1.0 - y.astype(numpy.float64))).astype(dtype)
    out = numpy.empty_like(y)
    assert libm.sigmoid_backward(numpy, y, dy, out) is out
    assert out.tobytes() == want.tobytes()


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_elu_is_caffes_expression_on_the_c_librarys_exp(dtype):
    """elu_layer.cpp: std::max(x, 0) + alpha * (exp(std::min(x, 0)) - 1) and its gradient
    top_diff * ((x > 0) + (alpha + y) * (x <= 0)), each step in the data's type."""
    t = dtype
    x = numpy.concatenate([R.randn(3000) * 4, [0.0, -0.0, -numpy.inf, numpy.inf]]).astype(t)
    alpha = t(numpy.float32(0.3))   # the prototxt's float
    smaller = numpy.where(x > 0, t(0), x)
    want = numpy.where(x < 0, t(0), x) + alpha * (c_function("exp", t)(smaller) - t(1))
    got = libm.elu(numpy, x, float(alpha))
    assert got.dtype == t and got.tobytes() == want.astype(t).tobytes()
    dy = R.randn(x.size).astype(t)
    with numpy.errstate(invalid="ignore"):   # inf * 0, as C++ computes it: NaN
        step = (x > 0).astype(t) + (alpha + got) * (x <= 0).astype(t)
    out = numpy.empty_like(x)
    assert libm.elu_backward(numpy, x, got, dy, float(alpha), out) is out
    assert out.tobytes() == (dy * step).tobytes()


def test_float32_sigmoid_in_place_is_the_same_bits():
    """In place (a Sigmoid layer whose top is its bottom) the shortcut's second loop must read
    the inputs, not the outputs the first loop wrote over them: the tails included."""
    x = numpy.concatenate([R.randn(5000) * 12, [-40.0, -25.0, -17.5, numpy.nan]]).astype(
        numpy.float32)
    want = libm.sigmoid(numpy, x)
    y = x.copy()
    assert libm.sigmoid(numpy, y, out=y) is y
    assert y.tobytes() == want.tobytes()


def test_bnll_is_caffes_branches_at_the_edges():
    """The branch-free BNLL against bnll_layer.cpp's two branches, through the C library, at
    zeros, infinities, NaN and far in both tails."""
    x = numpy.concatenate([R.randn(2000) * 30, [0.0, -0.0, numpy.inf, -numpy.inf, numpy.nan,
                                                1e-30, -1e-30, 88.0, -88.0, 1e30, -1e30]])
    x = x.astype(numpy.float32)
    exp32, log64 = c_function("exp", numpy.float32), c_function("log", numpy.float64)
    with numpy.errstate(invalid="ignore", over="ignore"):
        want = numpy.where(x > 0, x.astype(numpy.float64)
                           + log64(1.0 + exp32(-x).astype(numpy.float64)),
                           log64(1.0 + exp32(x).astype(numpy.float64))).astype(numpy.float32)
    assert libm.bnll(numpy, x).tobytes() == want.tobytes()
