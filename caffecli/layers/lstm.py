"""LSTM: a long short-term memory layer over T time steps (Caffe's lstm_layer)."""
from ..kernels.lstm import cell_backward, cell_forward
from ..registry import register_layer
from ._recurrent import RecurrentLayer
from ._unrolled import fill_lstm


@register_layer("LSTM")
class LSTMLayer(RecurrentLayer):
    """Long short-term memory: gates i, f, o, g from W_xc x_t + b_c + W_hc (cont_t h_{t-1})."""

    num_states = 2
    per_step_params = ("W_hc",)
    unroll = staticmethod(fill_lstm)

    def param_shapes(self, H, D, S):
        rp = self.layer_param.recurrent_param
        shapes = [("W_xc", (4 * H, D), rp.weight_filler), ("b_c", (4 * H,), rp.bias_filler)]
        if S:
            shapes.append(("W_xc_static", (4 * H, S), rp.weight_filler))
        shapes.append(("W_hc", (4 * H, H), rp.weight_filler))
        return shapes

    def forward(self, bottom, top):
        xp = self.xp
        w_hc = self.weights[-1].data
        gates_x = self.input_transform(bottom, self.weights[0].data, self.weights[1].data)
        static = self.static_transform(bottom, self.weights[2].data) if self.static_input else None
        cont = bottom[1].data
        h, c = self.initial_states(bottom)
        out = top[0].data
        self.h_conted = xp.empty((self.T, self.N, self.H), dtype=out.dtype)
        self.steps = []
        for t in range(self.T):
            h_conted = xp.multiply(cont[t].reshape(-1, 1), h, out=self.h_conted[t])
            gates = h_conted @ w_hc.T
            gates += gates_x[t]
            if static is not None:
                gates += static
            c_prev = c
            c, h, acts = cell_forward(xp, c_prev, gates, cont[t], h=out[t])
            self.steps.append((c_prev, acts))
        self.finish_forward(top, [h, c])

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("Cannot backpropagate to sequence indicators.")
        xp = self.xp
        w_hc = self.weights[-1]
        cont = bottom[1].data
        dh_out = top[0].diff
        d_gates_x = xp.empty((self.T, self.N, 4 * self.H), dtype=dh_out.dtype)
        dh_rec = xp.zeros((self.N, self.H), dtype=dh_out.dtype)
        dc = xp.zeros((self.N, self.H), dtype=dh_out.dtype)
        for t in range(self.T - 1, -1, -1):
            c_prev, acts = self.steps[t]
            dh = dh_out[t] + dh_rec
            dc, dgates = cell_backward(xp, c_prev, acts, dc, dh, out=d_gates_x[t])
            dh_rec = dgates @ w_hc.data
            dh_rec *= cont[t].reshape(-1, 1)
        self.step_weight_gradient(d_gates_x, self.h_conted, w_hc.diff)
        d_static = d_gates_x.sum(axis=0) if self.static_input else None
        self.input_backward(bottom, d_gates_x, 0, 1, d_static, 2)
