"""caffe.Classifier: a Net that classifies images (pycaffe's classifier.py).

Images are resized to ``image_dims``, cropped to the net's input (the centre, or the four corners
and centre plus their mirrors, averaged), preprocessed by a caffe.io.Transformer and run in
batches; ``predict`` returns one row of class probabilities per image.
"""
import numpy

from . import Net, TEST
from .image_resize import resize_image
from .io import oversample as oversample_crops
from .transformer import Transformer


def configured_transformer(net, mean, input_scale, raw_scale, channel_swap):
    """A Transformer for ``net``'s first input: H x W x K images in, the given preprocessing."""
    in_ = net.inputs[0]
    transformer = Transformer({in_: net.blobs[in_].data.shape})
    transformer.set_transpose(in_, (2, 0, 1))
    for setter, value in ((transformer.set_mean, mean),
                          (transformer.set_input_scale, input_scale),
                          (transformer.set_raw_scale, raw_scale),
                          (transformer.set_channel_swap, channel_swap)):
        if value is not None:
            setter(in_, value)
    return transformer


class Classifier(Net):
    """Net(model_file, TEST, weights=pretrained_file) with image preprocessing; ``image_dims``
    is the size images are scaled to before cropping (default: the net's input size)."""

    def __init__(self, model_file, pretrained_file, image_dims=None, mean=None,
                 input_scale=None, raw_scale=None, channel_swap=None):
        Net.__init__(self, model_file, TEST, weights=pretrained_file)
        self.transformer = configured_transformer(self, mean, input_scale, raw_scale,
                                                  channel_swap)
        self.crop_dims = numpy.array(self.blobs[self.inputs[0]].data.shape[2:])
        if not image_dims:
            image_dims = self.crop_dims
        self.image_dims = image_dims

    def predict(self, inputs, oversample=True):
        """(N x classes) probabilities for N H x W x K images: averaged over the ten
        oversampled crops, or from the centre crop alone with ``oversample=False``."""
        images = numpy.zeros((len(inputs), self.image_dims[0], self.image_dims[1],
                              inputs[0].shape[2]), dtype=numpy.float32)
        for ix, image in enumerate(inputs):
            images[ix] = resize_image(image, self.image_dims)
        if oversample:
            images = oversample_crops(images, self.crop_dims)
        else:
            centre = numpy.tile(numpy.array(self.image_dims) / 2.0, 2)
            box = (centre + numpy.concatenate([-self.crop_dims / 2.0,
                                               self.crop_dims / 2.0])).astype(int)
            images = images[:, box[0]:box[2], box[1]:box[3], :]
        in_ = self.inputs[0]
        caffe_in = numpy.stack([self.transformer.preprocess(in_, im) for im in images])
        predictions = self.forward_all(**{in_: caffe_in})[self.outputs[0]]
        if oversample:
            predictions = predictions.reshape((len(predictions) // 10, 10, -1)).mean(1)
        return predictions

