"""Bias: bottom[0] plus a blob broadcast over its axes [axis, axis + num_axes) (Caffe's
bias_layer)."""
from ..blob import Blob
from ..fillers import fill
from ..kernels.caffe_blas import gemv_rows
from ..layer import Layer
from ..registry import register_layer
from ._broadcast import broadcast_dims, factor_shape, has_learned_factor


@register_layer("Bias")
class BiasLayer(Layer):
    """top = bottom[0] + bias (learned, or bottom[1]), broadcast."""

    skip_init_line = "bias.skipping_init"
    has_given_blobs = has_learned_factor   # a second bottom is the factor

    min_bottom_blobs = 1
    max_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        if len(bottom) == 1 and not self.blobs:
            p = self.layer_param.bias_param
            shape = factor_shape(self, bottom, p.axis, p.num_axes, "bias")
            self.blobs = [fill(Blob(shape, dtype=bottom[0].dtype), p.filler)]
        self.param_propagate_down = [True] * len(self.blobs)

    def reshape(self, bottom, top):
        bias = bottom[1] if len(bottom) > 1 else self.weights[0]
        self.dims = broadcast_dims(self, bottom, bias, self.layer_param.bias_param.axis, "bias")
        if top[0] is not bottom[0]:
            top[0].reshape_like(bottom[0])

    def forward(self, bottom, top):
        bias = (bottom[1] if len(bottom) > 1 else self.weights[0]).data
        outer, dim, inner = self.dims
        y = top[0].data.reshape(outer, dim, inner)
        if top[0] is not bottom[0]:
            y[...] = bottom[0].data.reshape(outer, dim, inner)
        y += bias.reshape(1, dim, 1)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0] and top[0] is not bottom[0]:
            bottom[0].diff[...] = top[0].diff
        learned = len(bottom) == 1
        if (learned and self.param_propagate_down[0]) or (not learned and propagate_down[1]):
            # Caffe's gemv of each outer item's rows into the diff: a learned bias's adds to it,
            # a bottom's first overwrites it (beta 0), then adds
            dy = top[0].diff.reshape(self.dims)
            diff = (self.weights[0] if learned else bottom[1]).diff.reshape(-1)
            if not learned:
                diff[...] = 0
            gemv_rows(self.xp, dy, diff)
