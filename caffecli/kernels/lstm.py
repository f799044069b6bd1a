"""The LSTM cell (Caffe's lstm_unit_layer arithmetic), shared by LSTMUnit and LSTM: compiled
(kernels/lstm_jit.py) for host arrays, this numpy code its reference and the device's path."""
from . import jit, libm, lstm_jit


def _sigmoid(xp, x, out=None):
    return libm.lstm_sigmoid(xp, x, out)


def _tanh(xp, x, out=None):
    """Caffe's LSTM tanh, written through the sigmoid as lstm_unit_layer.cpp computes it."""
    return libm.lstm_tanh(xp, x, out)


def cell_forward(xp, c_prev, gates, cont, h=None):
    """c_t, h_t and the activations backward needs, for (N, H) c_prev, (N, 4H) gates, (N,) cont;
    h_t written into ``h`` where given. The activations are (acts, tanh_c): acts (N, 4H) holds
    i, f, o, g in the gates' order.

    The forget gate is cont * sigmoid (exactly 0 where cont is 0), as Caffe computes it."""
    n, H = c_prev.shape
    acts = xp.empty((n, 4 * H), dtype=gates.dtype)
    c, tanh_c = xp.empty_like(c_prev), xp.empty_like(c_prev)
    h = xp.empty_like(c_prev) if h is None else h
    if jit.usable(c_prev, gates, cont, h):
        lstm_jit.forward(gates, c_prev, cont, acts, tanh_c, c, h)
        return c, h, (acts, tanh_c)
    i, f, o, g = (acts[:, k * H:(k + 1) * H] for k in range(4))
    _sigmoid(xp, gates[:, :3 * H], acts[:, :3 * H])
    contc = cont.reshape(-1, 1)
    f[...] = xp.where(contc == 0, xp.zeros((), dtype=gates.dtype), contc * f)
    _tanh(xp, gates[:, 3 * H:], g)
    xp.add(f * c_prev, i * g, out=c)
    _tanh(xp, c, tanh_c)
    xp.multiply(o, tanh_c, out=h)
    return c, h, (acts, tanh_c)


def cell_backward(xp, c_prev, acts, c_diff, h_diff, out=None):
    """(c_prev diff, gates diff) from the diffs of c_t and h_t; the gates diff is written into
    ``out`` (N, 4H) when given. Each product is evaluated in lstm_unit_layer.cpp's order."""
    acts, tanh_c = acts
    n, H = c_prev.shape
    if out is None:
        out = xp.empty((n, 4 * H), dtype=acts.dtype)
    if jit.usable(acts, tanh_c, c_prev, c_diff, h_diff, out):
        dc_prev = xp.empty_like(c_prev)
        lstm_jit.backward(acts, tanh_c, c_prev, c_diff, h_diff, out, dc_prev)
        return dc_prev, out
    i, f, o, g = (acts[:, k * H:(k + 1) * H] for k in range(4))
    c_term = h_diff * o
    c_term *= 1 - tanh_c * tanh_c
    c_term += c_diff
    di, df, do, dg = (out[:, k * H:(k + 1) * H] for k in range(4))
    xp.multiply(c_term, g, out=di)
    di *= i
    di *= 1 - i
    xp.multiply(c_term, c_prev, out=df)
    df *= f
    df *= 1 - f
    xp.multiply(h_diff, tanh_c, out=do)
    do *= o
    do *= 1 - o
    xp.multiply(c_term, i, out=dg)
    dg *= 1 - g * g
    return c_term * f, out
