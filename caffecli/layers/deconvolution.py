"""Deconvolution: the transpose of Convolution, GEMM then col2im (Caffe's deconv_layer)."""
from ..kernels import im2col as ic
from ..kernels.gemm import gemm_stack
from ..registry import register_layer
from ._base_conv import BaseConvolutionLayer, prod


@register_layer("Deconvolution")
class DeconvolutionLayer(BaseConvolutionLayer):
    """Transposed convolution: forward is convolution's input gradient; weights are
    (in, out/group, *k)."""

    reverse = True

    def compute_output_shape(self, in_shape):
        return [s * (i - 1) + e - 2 * p for i, s, e, p in
                zip(in_shape, self.stride, ic.kernel_extent(self.kernel, self.dilation),
                    self.pad)]

    def forward(self, bottom, top):
        xp = self.xp
        c, m = self.channels, self.num_output
        Pin = prod(self.in_shape)
        w = self._grouped_weight()  # (g, c/g, kdim)
        for b, t in zip(bottom, top):
            x = b.data.reshape(self.num, c, Pin)
            y = t.data.reshape((self.num, m) + tuple(self.out_shape))
            for n0, n1 in self._chunks():
                nb = n1 - n0
                col = gemm_stack(xp, w.transpose(0, 2, 1),
                                 self._channels_first(x, n0, n1, "_in"),
                                 self.cols.column_buffer(xp, (self.group, self.kernel_dim,
                                                              Pin * nb), x.dtype))
                shape = (m,) + tuple(self.kernel) + (nb,) + tuple(self.in_shape)
                self.cols.col2im(xp, col.reshape(shape), y[n0:n1])
            if self.bias_term:
                y2 = t.data.reshape(self.num, m, t.count(2))
                y2 += self.weights[1].data.reshape(1, m, 1)

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        c, m = self.channels, self.num_output
        Pin = prod(self.in_shape)
        w = self._grouped_weight()
        need_w = self.param_propagate_down[0]
        for t, b, down in zip(top, bottom, propagate_down):
            self._bias_grad(t.diff.reshape(self.num, m, t.count(2)))
            if not (need_w or down):
                continue
            dy = t.diff.reshape((self.num, m) + tuple(self.out_shape))
            x = b.data.reshape(self.num, c, Pin)
            dx = b.diff.reshape(self.num, c, Pin)
            wdiff = self.weights[0].diff.reshape(w.shape)
            for n0, n1 in self._chunks():
                nb = n1 - n0
                col = self.cols.im2col(xp, dy[n0:n1]).reshape(self.group, self.kernel_dim,
                                                              Pin * nb)
                if need_w:
                    gemm_stack(xp, self._channels_first(x, n0, n1, "_in"),
                               col.transpose(0, 2, 1), wdiff, accumulate=True)
                if down:
                    out = gemm_stack(xp, w, col, self.scratch("_out", (self.group, c // self.group,
                                                                      Pin * nb), col.dtype))
                    self._images_first(out, dx[n0:n1])
