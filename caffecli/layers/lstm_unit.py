"""LSTMUnit: one LSTM time step (Caffe's lstm_unit_layer)."""
from ..kernels.lstm import cell_backward, cell_forward
from ..layer import Layer
from ..registry import register_layer


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
