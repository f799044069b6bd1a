"""Elementwise activation layers (Caffe's neuron layers): one bottom, one same-shaped top.

Backward passes read the bottom blob at backward time, as Caffe does, so an in-place layer
sees its own output there (Caffe's results for in-place use are reproduced, quirks included).
Piecewise gradients multiply by 0/1 masks, Caffe's own formulas: numpy's where() with a mixed
mask is several times slower than the arithmetic.
"""
from ..blob import Blob
from ..fillers import fill
from ..layer import NeuronLayer
from ..proto import caffe_pb2
from ..registry import register_layer

BNLL_THRESHOLD = 50.0


def sigmoid(xp, z):
    """Caffe's sigmoid, 0.5 * tanh(0.5 z) + 0.5 (stable for large |z|)."""
    return xp.tanh(z * 0.5) * 0.5 + 0.5


def _step(x, below):
    """(x > 0) + below * (x <= 0): 1 where x > 0, ``below`` (broadcast) elsewhere."""
    pos = x > 0
    factor = pos.astype(x.dtype)
    factor += below * ~pos
    return factor


@register_layer("ReLU")
class ReLULayer(NeuronLayer):
    """max(x, 0) + negative_slope * min(x, 0)."""

    def forward(self, bottom, top):
        x = bottom[0].data
        slope = self.layer_param.relu_param.negative_slope
        if slope:
            top[0].data[...] = (self.xp.maximum(x, 0)
                                + x.dtype.type(slope) * self.xp.minimum(x, 0))
        else:
            self.xp.maximum(x, 0, out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = bottom[0].data  # in place: top data equals max(x,0), same sign test
        dy = top[0].diff
        slope = self.layer_param.relu_param.negative_slope
        self.xp.multiply(dy, _step(x, x.dtype.type(slope)) if slope else x > 0,
                         out=bottom[0].diff)


@register_layer("PReLU")
class PReLULayer(NeuronLayer):
    """ReLU with a learned negative slope per channel (or one shared), default 0.25."""

    def setup(self, bottom, top):
        if bottom[0].num_axes < 2:
            raise self.error("Number of axes of bottom blob must be >=2, got %s"
                             % bottom[0].shape_string())
        p = self.layer_param.prelu_param
        channels = bottom[0].channels
        self.channel_shared = p.channel_shared
        if not self.blobs:
            shape = () if self.channel_shared else (channels,)
            filler = p.filler
            if not p.HasField("filler"):
                filler = caffe_pb2.FillerParameter(type="constant", value=0.25)
            self.blobs = [fill(Blob(shape, dtype=bottom[0].dtype), filler)]
        want = 1 if self.channel_shared else channels
        if self.blobs[0].count() != want:
            raise self.error("Negative slope size is inconsistent with prototxt config: slope "
                             "blob %s, expected %d value(s)" % (self.blobs[0].shape_string(), want))
        self.bottom_memory = None

    def reshape(self, bottom, top):
        if bottom[0].num_axes < 2:
            raise self.error("Number of axes of bottom blob must be >=2, got %s"
                             % bottom[0].shape_string())
        top[0].reshape_like(bottom[0])

    def _slope(self):
        """The slope broadcastable against the bottom viewed as (num, channels, rest)."""
        s = self.weights[0].data
        return s.reshape(1, 1, 1) if self.channel_shared else s.reshape(1, -1, 1)

    def _view(self, a, bottom):
        b = bottom[0]
        return a.reshape(b.shape[0], b.channels, b.count(2))

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        if top[0] is bottom[0]:  # keep the input for backward, as Caffe's bottom_memory_
            self.bottom_memory = x.copy()
        x = self._view(x, bottom)
        y = xp.maximum(x, 0) + self._slope() * xp.minimum(x, 0)
        self._view(top[0].data, bottom)[...] = y

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        x = self.bottom_memory if top[0] is bottom[0] else bottom[0].data
        x = self._view(x, bottom)
        dy = self._view(top[0].diff, bottom)
        # The slope gradient first: writing the bottom diff in place overwrites top diff.
        if self.param_propagate_down[0]:
            contrib = dy * x * (x <= 0)
            if self.channel_shared:
                self.weights[0].diff[...] += contrib.sum()
            else:
                self.weights[0].diff[...] += contrib.sum(axis=(0, 2))
        if propagate_down[0]:
            xp.multiply(dy, _step(x, self._slope()), out=self._view(bottom[0].diff, bottom))


@register_layer("ELU")
class ELULayer(NeuronLayer):
    """x for x > 0, alpha * (exp(x) - 1) otherwise."""

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        alpha = self.layer_param.elu_param.alpha
        top[0].data[...] = xp.maximum(x, 0) + alpha * (xp.exp(xp.minimum(x, 0)) - 1)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x, y, dy = bottom[0].data, top[0].data, top[0].diff
        alpha = self.layer_param.elu_param.alpha
        self.xp.multiply(dy, _step(x, y + alpha), out=bottom[0].diff)


@register_layer("Sigmoid")
class SigmoidLayer(NeuronLayer):
    """1 / (1 + exp(-x))."""

    def forward(self, bottom, top):
        top[0].data[...] = sigmoid(self.xp, bottom[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            y = top[0].data
            bottom[0].diff[...] = top[0].diff * y * (1 - y)


@register_layer("TanH")
class TanHLayer(NeuronLayer):
    """tanh(x)."""

    def forward(self, bottom, top):
        self.xp.tanh(bottom[0].data, out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            y = top[0].data
            bottom[0].diff[...] = top[0].diff * (1 - y * y)


@register_layer("AbsVal")
class AbsValLayer(NeuronLayer):
    """|x|; Caffe refuses in-place use (backward needs the sign of the input)."""

    def setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("AbsVal Layer does not allow in-place computation.")

    def forward(self, bottom, top):
        self.xp.abs(bottom[0].data, out=top[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = self.xp.sign(bottom[0].data) * top[0].diff


@register_layer("BNLL")
class BNLLLayer(NeuronLayer):
    """Binomial normal log likelihood, log(1 + exp(x)), computed without overflow."""

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        top[0].data[...] = xp.maximum(x, 0) + xp.log1p(xp.exp(-xp.abs(x)))

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            xp = self.xp
            e = xp.exp(xp.minimum(bottom[0].data, BNLL_THRESHOLD))
            bottom[0].diff[...] = top[0].diff * e / (e + 1)


@register_layer("Swish")
class SwishLayer(NeuronLayer):
    """x * sigmoid(beta * x)."""

    def forward(self, bottom, top):
        x = bottom[0].data
        beta = self.layer_param.swish_param.beta
        self.sigmoid_out = sigmoid(self.xp, x * beta)
        top[0].data[...] = x * self.sigmoid_out

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            beta = self.layer_param.swish_param.beta
            by = top[0].data * beta
            s = self.sigmoid_out
            bottom[0].diff[...] = top[0].diff * (by + s * (1 - by))


@register_layer("Clip")
class ClipLayer(NeuronLayer):
    """max(min, min(x, max)); the gradient passes where min <= x <= max."""

    def forward(self, bottom, top):
        p = self.layer_param.clip_param
        xp = self.xp
        top[0].data[...] = xp.maximum(xp.minimum(bottom[0].data, p.max), p.min)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            p = self.layer_param.clip_param
            x, dy = bottom[0].data, top[0].diff
            self.xp.multiply(dy, (x >= p.min) & (x <= p.max), out=bottom[0].diff)


@register_layer("Threshold")
class ThresholdLayer(NeuronLayer):
    """1 where x > threshold, else 0; not differentiable (Caffe has no backward)."""

    def forward(self, bottom, top):
        t = self.layer_param.threshold_param.threshold
        top[0].data[...] = bottom[0].data > t

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("Backward is not implemented (the threshold function is not "
                             "differentiable)")
