"""Im2col: the columns of the convolution windows as a layer (Caffe's im2col_layer)."""
from ..kernels import im2col as ic
from ..layer import Layer
from ..registry import register_layer
from ._base_conv import prod, setup_geometry


@register_layer("Im2col")
class Im2colLayer(Layer):
    """The column buffer itself as a top: (N, C*prod(kernel), *out) in Caffe's row order."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        setup_geometry(self, bottom[0], self.layer_param.convolution_param)
        self._pad_in = ic.PadBuffer()
        self._pad_out = ic.PadBuffer()

    def reshape(self, bottom, top):
        b = bottom[0]
        if b.num_axes != self.channel_axis + 1 + self.num_spatial:
            raise self.error("bottom num_axes may not change (now %s)" % b.shape_string())
        first = self.channel_axis + 1
        self.in_shape = list(b.shape[first:])
        self.out_shape = ic.conv_out_shape(self.in_shape, self.kernel, self.pad, self.stride,
                                           self.dilation)
        if any(o < 0 for o in self.out_shape):
            raise self.error("kernel %s does not fit the padded input %s"
                             % (self.kernel, b.shape_string()))
        self.num = b.count(0, self.channel_axis)
        self.channels = b.shape[self.channel_axis]
        self.padded = ic.padded_shape(self.in_shape, self.out_shape, self.kernel, self.pad,
                                      self.stride, self.dilation)
        top[0].reshape(b.shape[:self.channel_axis]
                       + (self.channels * prod(self.kernel),) + tuple(self.out_shape))

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data.reshape((self.num, self.channels) + tuple(self.in_shape))
        buf = self._pad_in.get(xp, (self.num, self.channels), self.padded, x.dtype)
        ic.interior(buf, self.pad, self.in_shape)[...] = x
        win = ic.windows(xp, buf, self.kernel, self.stride, self.dilation, self.out_shape)
        top[0].data.reshape(win.shape)[...] = win

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        shape = (self.num, self.channels) + tuple(self.kernel) + tuple(self.out_shape)
        buf = self._pad_out.get(xp, (self.num, self.channels), self.padded, top[0].dtype)
        buf[...] = 0
        ic.col2im_add(buf, top[0].diff.reshape(shape), self.kernel, self.stride,
                      self.dilation, self.out_shape)
        bottom[0].diff.reshape((self.num, self.channels) + tuple(self.in_shape))[...] = \
            ic.interior(buf, self.pad, self.in_shape)
