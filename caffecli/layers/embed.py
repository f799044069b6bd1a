"""Embed: a lookup table indexed by the bottom's integer values (Caffe's embed_layer)."""

from ..blob import Blob
from ..fillers import fill
from ..kernels.caffe_blas import gemv_columns
from ..kernels.indexing import checked_indices, scatter_add
from ..layer import Layer
from ..registry import register_layer


@register_layer("Embed")
class EmbedLayer(Layer):
    """top[..., :] = weight[bottom[...]] (+ bias); weight is input_dim x num_output."""

    skip_init_line = "embed.skipping_init"

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.embed_param
        self.N, self.K, self.bias_term = p.num_output, p.input_dim, p.bias_term
        if self.N <= 0:
            raise self.error("EmbedLayer num_output must be positive, got %d" % self.N)
        if self.K <= 0:
            raise self.error("EmbedLayer input_dim must be positive, got %d" % self.K)
        if not self.blobs:
            dt = bottom[0].dtype
            self.blobs = [fill(Blob((self.K, self.N), dt), p.weight_filler)]
            if self.bias_term:
                self.blobs.append(fill(Blob((self.N,), dt), p.bias_filler))
        self.param_propagate_down = [True] * len(self.blobs)

    def reshape(self, bottom, top):
        top[0].reshape(bottom[0].shape + (self.N,))

    def forward(self, bottom, top):
        idx = checked_indices(self, self.xp, bottom[0].data, self.K)
        y = top[0].data.reshape(-1, self.N)
        y[...] = self.weights[0].data[idx]
        if self.bias_term:
            y += self.weights[1].data

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            raise self.error("Can't backpropagate to EmbedLayer input.")
        dy = top[0].diff.reshape(-1, self.N)
        if self.param_propagate_down[0]:
            scatter_add(self.xp, self.weights[0].diff,
                        checked_indices(self, self.xp, bottom[0].data, self.K), dy)
        if self.bias_term and self.param_propagate_down[1]:
            gemv_columns(self.xp, dy, self.weights[1].diff)
