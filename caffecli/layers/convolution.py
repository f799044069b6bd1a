"""Convolution: im2col and one batched GEMM over the groups (Caffe's conv_layer)."""
from ..kernels import im2col as ic
from ..registry import register_layer
from ._base_conv import BaseConvolutionLayer, prod


@register_layer("Convolution")
class ConvolutionLayer(BaseConvolutionLayer):
    """N-D grouped, strided, padded, dilated convolution; weights (out, in/group, *kernel)."""

    def compute_output_shape(self, in_shape):
        return ic.conv_out_shape(in_shape, self.kernel, self.pad, self.stride, self.dilation)

    def forward(self, bottom, top):
        xp = self.xp
        g, m = self.group, self.num_output
        P = prod(self.out_shape)
        w = self._grouped_weight()
        for b, t in zip(bottom, top):
            x = b.data.reshape((self.num, self.channels) + tuple(self.in_shape))
            y = t.data.reshape(self.num, m, P)
            for n0, n1 in self._chunks():
                nb = n1 - n0
                col = self.cols.im2col(xp, x[n0:n1]).reshape(g, self.kernel_dim, P * nb)
                out = xp.matmul(w, col)  # (g, m/g, P*nb)
                y[n0:n1] = out.reshape(m, P, nb).transpose(2, 0, 1)
            if self.bias_term:
                y += self.weights[1].data.reshape(1, m, 1)
        # the columns of the last bottom stay valid for its weight gradient
        self._cached = (len(bottom) == 1 and self.chunk >= self.num)

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        g, m = self.group, self.num_output
        P = prod(self.out_shape)
        w = self._grouped_weight()
        need_w = self.param_propagate_down[0]
        for t, b, down in zip(top, bottom, propagate_down):
            dy = t.diff.reshape(self.num, m, P)
            self._bias_grad(dy)
            if not (need_w or down):
                continue
            x = b.data.reshape((self.num, self.channels) + tuple(self.in_shape))
            dx = b.diff.reshape((self.num, self.channels) + tuple(self.in_shape))
            wdiff = self.weights[0].diff.reshape(w.shape)
            for n0, n1 in self._chunks():
                nb = n1 - n0
                dyt = xp.ascontiguousarray(dy[n0:n1].transpose(1, 2, 0)).reshape(
                    g, m // g, P * nb)
                if need_w:
                    if getattr(self, "_cached", False):
                        col = self.cols.last_col.reshape(g, self.kernel_dim, P * nb)
                    else:
                        col = self.cols.im2col(xp, x[n0:n1]).reshape(g, self.kernel_dim,
                                                                     P * nb)
                    wdiff += xp.matmul(dyt, col.transpose(0, 2, 1))
                if down:
                    dcol = xp.matmul(w.transpose(0, 2, 1), dyt)  # (g, kdim, P*nb)
                    shape = ((self.channels,) + tuple(self.kernel) + tuple(self.out_shape)
                             + (nb,))
                    self.cols.col2im(xp, dcol.reshape(shape), dx[n0:n1])
