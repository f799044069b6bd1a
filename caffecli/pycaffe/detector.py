"""caffe.Detector: a Net that classifies windows of images, R-CNN style (pycaffe's detector.py).

Windows (ymin, xmin, ymax, xmax) are cropped, optionally with ``context_pad`` pixels of
surrounding context (out-of-image parts filled with the mean), warped to the net's input and
classified in batches. Selective-search proposals need the external
``selective_search_ijcv_with_python`` module (and MATLAB); without it a one-line error says so.
"""
import os

import numpy

from ..errors import CaffeError
from . import Net, TEST
from .classifier import configured_transformer
from .image_resize import resize_image
from .io import load_image


class Detector(Net):
    """Net(model_file, TEST, weights=pretrained_file) with preprocessing and window cropping."""

    def __init__(self, model_file, pretrained_file, mean=None, input_scale=None,
                 raw_scale=None, channel_swap=None, context_pad=None):
        Net.__init__(self, model_file, TEST, weights=pretrained_file)
        self.transformer = configured_transformer(self, mean, input_scale, raw_scale,
                                                  channel_swap)
        self.configure_crop(context_pad)

    def detect_windows(self, images_windows):
        """[{'window', 'prediction', 'filename'}] for every window of every
        (image filename, windows) pair, in order."""
        images_windows = [(name, list(windows)) for name, windows in images_windows]
        crops = []
        for name, windows in images_windows:
            image = load_image(name)
            crops.extend(self.crop(image, window) for window in windows)
        in_ = self.inputs[0]
        caffe_in = numpy.stack([self.transformer.preprocess(in_, c) for c in crops])
        predictions = self.forward_all(**{in_: caffe_in})[self.outputs[0]]
        pairs = [(name, window) for name, windows in images_windows for window in windows]
        return [{"window": window, "prediction": prediction, "filename": name}
                for (name, window), prediction in zip(pairs, predictions)]

    def detect_selective_search(self, image_fnames):
        """detect_windows over Selective Search proposals for each image."""
        try:
            import selective_search_ijcv_with_python as selective_search
        except ImportError:
            raise CaffeError("selective search proposals need the selective_search_ijcv_with_"
                             "python module (and MATLAB) on the Python path; give windows "
                             "instead (crop_mode list)") from None
        image_fnames = [os.path.abspath(f) for f in image_fnames]
        windows = selective_search.get_windows(image_fnames, cmd="selective_search_rcnn")
        return self.detect_windows(zip(image_fnames, windows))

    def crop(self, im, window):
        """The ``window`` (ymin, xmin, ymax, xmax) of H x W x K image ``im``; with context_pad,
        the window grown so the padding is context, warped to the crop size, parts outside the
        image left at the mean. Box coordinates are cast to int for slicing (pycaffe sliced with
        floats, which numpy no longer accepts)."""
        window = numpy.asarray(window)
        crop = im[int(window[0]):int(window[2]), int(window[1]):int(window[3])]
        if not self.context_pad:
            return crop
        crop_size = self.blobs[self.inputs[0]].data.shape[-1]  # assumes square
        scale = crop_size / (1.0 * crop_size - self.context_pad * 2)
        half_h = (window[2] - window[0] + 1) / 2.0
        half_w = (window[3] - window[1] + 1) / 2.0
        centre = (window[0] + half_h, window[1] + half_w)
        box = numpy.round(numpy.tile(centre, 2)
                          + scale * numpy.array((-half_h, -half_w, half_h, half_w)))
        scale_h = crop_size / (box[2] - box[0] + 1)
        scale_w = crop_size / (box[3] - box[1] + 1)
        pad_y = int(round(max(0, -box[0]) * scale_h))
        pad_x = int(round(max(0, -box[1]) * scale_w))
        im_h, im_w = im.shape[:2]
        box = numpy.clip(box, 0.0, [im_h, im_w, im_h, im_w])
        clip_h, clip_w = box[2] - box[0] + 1, box[3] - box[1] + 1
        if not (clip_h > 0 and clip_w > 0):
            raise CaffeError("window %s lies outside the %dx%d image" % (list(window), im_h, im_w))
        crop_h = min(int(round(clip_h * scale_h)), crop_size - pad_y)
        crop_w = min(int(round(clip_w * scale_w)), crop_size - pad_x)
        box = box.astype(int)
        context = resize_image(im[box[0]:box[2], box[1]:box[3]], (crop_h, crop_w))
        crop = numpy.ones(self.crop_dims, dtype=numpy.float32) * self.crop_mean
        crop[pad_y:pad_y + crop_h, pad_x:pad_x + crop_w] = context
        return crop

    def configure_crop(self, context_pad):
        """Set the crop size (the net input as H x W x K) and, with ``context_pad``, the mean in
        unprocessed image space that fills context outside the image."""
        in_ = self.inputs[0]
        tpose = self.transformer.transpose[in_]
        inv_tpose = [tpose[t] for t in tpose]
        self.crop_dims = numpy.array(self.blobs[in_].data.shape[1:])[inv_tpose]
        self.context_pad = context_pad
        if not self.context_pad:
            return
        mean = self.transformer.mean.get(in_)
        if mean is None:
            self.crop_mean = numpy.zeros(self.crop_dims, dtype=numpy.float32)
            return
        crop_mean = mean.copy().transpose(inv_tpose)
        channel_order = self.transformer.channel_swap.get(in_)
        if channel_order is not None:
            order = list(channel_order)
            crop_mean = crop_mean[:, :, [order.index(i) for i in range(crop_mean.shape[2])]]
        raw_scale = self.transformer.raw_scale.get(in_)
        if raw_scale is not None:
            crop_mean /= raw_scale
        self.crop_mean = crop_mean
