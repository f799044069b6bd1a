"""DataTransformer (Caffe's data_transformer.cpp): crop, mirror, mean subtraction, scaling.

Every value is ``(pixel - mean) * scale`` as Caffe computes it; crops are random in TRAIN and
centred in TEST, and the mean file is cropped at the same offset as the image. Randomness comes
from a private generator seeded from the run context's stream at construction (Caffe's
InitRand), so the prefetch thread never races the main thread's random stream.
"""
import numpy

from .. import context, glog
from ..blob import Blob
from ..errors import CaffeError
from ..kernels import jit, transform_jit
from ..proto import caffe_pb2
from ..proto.io import read_blob_proto
from . import workers


def load_mean_file(path):
    """A BlobProto mean as a float32 CxHxW array (its first image)."""
    proto = read_blob_proto(path)
    shape = Blob.proto_shape(proto)
    values = numpy.asarray(proto.double_data or proto.data, dtype=numpy.float32)
    if len(shape) == 0 or values.size == 0:
        raise CaffeError("%s: mean file holds no data" % path)
    dims = (1, 1, 1) + tuple(shape)
    chw = dims[-3:]
    per_image = chw[0] * chw[1] * chw[2]
    if values.size % per_image:
        raise CaffeError("%s: mean file has %d values for shape %s"
                         % (path, values.size, "x".join(map(str, shape))))
    return values[:per_image].reshape(chw)


