"""LSTMUnit: one LSTM time step (Caffe's lstm_unit_layer.cpp), also the cell math LSTM reuses.

Bottoms c_prev (1 x N x H), gates (1 x N x 4H, order i, f, o, g), cont (1 x N); tops c, h.
"""
from ..layer import Layer
from ..registry import register_layer


def sigmoid(xp, x):
    return 1. / (1. + xp.exp(-x))


def tanh(xp, x):
    """Caffe's LSTM tanh, written through the sigmoid as lstm_unit_layer.cpp computes it."""
    return 2. * sigmoid(xp, 2. * x) - 1.


def cell_forward(xp, c_prev, gates, cont):
    """c_t, h_t and the activations backward needs, for (N, H) c_prev, (N, 4H) gates, (N,) cont.

    The forget gate is cont * sigmoid (exactly 0 where cont is 0), as Caffe computes it. The
    three sigmoid gates are one call over their contiguous 3H block (fewer, larger numpy ops)."""
    H = c_prev.shape[-1]
    ifo = sigmoid(xp, gates[:, :3 * H])
    i, o = ifo[:, :H], ifo[:, 2 * H:]
    contc = cont.reshape(-1, 1)
    f = xp.where(contc == 0, xp.zeros((), dtype=gates.dtype), contc * ifo[:, H:2 * H])
    g = tanh(xp, gates[:, 3 * H:])
    c = f * c_prev + i * g
    tanh_c = tanh(xp, c)
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


@register_layer("LSTMUnit")
class LSTMUnitLayer(Layer):
    exact_num_bottom_blobs = 3
    exact_num_top_blobs = 2

    def allow_force_backward(self, bottom_index):
        return bottom_index != 2

    def reshape(self, bottom, top):
        n = bottom[0].shape_at(1) if bottom[0].num_axes > 1 else -1
        for k, b in enumerate(bottom):
            axes = 2 if k == 2 else 3
            if b.num_axes != axes or b.shape[0] != 1 or b.shape[1] != n:
                raise self.error("bottom %d must be %s, got %s" % (
                    k, "1 x N (cont)" if k == 2 else "1 x N x D", b.shape_string()))
        self.H = bottom[0].shape[2]
        if bottom[1].shape[2] != 4 * self.H:
            raise self.error("gate input %s must have 4 x %d channels (the cell state is %s)"
                             % (bottom[1].shape_string(), self.H, bottom[0].shape_string()))
        top[0].reshape_like(bottom[0])
        top[1].reshape_like(bottom[0])

    def _inputs(self, bottom):
        n = bottom[0].shape[1]
        return (bottom[0].data.reshape(n, self.H), bottom[1].data.reshape(n, 4 * self.H),
                bottom[2].data.reshape(n))

    def forward(self, bottom, top):
        c_prev, gates, cont = self._inputs(bottom)
        c, h, _ = cell_forward(self.xp, c_prev, gates, cont)
        top[0].data[...] = c.reshape(top[0].shape)
        top[1].data[...] = h.reshape(top[1].shape)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[2]:
            raise self.error("Cannot backpropagate to sequence indicators.")
        if not (propagate_down[0] or propagate_down[1]):
            return
        xp = self.xp
        c_prev, gates, cont = self._inputs(bottom)
        _, _, acts = cell_forward(xp, c_prev, gates, cont)
        n = c_prev.shape[0]
        dc_prev, dgates = cell_backward(xp, c_prev, acts, top[0].diff.reshape(n, self.H),
                                        top[1].diff.reshape(n, self.H))
        bottom[0].diff[...] = dc_prev.reshape(bottom[0].shape)
        bottom[1].diff[...] = dgates.reshape(bottom[1].shape)
