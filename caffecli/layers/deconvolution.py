"""Deconvolution: the transpose of Convolution, GEMM then col2im (Caffe's deconv_layer), image by
image in compiled code for narrow kernels on small grids (kernels/conv_jit.py, the roles of
Convolution's image and grid swapped)."""
from ..kernels import conv_jit, jit
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

    def _choose_algorithm(self):
        super()._choose_algorithm()
        self.by_image = self._images_pay()

    def forward(self, bottom, top):
        c, m = self.channels, self.num_output
        Pin = prod(self.in_shape)
        w = self._grouped_weight()  # (g, c/g, kdim)
        for b, t in zip(bottom, top):
            x = b.data.reshape(self.num, c, Pin)
            y = t.data.reshape((self.num, m) + tuple(self.out_shape))
            if self.by_image and jit.usable(x, y, w):
                # convolution's input gradient of x by image: col2im of W.T @ x[i]
                conv_jit.backward(y, x.reshape((self.num, c) + tuple(self.in_shape)), w,
                                  *self._geometry(), None, y)
            else:
                self._forward_batched(w, x, y)
            if self.bias_term:
                y2 = t.data.reshape(self.num, m, t.count(2))
                y2 += self.weights[1].data.reshape(1, m, 1)

    def _forward_batched(self, w, x, y):
        """y = col2im of W.T @ x over chunks of images (Caffe's backward_cpu_gemm)."""
        xp, m, Pin = self.xp, self.num_output, prod(self.in_shape)
        for n0, n1 in self._chunks():
            nb = n1 - n0
            col = gemm_stack(xp, w.transpose(0, 2, 1), self._channels_first(x, n0, n1, "_in"),
                             self.cols.column_buffer(xp, (self.group, self.kernel_dim, Pin * nb),
                                                     x.dtype))
            shape = (m,) + tuple(self.kernel) + (nb,) + tuple(self.in_shape)
            self.cols.col2im(xp, col.reshape(shape), y[n0:n1])

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
            if self.by_image and jit.usable(dy, x, dx, w, wdiff):
                # from each image's columns of dy: x[i] @ their transpose (summed in image
                # order) and Convolution's forward of dy, W @ them
                grid = (self.num, c) + tuple(self.in_shape)
                conv_jit.backward(dy, x.reshape(grid), w, *self._geometry(),
                                  wdiff if need_w else None, None,
                                  self.scratch("_image_weights", (self.num,) + w.shape, w.dtype),
                                  y=dx.reshape(grid) if down else None)
                continue
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
