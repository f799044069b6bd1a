"""exp, log and tanh on host arrays through the C library's own functions, as Caffe's CPU
code calls them (expf, logf, tanhf for float data; exp, log, tanh for double), and the few
expressions Caffe builds from them (its sigmoid in double precision, ELU, BNLL's log) with the
gradients of sigmoid and ELU, pow(x, 0.5) for its solvers and pow for Power.

numpy's vectorized exp, log and tanh differ from the C library's in the last place for a
fifth to two fifths of float32 inputs, and a gradient that cancels (a bias gradient plus its
weight decay, one parameter's AdaGrad step) turns that last place into a disagreement with
Caffe's numbers. With these, the TanH, Sigmoid, Exp, Log, ELU and BNLL golden cases are
Caffe's bit for bit. The loops call the library once per value (not vectorized), split
across the kernel threads. Device arrays, and hosts without numba, take xp's functions.
"""
import math

import numpy

from . import jit
from .jit import kernel

MIN_PART = 1 << 13   # values per thread: a library call costs ~5 ns, 4x a copy


def _exp(x, y):
    for i in range(x.size):
        y[i] = math.exp(x[i])


def _log(x, y):
    for i in range(x.size):
        y[i] = math.log(x[i])


def _tanh(x, y):
    for i in range(x.size):
        y[i] = math.tanh(x[i])


def _pow_half(x, half, y):
    for i in range(x.size):
        y[i] = x[i] ** half


def _pow(x, p, y):
    for i in range(x.size):
        y[i] = x[i] ** p


def _sigmoid(x, y):
    """sigmoid_layer.cpp: 0.5 * tanh(0.5 * x) + 0.5, the literals double, so all in double."""
    for i in range(x.size):
        y[i] = 0.5 * math.tanh(0.5 * numpy.float64(x[i])) + 0.5


CERTAIN = 2.0 ** -46  # an absolute bound on |1 / (1 + exp(-x)) - Caffe's sigmoid| in double:
                      # exp within 0.52 ulp, the add and divide half an ulp each (under 9e-16
                      # of a result at most 1), and Caffe's own: tanh within 2 ulp, halved,
                      # plus its final add's half ulp (under 2e-16); 2^-46 is 1.4e-14


def _rounds_alike(f):
    """Whether every double within CERTAIN of f rounds to float32 as f does (rounding is
    monotonic: its interval's ends suffice); False for NaN."""
    r = numpy.float32(f)
    return numpy.float32(f - CERTAIN) == r and numpy.float32(f + CERTAIN) == r


def _sigmoid_single(x, y):
    """``_sigmoid`` of float32 x by way of 1 / (1 + exp(-x)) in double, where that and Caffe's
    double expression, under CERTAIN apart, provably round to the same float32
    (``_rounds_alike``). Elsewhere (tiny results, a value next to a rounding boundary, NaN)
    Caffe's expression itself, in a second loop that cannot vectorize: vectorized, both
    branches would run for every value. exp costs a fifth of tanh, and the test is two
    conversions."""
    unsure = 0
    for i in range(x.size):
        f = 1.0 / (1.0 + math.exp(-numpy.float64(x[i])))
        y[i] = numpy.float32(f)
        unsure += not _rounds_alike(f)
    i = 0
    while unsure:   # ends after the last unsure value: uncountable, so not vectorized
        v = numpy.float64(x[i])
        if not _rounds_alike(1.0 / (1.0 + math.exp(-v))):
            y[i] = 0.5 * math.tanh(0.5 * v) + 0.5
            unsure -= 1
        i += 1


def _sigmoid_backward(y, dy, dx):
    """sigmoid_layer.cpp: top_diff * y * (1. - y), the last factor and the product with it in
    double."""
    for i in range(y.size):
        dx[i] = (dy[i] * y[i]) * (1.0 - numpy.float64(y[i]))


def _elu(x, alpha, zero, one, y):
    """elu_layer.cpp: std::max(x, 0) + alpha * (exp(std::min(x, 0)) - 1), in the data's type."""
    for i in range(x.size):
        v = x[i]
        y[i] = (zero if v < zero else v) + alpha * (math.exp(zero if zero < v else v) - one)


def _elu_backward(x, y, dy, alpha, zero, one, dx):
    """elu_layer.cpp: top_diff * ((x > 0) + (alpha + y) * (x <= 0)), in the data's type."""
    for i in range(x.size):
        v = x[i]
        dx[i] = dy[i] * ((one if v > zero else zero)
                         + (alpha + y[i]) * (one if v <= zero else zero))


def _bnll(x, y):
    """bnll_layer.cpp: x > 0 ? x + log(1. + exp(-x)) : log(1. + exp(x)), exp in the data's
    type, the sum and the log in double; written as (x > 0 ? x : 0) + log(1. + exp(-|x|)),
    the same values (adding 0.0 changes none), one exp and one log a value: vectorized, the
    two branches each ran both (1.6M values on one thread: 44 -> 31 ms)."""
    for i in range(x.size):
        v = x[i]
        e = numpy.float64(math.exp(-v if v > 0 else v))
        y[i] = (v if v > 0 else 0.0) + math.log(1.0 + e)


@jit.inlined
def lstm_sigmoid_of(v):
    """lstm_unit_layer.cpp's sigmoid<Dtype> of one value: 1. / (1. + exp(-v)), exp in the
    data's type, the rest in double (a double: the caller's store rounds it)."""
    return 1.0 / (1.0 + numpy.float64(math.exp(-v)))


