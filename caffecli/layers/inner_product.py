"""InnerProduct: a fully connected layer, y = x W^T + b (or x W with transpose: true)."""
import numpy

from ..blob import Blob
from ..fillers import fill
from ..kernels import skinny_jit
from ..kernels.caffe_blas import gemv_columns
from ..kernels.gemm import gemm
from ..layer import Layer
from ..registry import register_layer

# A batch of at most BY_OUTPUT_MAX_ROWS items and at least BY_OUTPUT_RATIO times as many outputs
# has its forward computed transposed, W @ x.T, which OpenBLAS runs faster than x @ W.T with the
# same dot products. 2-core EPYC: CaffeNet's fc6 and fc7 at batch 64 37.6 -> 31.8 ms and
# 19.1 -> 15.4 ms, fc6 at batch 32 30.6-43.7 -> 19.7-20.5 ms, 100 x 2048 -> 1000 3.1 -> 2.7 ms,
# LeNet's ip1 level; at 256 items level both ways (47.3 against 48.5 ms). The input gradient
# stays dy @ W: transposed it ran 10-15% slower.
BY_OUTPUT_MAX_ROWS = 128
BY_OUTPUT_RATIO = 4


@register_layer("InnerProduct")
class InnerProductLayer(Layer):
    skip_init_line = "inner_product.skipping_init"
    claims_cleared_diffs = (0,)
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

    reshape_by_shapes = True

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
        if self._by_output(x, y):
            yt = gemm(self.xp, self.weights[0].data, x.T,
                      self.scratch("_yt", (self.num_output, self.M), y.dtype))
            if self.bias_term:   # one rounding, as adding the bias after
                numpy.add(yt.T, self.weights[1].data, out=y)
            else:
                y[...] = yt.T
            return
        gemm(self.xp, x, self._weight(), y)
        if self.bias_term:
            y += self.weights[1].data

    def _by_output(self, x, y):
        """Whether the forward computes y.T = W @ x.T (host arrays, W not transposed, a batch
        small against the outputs, no compiled few-row product instead)."""
        return (self.xp is numpy and not self.transpose and self.M <= BY_OUTPUT_MAX_ROWS
                and self.M * BY_OUTPUT_RATIO <= self.num_output
                and not skinny_jit.applies(x, self._weight(), y))

    def backward(self, top, propagate_down, bottom):
        dy = top[0].diff.reshape(self.M, self.num_output)
        x = bottom[0].data.reshape(self.M, self.K)
        if self.param_propagate_down[0]:
            a, b = (x.T, dy) if self.transpose else (dy.T, x)
            # just after a solver's ClearParamDiffs the product is written, not added: no
            # zeros' pass
            fresh = self.weights[0].claim_cleared_diff()
            gemm(self.xp, a, b, self.weights[0].diff, accumulate=not fresh)
        if self.bias_term and self.param_propagate_down[1]:
            gemv_columns(self.xp, dy, self.weights[1].diff)
        if propagate_down[0]:
            gemm(self.xp, dy, self._weight().T, bottom[0].diff.reshape(self.M, self.K))
