"""Convolution: im2col and grouped GEMMs over a chunk of images, or a plain GEMM for 1x1 kernels
(Caffe's conv_layer)."""
from ..kernels import im2col as ic
from ..kernels.gemm import gemm_stack
from ..registry import register_layer
from ._base_conv import BaseConvolutionLayer, prod


@register_layer("Convolution")
class ConvolutionLayer(BaseConvolutionLayer):
    """N-D grouped, strided, padded, dilated convolution; weights (out, in/group, *kernel).

    Columns are (group, kernel_dim, nb * P), the images of a chunk side by side; a chunk of
    one image is Caffe's layout, so its GEMMs read and write the blobs' own memory.
    """

    def compute_output_shape(self, in_shape):
        return ic.conv_out_shape(in_shape, self.kernel, self.pad, self.stride, self.dilation)

    def _columns(self, x, n0, n1):
        """The (g, kernel_dim, nb * P) columns of images n0..n1 (for 1x1 kernels, the input)."""
        shape = (self.group, self.kernel_dim, prod(self.out_shape) * (n1 - n0))
        if not self.pointwise:
            return self.cols.im2col(self.xp, x[n0:n1]).reshape(shape)
        if n1 - n0 == 1:
            return x[n0].reshape(shape)
        self.cols.last_col = self._channels_first(x, n0, n1, "_in")
        return self.cols.last_col

    def _image_shape(self):
        return (self.num, self.channels) + tuple(self.in_shape)

    def forward(self, bottom, top):
        xp = self.xp
        g, m = self.group, self.num_output
        P = prod(self.out_shape)
        w = self._grouped_weight()
        for b, t in zip(bottom, top):
            x = b.data.reshape(self._image_shape())
            y = t.data.reshape(self.num, m, P)
            for n0, n1 in self._chunks():
                nb = n1 - n0
                col = self._columns(x, n0, n1)
                if nb == 1:
                    gemm_stack(xp, w, col, y[n0].reshape(g, m // g, P))
                else:
                    out = gemm_stack(xp, w, col, self.scratch("_out", (g, m // g, P * nb),
                                                             col.dtype))
                    self._images_first(out, y[n0:n1])
            if self.bias_term:
                y += self.weights[1].data.reshape(1, m, 1)
        # the columns of a single chunk stay valid for the weight gradient (a 1x1 layer's
        # single image has none: its input is its columns)
        self._cached = (len(bottom) == 1 and self.chunk >= self.num
                        and not (self.pointwise and self.num == 1))

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        g, m = self.group, self.num_output
        P = prod(self.out_shape)
        w = self._grouped_weight()
        wt = w.transpose(0, 2, 1)
        need_w = self.param_propagate_down[0]
        for t, b, down in zip(top, bottom, propagate_down):
            dy = t.diff.reshape(self.num, m, P)
            self._bias_grad(dy)
            if not (need_w or down):
                continue
            x = b.data.reshape(self._image_shape())
            dx = b.diff.reshape(self._image_shape())
            wdiff = self.weights[0].diff.reshape(w.shape)
            for n0, n1 in self._chunks():
                nb = n1 - n0
                if nb == 1:
                    dyt = dy[n0].reshape(g, m // g, P)
                else:
                    dyt = self._channels_first(dy, n0, n1, "_out")
                col = None
                if need_w:
                    col = self.cols.last_col.reshape(g, self.kernel_dim, P * nb) \
                        if self._cached else self._columns(x, n0, n1)
                    gemm_stack(xp, dyt, col.transpose(0, 2, 1), wdiff, accumulate=True)
                if not down:
                    continue
                if self.pointwise and nb == 1:
                    gemm_stack(xp, wt, dyt, dx[n0].reshape(g, self.kernel_dim, P))
                    continue
                # the input gradient's columns overwrite the forward's (Caffe's col_buffer)
                dcol = gemm_stack(xp, wt, dyt, self.cols.column_buffer(
                    xp, (g, self.kernel_dim, P * nb), dy.dtype))
                self._cached = False
                if self.pointwise:
                    self._images_first(dcol, dx[n0:n1])
                    continue
                shape = (self.channels,) + tuple(self.kernel) + (nb,) + tuple(self.out_shape)
                self.cols.col2im(xp, dcol.reshape(shape), dx[n0:n1])
