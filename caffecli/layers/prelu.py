"""PReLU: ReLU with a learned negative slope per channel, or one shared (Caffe's prelu_layer)."""
from ..blob import Blob
from ..fillers import fill
from ..kernels import jit, relu_jit
from ..kernels.activations import step_mask
from ..layer import NeuronLayer
from ..proto import caffe_pb2
from ..registry import register_layer


@register_layer("PReLU")
class PReLULayer(NeuronLayer):
    """ReLU with a learned negative slope per channel (or one shared), default 0.25."""

    skip_init_line = "prelu.skipping_init"

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
        x, y = self._view(x, bottom), self._view(top[0].data, bottom)
        slope = self.weights[0].data
        if jit.usable(x, y, slope):
            relu_jit.prelu(x, slope.reshape(-1), y)
            return
        y[...] = xp.maximum(x, 0) + self._slope() * xp.minimum(x, 0)

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        x = self.bottom_memory if top[0] is bottom[0] else bottom[0].data
        x = self._view(x, bottom)
        dy = self._view(top[0].diff, bottom)
        slope, slope_diff = self.weights[0].data, self.weights[0].diff
        dx = self._view(bottom[0].diff, bottom)
        if jit.usable(x, dy, slope, slope_diff, dx):   # Caffe's CPU order, slope sums first
            relu_jit.prelu_backward(x, dy, slope.reshape(-1),
                                    slope_diff.reshape(-1) if self.param_propagate_down[0]
                                    else None, dx if propagate_down[0] else None)
            return
        # The slope gradient first: writing the bottom diff in place overwrites top diff.
        if self.param_propagate_down[0]:
            contrib = dy * x * (x <= 0)
            if self.channel_shared:
                self.weights[0].diff[...] += contrib.sum()
            else:
                self.weights[0].diff[...] += contrib.sum(axis=(0, 2))
        if propagate_down[0]:
            xp.multiply(dy, step_mask(x, self._slope()), out=self._view(bottom[0].diff, bottom))
