"""What LSTM and RNN share (Caffe's recurrent_layer): inputs, states and the input transforms,
computed directly rather than through an unrolled internal net.
"""
from .. import context, glog
from ..blob import Blob
from ..fillers import fill
from ..kernels.gemm import gemm
from ..layer import Layer
from ._unrolled import unrolled_net


class RecurrentLayer(Layer):
    """Shared set-up, shape checks and hidden-state bookkeeping of RNN and LSTM."""

    num_states = 1          # recurrent state blobs (h; h and c for LSTM)
    unroll = None           # _unrolled.fill_rnn / fill_lstm: Caffe's unrolled architecture

    def __init__(self, param):
        super().__init__(param)
        self.expose_hidden = param.recurrent_param.expose_hidden
        exposed = self.num_states if self.expose_hidden else 0
        self.min_bottom_blobs = 2 + exposed
        self.max_bottom_blobs = 3 + exposed
        self.exact_num_top_blobs = 1 + exposed
        self.carried = None   # the final states kept for the next forward when not exposed

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
        glog.info("recurrent.initializing", "Initializing recurrent layer: assuming input batch "
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
        if self.net_log:
            self._log_unrolled_net(bottom)
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
            glog.info("recurrent.adding_parameter", "Adding parameter %d: %s" % (i, name))
        self.param_propagate_down = [True] * len(self.blobs)

    def _log_unrolled_net(self, bottom):
        """Build Caffe's unrolled net for what its construction logs; its fills are undone
        (the layer draws Caffe's fills itself, below)."""
        from ..net import Net   # the net module imports the layers: a cycle at import time
        state = context.rng_state()
        try:
            Net(unrolled_net(self.layer_param, type(self).unroll, bottom, self.static_input),
                dtype=self.net_dtype)
        finally:
            context.set_rng_state(state)

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
        """The states at t = 0: the exposed bottoms, or (copies of) the last forward's final
        states. Those live in blobs as Caffe's h_T/c_T do: a reshape within the blobs' capacity
        keeps the values (a smaller batch carries on the first streams' states, a larger one up
        to the largest seen gets the rest back), beyond it the states start from zeros; they
        follow the mode like any blob."""
        shape = (self.N, self.H)
        if self.expose_hidden:
            first = 2 + self.static_input
            return [b.data.reshape(shape) for b in bottom[first:first + self.num_states]]
        if self.carried is None:
            self.carried = [Blob(dtype=bottom[0].dtype) for _ in range(self.num_states)]
        return [b.reshape(shape).at(self.side).data.copy() for b in self.carried]

    def finish_forward(self, top, finals):
        if self.expose_hidden:
            for t, s in zip(top[1:], finals):
                t.data[...] = s.reshape(t.shape)
        else:
            for b, s in zip(self.carried, finals):
                b.at(self.side).data[...] = s

    def input_transform(self, bottom, w, b):
        """W x_t + b for every time step at once: (T, N, out)."""
        x2 = bottom[0].data.reshape(self.T * self.N, self.D)
        return (x2 @ w.T + b).reshape(self.T, self.N, -1)

    def static_transform(self, bottom, w):
        if not self.static_input:
            return None
        return bottom[2].data.reshape(self.N, -1) @ w.T

    def step_weight_gradient(self, d, x, diff):
        """diff += d[t].T @ x[t] for each step t, the last first: a weight shared by every
        step of the unrolled net receives its gradient so in Caffe (one product over all the
        steps would round otherwise)."""
        for t in range(self.T - 1, -1, -1):
            gemm(self.xp, d[t].T, x[t], diff, accumulate=True)

    def input_backward(self, bottom, d_in, w_idx, b_idx, d_static, ws_idx):
        """Gradients of the input transforms (x and x_static), given d(W x_t + b)."""
        d2 = d_in.reshape(self.T * self.N, -1)
        x2 = bottom[0].data.reshape(self.T * self.N, self.D)
        gemm(self.xp, d2.T, x2, self.weights[w_idx].diff, accumulate=True)
        self.weights[b_idx].diff[...] += d2.sum(axis=0)
        bottom[0].diff.reshape(self.T * self.N, self.D)[...] = d2 @ self.weights[w_idx].data
        if self.static_input:
            xs2 = bottom[2].data.reshape(self.N, -1)
            gemm(self.xp, d_static.T, xs2, self.weights[ws_idx].diff, accumulate=True)
            bottom[2].diff.reshape(self.N, -1)[...] = d_static @ self.weights[ws_idx].data
