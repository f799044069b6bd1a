"""The compiled LSTM cell (kernels/lstm_jit.py) against its numpy reference (kernels/lstm.py's
own code, with libm's compiled activations, as the cell ran before): the same bits, whatever
the thread split, and the LSTM layer's steps."""
import types

import numpy
import pytest

import caffecli
from caffecli.blob import Blob
from caffecli.kernels import jit, lstm, lstm_jit
from gradcheck import blobs_from, make_layer

pytestmark = pytest.mark.skipif(not jit.usable(numpy.zeros(1, numpy.float32)),
                                reason="compiled kernels are off (numba missing or CAFFECLI_JIT=0)")


def cell_inputs(dtype, n=6, width=37):
    """c_prev, gates, cont, c_diff, h_diff: large gates (saturated activations), a few special
    values, and cont 0, -0, 0.5 and 1 (the forget gate exactly 0 where cont is 0)."""
    rs = numpy.random.RandomState(7)
    c_prev = (rs.randn(n, width) * 3).astype(dtype)
    gates = (rs.randn(n, 4 * width) * 4).astype(dtype)
    gates[0, :4] = [30.0, -30.0, 0.0, -0.0]
    gates[1, width:width + 2] = [numpy.inf, -numpy.inf]
    cont = numpy.ones(n, dtype)
    cont[1], cont[2], cont[3] = 0.0, -0.0, 0.5
    return (c_prev, gates, cont, rs.randn(n, width).astype(dtype),
            rs.randn(n, width).astype(dtype))


def numpy_cell(monkeypatch, on):
    """Whether kernels/lstm.py runs its numpy code (``on``) or the compiled cell: only its own
    test of the arrays is turned, so libm's activations stay the C library's."""
    monkeypatch.setattr(lstm, "jit", types.SimpleNamespace(usable=lambda *a: False) if on
                        else jit)


def run_cell(dtype, monkeypatch, compiled, threads="1"):
    numpy_cell(monkeypatch, not compiled)
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    c_prev, gates, cont, c_diff, h_diff = cell_inputs(dtype)
    c, h, acts = lstm.cell_forward(numpy, c_prev, gates, cont)
    dc_prev, dgates = lstm.cell_backward(numpy, c_prev, acts, c_diff, h_diff)
    return [c, h, acts[0], acts[1], dc_prev, dgates]


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_compiled_cell_is_the_numpy_cells_bits(dtype, monkeypatch):
    """Forward (c, h, the activations) and backward (dc_prev, the gates' diff), their rows split
    over 1, 2 and 3 threads, are the reference's bit for bit; the forget gate is +0 where cont
    is 0 or -0."""
    want = run_cell(dtype, monkeypatch, compiled=False)
    monkeypatch.setattr(lstm_jit, "MIN_PART", 1)
    monkeypatch.setattr(lstm_jit, "BACKWARD_MIN_PART", 1)
    for count in ("1", "2", "3"):
        got = run_cell(dtype, monkeypatch, compiled=True, threads=count)
        for one, ref in zip(got, want):
            assert one.dtype == ref.dtype
            assert one.tobytes() == ref.tobytes()
    acts, width = want[2], want[0].shape[1]
    assert (acts[1:3, width:2 * width] == 0).all()
    assert not numpy.signbit(acts[1:3, width:2 * width]).any()


def test_compiled_backward_may_write_over_the_cell_diff():
    """dc_prev may be c_diff itself: each cell reads its own diff before writing it."""
    c_prev, gates, cont, c_diff, h_diff = cell_inputs(numpy.float32)
    _, _, (acts, tanh_c) = lstm.cell_forward(numpy, c_prev, gates, cont)
    want_d, want_dc = numpy.empty_like(gates), numpy.empty_like(c_prev)
    lstm_jit.backward(acts, tanh_c, c_prev, c_diff, h_diff, want_d, want_dc)
    d = numpy.empty_like(gates)
    lstm_jit.backward(acts, tanh_c, c_prev, c_diff, h_diff, d, c_diff)
    numpy.testing.assert_array_equal(c_diff, want_dc)
    numpy.testing.assert_array_equal(d, want_d)


LSTM = '''type: "LSTM" recurrent_param { num_output: 9
    weight_filler { type: "uniform" min: -0.4 max: 0.4 } bias_filler { type: "uniform" min: -1
    max: 1 } }'''


def test_lstm_layer_compiled_is_numpys(monkeypatch):
    """An LSTM over 5 steps of 3 streams, a stream restarting mid-sequence: its output, input
    gradient and weight gradients are the numpy cell's bits."""
    rs = numpy.random.RandomState(2)
    x = rs.randn(5, 3, 4).astype(numpy.float32)
    cont = numpy.ones((5, 3), numpy.float32)
    cont[0], cont[3, 1] = 0, 0
    dy = rs.randn(5, 3, 9).astype(numpy.float32)
    results = []
    for compiled in (False, True):
        numpy_cell(monkeypatch, not compiled)
        layer, bottom, top = make_layer(LSTM), blobs_from([x, cont], numpy.float32), [Blob()]
        caffecli.set_random_seed(3)
        layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
        top[0].diff[...] = dy
        layer.Backward(top, [True, False], bottom)
        results.append([top[0].data.copy(), bottom[0].diff.copy()]
                       + [b.diff.copy() for b in layer.blobs])
    for got, want in zip(results[1], results[0]):
        assert got.tobytes() == want.tobytes()
    assert numpy.abs(results[1][1]).max() > 0
