"""RNN: a simple recurrent layer, h_t = tanh(W x_t + U h_{t-1} + b) (Caffe's rnn_layer)."""
from ..kernels import libm
from ..registry import register_layer
from ._recurrent import RecurrentLayer
from ._unrolled import fill_rnn


@register_layer("RNN")
class RNNLayer(RecurrentLayer):
    """Elman RNN: h_t = tanh(W_xh x_t + b_h + W_hh (cont_t h_{t-1})), o_t = tanh(W_ho h_t + b_o)."""

    num_states = 1
    per_step_params = ("W_hh", "W_ho", "b_o")
    unroll = staticmethod(fill_rnn)

    def param_shapes(self, H, D, S):
        rp = self.layer_param.recurrent_param
        shapes = [("W_xh", (H, D), rp.weight_filler), ("b_h", (H,), rp.bias_filler)]
        if S:
            shapes.append(("W_xh_static", (H, S), rp.weight_filler))
        shapes += [("W_hh", (H, H), rp.weight_filler), ("W_ho", (H, H), rp.weight_filler),
                   ("b_o", (H,), rp.bias_filler)]
        return shapes

    def forward(self, bottom, top):
        xp = self.xp
        k = 2 + self.static_input
        w_hh, w_ho, b_o = (b.data for b in self.weights[k:k + 3])
        pre_x = self.input_transform(bottom, self.weights[0].data, self.weights[1].data)
        static = self.static_transform(bottom, self.weights[2].data) if self.static_input else None
        cont = bottom[1].data
        h, = self.initial_states(bottom)
        out = top[0].data
        shape = (self.T, self.N, self.H)
        self.h_conted = xp.empty(shape, dtype=out.dtype)
        self.h_all = xp.empty(shape, dtype=out.dtype)
        for t in range(self.T):
            h_conted = xp.multiply(cont[t].reshape(-1, 1), h, out=self.h_conted[t])
            a = h_conted @ w_hh.T
            a += pre_x[t]
            if static is not None:
                a += static
            h = libm.tanh(xp, a, out=self.h_all[t])
        o = self.h_all.reshape(-1, self.H) @ w_ho.T
        o += b_o
        self.o_all = libm.tanh(xp, o, out=o).reshape(shape)
        out[...] = self.o_all
        self.finish_forward(top, [h])

    def backward(self, top, propagate_down, bottom):
        if propagate_down[1]:
            raise self.error("Cannot backpropagate to sequence indicators.")
        xp = self.xp
        k = 2 + self.static_input
        w_hh, w_ho, b_o = self.weights[k:k + 3]
        cont = bottom[1].data
        H = self.H
        # The output layer does not recur; its shared weights still receive one step's
        # gradient at a time, the last first, as the unrolled net's layers add them in Caffe.
        d_o = top[0].diff * (1 - self.o_all * self.o_all)
        self.step_weight_gradient(d_o, self.h_all, w_ho.diff)
        for t in range(self.T - 1, -1, -1):
            b_o.diff[...] += d_o[t].sum(axis=0)
        dh_o = (d_o.reshape(-1, H) @ w_ho.data).reshape(self.T, self.N, H)
        d_pre_x = xp.empty((self.T, self.N, H), dtype=d_o.dtype)
        dh_rec = xp.zeros((self.N, H), dtype=d_o.dtype)
        for t in range(self.T - 1, -1, -1):
            h = self.h_all[t]
            da = xp.add(dh_o[t], dh_rec, out=d_pre_x[t])
            da *= 1 - h * h
            dh_rec = da @ w_hh.data
            dh_rec *= cont[t].reshape(-1, 1)
        self.step_weight_gradient(d_pre_x, self.h_conted, w_hh.diff)
        d_static = d_pre_x.sum(axis=0) if self.static_input else None
        self.input_backward(bottom, d_pre_x, 0, 1, d_static, 2)
