"""RNN and LSTM (Caffe's recurrent_layer.cpp, rnn_layer.cpp, lstm_layer.cpp), computed directly.

Caffe unrolls these into an internal net; here the same arithmetic runs as vectorized matrix
products over the batch, looping over time steps only for the recurrence itself: the weight
gradients of the shared per-step weights, and RNN's output layer, are one product over all
steps. Parameter blobs have the order and shapes of the unrolled net's learnable params, so
Caffe's weights load unchanged. Bottoms x (T x N x ...), cont (T x N), optional x_static
(N x ...), then with expose_hidden the initial states; without it the final state of one
forward pass is the initial state of the next.
"""
from .. import glog
from ..blob import Blob
from ..fillers import fill
from ..layer import Layer
from ..registry import register_layer
from .lstm_unit import cell_backward, cell_forward


class RecurrentLayer(Layer):
    """Shared set-up, shape checks and hidden-state bookkeeping of RNN and LSTM."""

    num_states = 1          # recurrent state blobs (h; h and c for LSTM)

    def __init__(self, param):
        super().__init__(param)
        self.expose_hidden = param.recurrent_param.expose_hidden
        exposed = self.num_states if self.expose_hidden else 0
        self.min_bottom_blobs = 2 + exposed
        self.max_bottom_blobs = 3 + exposed
        self.exact_num_top_blobs = 1 + exposed
        self.state = None   # carried final states when not exposed

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1

    def param_shapes(self, H, D, S):
        raise NotImplementedError

    def setup(self, bottom, top):
        rp = self.layer_param.recurrent_param
        x = bottom[0]
        if x.num_axes < 2:
            raise self.error("bottom[0] must have at least 2 axes -- (#timesteps, #streams, ...), "
                             "got %s" % x.shape_string())
        self.T, self.N = x.shape[0], x.shape[1]
        glog.info("recurrent_layer.cpp:20", "Initializing recurrent layer: assuming input batch "
                  "contains %d timesteps of %d independent streams." % (self.T, self.N))
        self._check_cont(bottom)
        self.H = rp.num_output
        if self.H <= 0:
            raise self.error("num_output must be positive")
        self.static_input = len(bottom) > 2 + (self.num_states if self.expose_hidden else 0)
        S = 0
        if self.static_input:
            xs = bottom[2]
            if xs.num_axes < 1 or xs.shape[0] != self.N:
                raise self.error("static input %s must have %d (#streams) as its first axis"
                                 % (xs.shape_string(), self.N))
            S = xs.count(1)
        self.D = x.count(2)
        shapes = self.param_shapes(self.H, self.D, S)
        if self.blobs:
            got = [b.shape for b in self.blobs]
            if got != [s for _, s, _ in shapes]:
                raise self.error("given parameter blobs %s do not match the expected %s"
                                 % (got, [s for _, s, _ in shapes]))
        else:
            self.blobs = [fill(Blob(shape, x.dtype), filler) for _, shape, filler in shapes]
            self._consume_unrolled_fills(shapes, x.dtype)
        for i, (name, _, _) in enumerate(shapes):
            glog.info("recurrent_layer.cpp:150", "Adding parameter %d: %s" % (i, name))
        self.param_propagate_down = [True] * len(self.blobs)

    def _consume_unrolled_fills(self, shapes, dtype):
        """Caffe's unrolled net fills every time step's copy of the shared recurrent weights
        before sharing them; draw the same fills so later random numbers line up."""
        for _ in range(self.T - 1):
            for name, shape, filler in shapes:
                if name in self.per_step_params:
                    fill(Blob(shape, dtype), filler)

    def _check_cont(self, bottom):
        c = bottom[1]
        if c.num_axes != 2 or c.shape != (self.T, self.N):
            raise self.error("bottom[1] (cont) must be %d x %d (#timesteps, #streams), got %s"
                             % (self.T, self.N, c.shape_string()))

    def reshape(self, bottom, top):
        x = bottom[0]
        if x.num_axes < 2:
            raise self.error("bottom[0] must have at least 2 axes -- (#timesteps, #streams, ...), "
                             "got %s" % x.shape_string())
        if x.shape[0] != self.T:
            raise self.error("input number of timesteps changed (%d to %d)"
                             % (self.T, x.shape[0]))
        self.N = x.shape[1]
        self._check_cont(bottom)
        if x.count(2) != self.D:
            raise self.error("input %s has %d values per item, weights expect %d"
                             % (x.shape_string(), x.count(2), self.D))
        if self.static_input:
            xs = bottom[2]
            if xs.shape[0] != self.N or xs.count(1) != self.blobs[2].shape[1]:
                raise self.error("static input %s does not match %d streams of %d values"
                                 % (xs.shape_string(), self.N, self.blobs[2].shape[1]))
        state_shape = (1, self.N, self.H)
        if self.expose_hidden:
            first = 2 + self.static_input
            for j, b in enumerate(bottom[first:]):
                if b.shape != state_shape:
                    raise self.error("shape mismatch - recurrent input %d: %s vs. bottom[%d]: %s"
                                     % (j, "1 %d %d (%d)" % (self.N, self.H, self.N * self.H),
                                        first + j, b.shape_string()))
            for t in top[1:]:
                t.reshape(state_shape)
        top[0].reshape((self.T, self.N, self.H))

    # ---- helpers for the subclasses ----------------------------------------------------
    def initial_states(self, bottom):
        xp = self.xp
        shape = (self.N, self.H)
        if self.expose_hidden:
            first = 2 + self.static_input
            return [b.data.reshape(shape) for b in bottom[first:first + self.num_states]]
        if self.state is None or self.state[0].shape != shape:
            self.state = [xp.zeros(shape, dtype=bottom[0].dtype) for _ in range(self.num_states)]
        return self.state

    def finish_forward(self, top, finals):
        if self.expose_hidden:
            for t, s in zip(top[1:], finals):
                t.data[...] = s.reshape(t.shape)
        else:
            self.state = [s.copy() for s in finals]

    def input_transform(self, bottom, w, b):
        """W x_t + b for every time step at once: (T, N, out)."""
        x2 = bottom[0].data.reshape(self.T * self.N, self.D)
        return (x2 @ w.T + b).reshape(self.T, self.N, -1)

    def static_transform(self, bottom, w):
        if not self.static_input:
            return None
        return bottom[2].data.reshape(self.N, -1) @ w.T

    def input_backward(self, bottom, d_in, w_idx, b_idx, d_static, ws_idx):
        """Gradients of the input transforms (x and x_static), given d(W x_t + b)."""
        d2 = d_in.reshape(self.T * self.N, -1)
        x2 = bottom[0].data.reshape(self.T * self.N, self.D)
        self.weights[w_idx].diff[...] += d2.T @ x2
        self.weights[b_idx].diff[...] += d2.sum(axis=0)
        bottom[0].diff.reshape(self.T * self.N, self.D)[...] = d2 @ self.weights[w_idx].data
        if self.static_input:
            xs2 = bottom[2].data.reshape(self.N, -1)
            self.weights[ws_idx].diff[...] += d_static.T @ xs2
            bottom[2].diff.reshape(self.N, -1)[...] = d_static @ self.weights[ws_idx].data


