"""caffe.io.Transformer: turns H x W x K images into a net's K x H x W input and back, as pycaffe.

Order of preprocess: float32, resize to the input's spatial size, transpose, channel swap, raw
scale, mean subtraction, input scale; deprocess undoes them in reverse. Unlike pycaffe, the
caller's array is never modified in place, and a constant mean of another size stays constant
(pycaffe's rescaling divided 0 by 0).
"""
import numpy

from .image_resize import resize_image


class Transformer:
    """Preprocessing settings per net input; ``inputs`` maps input names to their blob shapes
    (N x K x H x W), e.g. ``{'data': net.blobs['data'].data.shape}``."""

    def __init__(self, inputs):
        self.inputs = inputs
        self.transpose = {}
        self.channel_swap = {}
        self.raw_scale = {}
        self.mean = {}
        self.input_scale = {}

    def _check_input(self, in_):
        if in_ not in self.inputs:
            raise ValueError("{} is not one of the net inputs: {}".format(in_, self.inputs))

    def preprocess(self, in_, data):
        """An H' x W' x K image as the K x H x W float32 array input ``in_`` takes."""
        self._check_input(in_)
        caffe_in = numpy.array(data, dtype=numpy.float32)
        in_dims = tuple(self.inputs[in_][2:])
        if caffe_in.shape[:2] != in_dims:
            caffe_in = resize_image(caffe_in, in_dims)
        if in_ in self.transpose:
            caffe_in = caffe_in.transpose(self.transpose[in_])
        if in_ in self.channel_swap:
            caffe_in = caffe_in[list(self.channel_swap[in_]), :, :]
        if in_ in self.raw_scale:
            caffe_in *= self.raw_scale[in_]
        if in_ in self.mean:
            caffe_in -= self.mean[in_]
        if in_ in self.input_scale:
            caffe_in *= self.input_scale[in_]
        return caffe_in

    def deprocess(self, in_, data):
        """Undo preprocess (all but the resize) on a K x H x W array (singleton axes dropped)."""
        self._check_input(in_)
        decaf_in = data.copy().squeeze()
        if in_ in self.input_scale:
            decaf_in /= self.input_scale[in_]
        if in_ in self.mean:
            decaf_in += self.mean[in_]
        if in_ in self.raw_scale:
            decaf_in /= self.raw_scale[in_]
        if in_ in self.channel_swap:
            decaf_in = decaf_in[numpy.argsort(self.channel_swap[in_]), :, :]
        if in_ in self.transpose:
            decaf_in = decaf_in.transpose(numpy.argsort(self.transpose[in_]))
        return decaf_in

    def set_transpose(self, in_, order):
        """Axis order taking the image to the input's layout, e.g. (2, 0, 1) for HxWxC -> CxHxW."""
        self._check_input(in_)
        if len(order) != len(self.inputs[in_]) - 1:
            raise ValueError("Transpose order needs to have the same number of dimensions as "
                             "the input (%d), got %r" % (len(self.inputs[in_]) - 1, order))
        self.transpose[in_] = order

    def set_channel_swap(self, in_, order):
        """Channel order after the transpose, e.g. (2, 1, 0) for RGB -> BGR."""
        self._check_input(in_)
        if len(order) != self.inputs[in_][1]:
            raise ValueError("Channel swap needs to have the same number of dimensions as the "
                             "input channels (%d), got %r" % (self.inputs[in_][1], order))
        self.channel_swap[in_] = order

    def set_raw_scale(self, in_, scale):
        """Multiply the raw image by ``scale`` first (255 for models trained on [0, 255])."""
        self._check_input(in_)
        self.raw_scale[in_] = scale

    def set_mean(self, in_, mean):
        """Subtract ``mean``: K values (per channel) or a K x H x W / H x W array, resized to the
        input's size when it differs (over its own value range, as pycaffe)."""
        self._check_input(in_)
        shape = mean.shape
        if mean.ndim == 1:
            if shape[0] != self.inputs[in_][1]:
                raise ValueError("Mean channels incompatible with input: %d values for %d "
                                 "channels" % (shape[0], self.inputs[in_][1]))
            mean = mean[:, numpy.newaxis, numpy.newaxis]
        else:
            if mean.ndim == 2:
                mean, shape = mean[numpy.newaxis], (1,) + shape
            if len(shape) != 3:
                raise ValueError("Mean shape invalid: %r" % (mean.shape,))
            in_shape = tuple(self.inputs[in_][1:])
            if shape != in_shape:
                m_min, m_max = mean.min(), mean.max()
                if m_max > m_min:
                    normal = (mean - m_min) / (m_max - m_min)
                    mean = resize_image(normal.transpose((1, 2, 0)), in_shape[1:]).transpose(
                        (2, 0, 1)) * (m_max - m_min) + m_min
                else:  # constant (pycaffe divided 0 by 0 here and subtracted NaN)
                    mean = numpy.full(in_shape, m_min)
        self.mean[in_] = mean

    def set_input_scale(self, in_, scale):
        """Multiply the preprocessed input by ``scale`` last (after the mean subtraction)."""
        self._check_input(in_)
        self.input_scale[in_] = scale
