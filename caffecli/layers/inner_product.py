"""InnerProduct: a fully connected layer, y = x W^T + b (or x W with transpose: true)."""
from ..blob import Blob
from ..fillers import fill
from ..kernels.channel_sums import channel_sums
from ..kernels.gemm import gemm
from ..layer import Layer
from ..registry import register_layer


@register_layer("InnerProduct")
class InnerProductLayer(Layer):
    skip_init_line = "inner_product.skipping_init"
    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.inner_product_param
        self.num_output = p.num_output
        self.bias_term = p.bias_term
        self.transpose = p.transpose
        axis = bottom[0].canonical_axis_index(p.axis)
        self.K = bottom[0].count(axis)
        if self.blobs:
            return  # weights given in the layer param (e.g. a V1 file with blobs)
        shape = (self.K, self.num_output) if self.transpose else (self.num_output, self.K)
        dtype = bottom[0].dtype
        self.blobs = [fill(Blob(shape, dtype), p.weight_filler)]
        if self.bias_term:
            self.blobs.append(fill(Blob((self.num_output,), dtype), p.bias_filler))
        self.param_propagate_down = [True] * len(self.blobs)

    def reshape(self, bottom, top):
        p = self.layer_param.inner_product_param
        axis = bottom[0].canonical_axis_index(p.axis)
        k = bottom[0].count(axis)
        if k != self.K:
            raise self.error("input size incompatible with inner product parameters: bottom %s "
                             "gives %d inputs per item, weights expect %d"
                             % (bottom[0].shape_string(), k, self.K))
        self.M = bottom[0].count(0, axis)
        top[0].reshape(bottom[0].shape[:axis] + (self.num_output,))

    def _weight(self):
        w = self.weights[0].data
        return w if self.transpose else w.T  # (K, N)

    def forward(self, bottom, top):
        x = bottom[0].data.reshape(self.M, self.K)
        y = top[0].data.reshape(self.M, self.num_output)
        gemm(self.xp, x, self._weight(), y)
        if self.bias_term:
            y += self.weights[1].data

    def backward(self, top, propagate_down, bottom):
        dy = top[0].diff.reshape(self.M, self.num_output)
        x = bottom[0].data.reshape(self.M, self.K)
        if self.param_propagate_down[0]:
            a, b = (x.T, dy) if self.transpose else (dy.T, x)
            gemm(self.xp, a, b, self.weights[0].diff, accumulate=True)
        if self.bias_term and self.param_propagate_down[1]:
            diff = self.weights[1].diff
            if not channel_sums(self.xp, dy.reshape(self.M, self.num_output, 1), diff):
                diff[...] += dy.sum(axis=0)
        if propagate_down[0]:
            gemm(self.xp, dy, self._weight().T, bottom[0].diff.reshape(self.M, self.K))