class DataTransformer:
    """Applies a TransformationParameter to batches of CxHxW arrays."""

    def __init__(self, param=None, phase=caffe_pb2.TEST, what="DataTransformer"):
        self.param = param if param is not None else caffe_pb2.TransformationParameter()
        self.phase = phase
        self.what = what
        p = self.param
        self.crop_size = int(p.crop_size)
        self.scale = float(p.scale)
        self.mirror = bool(p.mirror)
        self.mean = None
        self.mean_values = [float(v) for v in p.mean_value]
        if p.HasField("mean_file") and self.mean_values:
            raise CaffeError("%s: cannot specify mean_file and mean_value at the same time"
                             % what)
        if p.HasField("mean_file"):
            self.mean_file = p.mean_file
            glog.info("data_transformer.mean_file", "Loading mean file from: " + p.mean_file)
            self.mean = load_mean_file(p.mean_file)
        self.rng = None
        self.init_rand()

    @property
    def needs_rand(self):
        return self.mirror or (self.phase == caffe_pb2.TRAIN and self.crop_size > 0)

    def init_rand(self):
        """Caffe's InitRand: a private stream seeded by a word of the rank's, when needed."""
        self.rng = context.rng().child() if self.needs_rand else None

    def get_state(self):
        return None if self.rng is None else self.rng.state

    def set_state(self, state):
        if state is not None and self.rng is not None:
            self.rng.state = state

    def _draws(self, n, crop_train):
        """Caffe's Rand draws for n items in order: per item the mirror coin (word % 2) when
        mirroring, then the crop's row and column words when cropping in TRAIN."""
        per_item = int(self.mirror) + 2 * crop_train
        return self.rng.words(n * per_item).reshape(n, per_item) if per_item else None

    # ---- shapes ---------------------------------------------------------------------------
    def infer_shape(self, chw_shape):
        """The transformed CxHxW shape of an input of ``chw_shape``."""
        c, h, w = (int(d) for d in chw_shape)
        if c <= 0:
            raise CaffeError("%s: input has %d channels" % (self.what, c))
        if self.crop_size:
            if h < self.crop_size or w < self.crop_size:
                raise CaffeError("%s: crop_size %d is larger than the input %dx%d"
                                 % (self.what, self.crop_size, h, w))
            return (c, self.crop_size, self.crop_size)
        return (c, h, w)

    def _check_mean(self, chw_shape):
        if self.mean is not None and tuple(self.mean.shape) != tuple(chw_shape):
            raise CaffeError("%s: mean file %s has shape %s but the data is %s"
                             % (self.what, self.mean_file, "x".join(map(str, self.mean.shape)),
                                "x".join(map(str, chw_shape))))
        n = len(self.mean_values)
        if n > 1 and n != chw_shape[0]:
            raise CaffeError("%s: specify either 1 mean_value or as many as channels (%d), "
                             "got %d" % (self.what, chw_shape[0], n))

    # ---- transform ------------------------------------------------------------------------
    def transform(self, batch, dtype=numpy.float32):
        """Transform an (N, C, H, W) array of raw values; returns (N, C, h, w) in ``dtype``."""
        batch = numpy.asarray(batch)
        n, c, h, w = batch.shape
        self._check_mean((c, h, w))
        oc, oh, ow = self.infer_shape((c, h, w))
        crop_train = bool(self.crop_size) and self.phase == caffe_pb2.TRAIN
        words = self._draws(n, crop_train)
        do_mirror = (words[:, 0] % 2).astype(bool) if self.mirror else numpy.zeros(n, bool)
        if crop_train:
            h_off = (words[:, -2] % (h - oh + 1)).astype(numpy.int64)
            w_off = (words[:, -1] % (w - ow + 1)).astype(numpy.int64)
        else:
            h_off = numpy.full(n, (h - oh) // 2, numpy.int64)
            w_off = numpy.full(n, (w - ow) // 2, numpy.int64)
        scale = numpy.asarray(self.scale, dtype=dtype)
        kind, mean = self._mean_in(dtype, c)
        out = numpy.empty((n, oc, oh, ow), dtype)
        if jit.usable(out, *(() if mean is None else (mean,))) and batch.dtype.kind in "uif":
            mean = numpy.zeros((1, 1, 1), dtype) if mean is None else mean
            workers.each_run(n, lambda a, b: transform_jit.transform(
                batch[a:b], h_off[a:b], w_off[a:b], do_mirror[a:b], mean, kind, scale[()],
                out[a:b]))
            return out
        if n and not do_mirror.any() and (h_off == h_off[0]).all() and (w_off == w_off[0]).all():
            window = (slice(None), slice(h_off[0], h_off[0] + oh), slice(w_off[0], w_off[0] + ow))
            _scaled(batch[(slice(None),) + window], _window(kind, mean, window, False), scale,
                    out)
            return out
        for i in range(n):   # each item its own crop and mirror: views, not a gathered index
            window = (slice(None), slice(h_off[i], h_off[i] + oh), slice(w_off[i], w_off[i] + ow))
            pixels = batch[i][window]
            _scaled(pixels[..., ::-1] if do_mirror[i] else pixels,
                    _window(kind, mean, window, do_mirror[i]), scale, out[i])
        return out

    def _mean_in(self, dtype, channels):
        """What each value loses before scaling, in ``dtype``, and its kind (transform_jit's):
        PIXEL_MEAN, the mean file's CxHxW image; CHANNEL_MEAN, the mean values as (C, 1, 1);
        NO_MEAN, None."""
        if self.mean is not None:
            return transform_jit.PIXEL_MEAN, self.mean.astype(dtype, copy=False)
        if self.mean_values:
            values = numpy.asarray(self.mean_values, dtype=dtype)
            if values.size == 1:
                values = numpy.repeat(values, channels)
            return transform_jit.CHANNEL_MEAN, values[:, None, None]
        return transform_jit.NO_MEAN, None


def _window(kind, mean, window, mirror):
    """A mean file's values under an item's crop, mirrored with it (Caffe subtracts the mean at
    the pixel's source position); else ``mean`` itself (per-channel values, or None)."""
    if kind != transform_jit.PIXEL_MEAN:
        return mean
    return mean[window][..., ::-1] if mirror else mean[window]


def _scaled(pixels, mean, scale, out):
    """out = (pixels - mean) * scale, each operand first in out's dtype (Caffe's order)."""
    if mean is None:
        numpy.multiply(pixels, scale, out=out, dtype=out.dtype)
        return
    numpy.subtract(pixels, mean, out=out, dtype=out.dtype)
    numpy.multiply(out, scale, out=out)