@register_layer("LSTM")
class LSTMLayer(RecurrentLayer):
    """Long short-term memory: gates i, f, o, g from W_xc x_t + b_c + W_hc (cont_t h_{t-1})."""

    num_states = 2
    per_step_params = ("W_hc",)

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
            c, h, acts = cell_forward(xp, c_prev, gates, cont[t])
            out[t] = h
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
        # W_hc's gradient summed over every step in one product (Caffe adds one per step)
        w_hc.diff[...] += (d_gates_x.reshape(-1, 4 * self.H).T
                           @ self.h_conted.reshape(-1, self.H))
        d_static = d_gates_x.sum(axis=0) if self.static_input else None
        self.input_backward(bottom, d_gates_x, 0, 1, d_static, 2)


@register_layer("RNN")
class RNNLayer(RecurrentLayer):
    """Elman RNN: h_t = tanh(W_xh x_t + b_h + W_hh (cont_t h_{t-1})), o_t = tanh(W_ho h_t + b_o)."""

    num_states = 1
    per_step_params = ("W_hh", "W_ho", "b_o")

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
            h = xp.tanh(a, out=self.h_all[t])
        o = self.h_all.reshape(-1, self.H) @ w_ho.T
        o += b_o
        self.o_all = xp.tanh(o, out=o).reshape(shape)
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
        # The output layer does not recur: its gradients for all steps at once.
        d_o = top[0].diff * (1 - self.o_all * self.o_all)
        w_ho.diff[...] += d_o.reshape(-1, H).T @ self.h_all.reshape(-1, H)
        b_o.diff[...] += d_o.reshape(-1, H).sum(axis=0)
        dh_o = (d_o.reshape(-1, H) @ w_ho.data).reshape(self.T, self.N, H)
        d_pre_x = xp.empty((self.T, self.N, H), dtype=d_o.dtype)
        dh_rec = xp.zeros((self.N, H), dtype=d_o.dtype)
        for t in range(self.T - 1, -1, -1):
            h = self.h_all[t]
            da = xp.add(dh_o[t], dh_rec, out=d_pre_x[t])
            da *= 1 - h * h
            dh_rec = da @ w_hh.data
            dh_rec *= cont[t].reshape(-1, 1)
        w_hh.diff[...] += d_pre_x.reshape(-1, H).T @ self.h_conted.reshape(-1, H)
        d_static = d_pre_x.sum(axis=0) if self.static_input else None
        self.input_backward(bottom, d_pre_x, 0, 1, d_static, 2)
