"""The LSTM cell (Caffe's lstm_unit_layer arithmetic), shared by LSTMUnit and LSTM."""
from . import libm


def _sigmoid(xp, x):
    return libm.lstm_sigmoid(xp, x)


def _tanh(xp, x):
    """Caffe's LSTM tanh, written through the sigmoid as lstm_unit_layer.cpp computes it."""
    return libm.lstm_tanh(xp, x)


def cell_forward(xp, c_prev, gates, cont):
    """c_t, h_t and the activations backward needs, for (N, H) c_prev, (N, 4H) gates, (N,) cont.

    The forget gate is cont * sigmoid (exactly 0 where cont is 0), as Caffe computes it. The
    three sigmoid gates are one call over their contiguous 3H block (fewer, larger numpy ops)."""
    H = c_prev.shape[-1]
    ifo = _sigmoid(xp, gates[:, :3 * H])
    i, o = ifo[:, :H], ifo[:, 2 * H:]
    contc = cont.reshape(-1, 1)
    f = xp.where(contc == 0, xp.zeros((), dtype=gates.dtype), contc * ifo[:, H:2 * H])
    g = _tanh(xp, gates[:, 3 * H:])
    c = f * c_prev + i * g
    tanh_c = _tanh(xp, c)
    h = o * tanh_c
    return c, h, (i, f, o, g, tanh_c)


def cell_backward(xp, c_prev, acts, c_diff, h_diff, out=None):
    """(c_prev diff, gates diff) from the diffs of c_t and h_t; the gates diff is written into
    ``out`` (N, 4H) when given. Each product is evaluated in lstm_unit_layer.cpp's order."""
    i, f, o, g, tanh_c = acts
    H = i.shape[-1]
    c_term = h_diff * o
    c_term *= 1 - tanh_c * tanh_c
    c_term += c_diff
    if out is None:
        out = xp.empty(i.shape[:-1] + (4 * H,), dtype=i.dtype)
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