@jit.inlined
def lstm_tanh_of(v):
    """lstm_unit_layer.cpp's tanh<Dtype> of one value: 2. * sigmoid(2. * v) - 1., whose
    argument is double, so the sigmoid and its exp are sigmoid<double>'s."""
    return 2.0 * (1.0 / (1.0 + math.exp(-2.0 * numpy.float64(v)))) - 1.0


def _lstm_sigmoid(x, y):
    for i in range(x.size):
        y[i] = lstm_sigmoid_of(x[i])


def _lstm_tanh(x, y):
    for i in range(x.size):
        y[i] = lstm_tanh_of(x[i])


def _apply(loops, xp_fn, x, out, *args):
    """out = loops(x) elementwise on every core (x and out of any layout); xp_fn(x) where
    compiled loops do not apply (device arrays, no numba)."""
    if isinstance(x, numpy.ndarray):
        x = numpy.ascontiguousarray(x)
    if not jit.usable(x):
        if out is not None and hasattr(xp_fn, "nout"):   # a ufunc: straight into out
            return xp_fn(x, out=out)
        y = xp_fn(x)
        if out is None:
            return y
        out[...] = y
        return out
    y = out if out is not None and jit.usable(out) else numpy.empty_like(x)
    jit.over_parts(kernel(loops), x, *args, y, min_part=MIN_PART)
    if out is not None and out is not y:
        out[...] = y
        return out
    return y


def exp(xp, x, out=None):
    """The C library's exp of each value (expf for float32)."""
    return _apply(_exp, xp.exp, x, out)


def log(xp, x, out=None):
    """The C library's log of each value (logf for float32)."""
    return _apply(_log, xp.log, x, out)


def tanh(xp, x, out=None):
    """The C library's tanh of each value (tanhf for float32)."""
    return _apply(_tanh, xp.tanh, x, out)


def power(xp, x, p, out=None):
    """The C library's pow of each value and ``p`` (powf for float32: Caffe's caffe_powx)."""
    p = x.dtype.type(p)
    return _apply(_pow, lambda v: xp.power(v, p), x, out, p)


def sigmoid(xp, x, out=None):
    """Caffe's sigmoid, 0.5 * tanh(0.5 x) + 0.5 computed in double (stable for large |x|);
    float32 mostly through exp (``_sigmoid_single``), the same bits: 1.6M values on 2 cores
    40 -> 11 ms."""
    def array_code(v):
        w = v.astype(numpy.float64)
        return (xp.tanh(w * 0.5) * 0.5 + 0.5).astype(v.dtype)
    loops = _sigmoid
    if x.dtype == numpy.float32:
        loops = _sigmoid_single
        if isinstance(x, numpy.ndarray) and out is not None and numpy.shares_memory(x, out):
            x = x.copy()   # its second loop reads the input again, after the first wrote out
    return _apply(loops, array_code, x, out)


def sigmoid_backward(xp, y, dy, out):
    """out = Caffe's sigmoid gradient of top y and its diff dy, as one compiled pass on the
    host (numpy's made three float64 temporaries)."""
    if not jit.usable(y, dy, out):
        out[...] = (dy * y) * (1.0 - y.astype(numpy.float64))
        return out
    jit.over_parts(kernel(_sigmoid_backward), y, dy, out)
    return out


def elu(xp, x, alpha, out=None):
    """Caffe's ELU forward, x > 0 ? x : alpha * (exp(x) - 1), exp the C library's."""
    t = x.dtype.type

    def array_code(v):
        return xp.maximum(v, 0) + t(alpha) * (xp.exp(xp.minimum(v, 0)) - 1)
    return _apply(_elu, array_code, x, out, t(alpha), t(0), t(1))


def elu_backward(xp, x, y, dy, alpha, out):
    """out = Caffe's ELU gradient at input x, top y, top diff dy: one compiled pass on the
    host."""
    t = x.dtype.type
    if not jit.usable(x, y, dy, out):
        out[...] = dy * ((x > 0) + (y + t(alpha)) * (x <= 0))
        return out
    jit.over_parts(kernel(_elu_backward), x, y, dy, t(alpha), t(0), t(1), out)
    return out


def bnll(xp, x, out=None):
    """Caffe's BNLL forward, log(1 + exp(x)) without overflow."""
    def array_code(v):
        e = xp.exp(-xp.abs(v)).astype(numpy.float64)
        return (xp.maximum(v, 0) + xp.log1p(e)).astype(v.dtype)
    return _apply(_bnll, array_code, x, out)


def lstm_sigmoid(xp, x, out=None):
    """The LSTM cell's sigmoid as Caffe's LSTMUnit computes it."""
    def array_code(v):
        return (1.0 / (1.0 + xp.exp(-v).astype(numpy.float64))).astype(v.dtype)
    return _apply(_lstm_sigmoid, array_code, x, out)


def lstm_tanh(xp, x, out=None):
    """The LSTM cell's tanh as Caffe's LSTMUnit computes it, through its double sigmoid."""
    def array_code(v):
        return (2.0 / (1.0 + xp.exp(-2.0 * v.astype(numpy.float64))) - 1.0).astype(v.dtype)
    return _apply(_lstm_tanh, array_code, x, out)


def pow_half(xp, x, out=None):
    """x ** 0.5 through the C library's pow (powf for float32), as Caffe's powx(..., 0.5) in its
    adaptive solvers: it differs from a correctly rounded sqrt for about one value in 1500."""
    return _apply(_pow_half, xp.sqrt, x, out, x.dtype.type(0.5))
