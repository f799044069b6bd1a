"""caffe.io: pycaffe's array <-> protobuf conversions, image loading and resizing, Transformer.

Behaves as BVLC's python/caffe/io.py. Images load through Pillow and resize through numpy
(image_resize.py repeats scikit-image's numbers), so neither scikit-image nor scipy is needed.
"""
import numpy
from PIL import Image

from ..proto import caffe_pb2
from .image_resize import resize_image  # noqa: F401  (pycaffe's caffe.io.resize_image)
from .transformer import Transformer  # noqa: F401  (pycaffe's caffe.io.Transformer)


# ---- protobuf <-> arrays ---------------------------------------------------------------------
def blobproto_to_array(blob, return_diff=False):
    """A BlobProto's data (or diff) as an array of its shape: num/channels/height/width when any
    of them is set, else shape.dim (no dims: a 0-d array, so one value only). float64, as
    pycaffe's arrays are where protobuf hands repeated floats over as Python floats (newer
    runtimes hand over float32, which would change the arithmetic of scripts using them)."""
    data = numpy.array(blob.diff if return_diff else blob.data, dtype=numpy.float64)
    legacy = ("num", "channels", "height", "width")
    if any(blob.HasField(f) for f in legacy):
        return data.reshape([getattr(blob, f) for f in legacy])
    return data.reshape(blob.shape.dim)


def array_to_blobproto(arr, diff=None):
    """A BlobProto holding ``arr`` (shape in shape.dim) and, when given, ``diff`` of the same
    shape (not checked, as in pycaffe)."""
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.extend(arr.shape)
    blob.data.extend(numpy.asarray(arr, dtype=float).flat)
    if diff is not None:
        blob.diff.extend(numpy.asarray(diff, dtype=float).flat)
    return blob


def arraylist_to_blobprotovector_str(arraylist):
    """A serialized BlobProtoVector of the arrays in ``arraylist``."""
    vec = caffe_pb2.BlobProtoVector()
    vec.blobs.extend(array_to_blobproto(arr) for arr in arraylist)
    return vec.SerializeToString()


def blobprotovector_str_to_arraylist(data):
    """The arrays of a serialized BlobProtoVector."""
    vec = caffe_pb2.BlobProtoVector()
    vec.ParseFromString(data)
    return [blobproto_to_array(blob) for blob in vec.blobs]


def array_to_datum(arr, label=None):
    """A Datum of a C x H x W array: uint8 arrays as bytes in ``data``, others as float_data;
    ``label`` only when given."""
    if arr.ndim != 3:
        raise ValueError("Incorrect array shape.")
    datum = caffe_pb2.Datum()
    datum.channels, datum.height, datum.width = arr.shape
    if arr.dtype == numpy.uint8:
        datum.data = arr.tobytes()
    else:
        datum.float_data.extend(arr.astype(float).flat)
    if label is not None:
        datum.label = label
    return datum


def datum_to_array(datum):
    """A Datum's C x H x W array: uint8 from ``data`` when it has bytes, else float64 from
    float_data (the label is datum.label)."""
    shape = (datum.channels, datum.height, datum.width)
    if len(datum.data):
        return numpy.frombuffer(datum.data, dtype=numpy.uint8).reshape(shape).copy()
    return numpy.array(datum.float_data, dtype=float).reshape(shape)


# ---- images ----------------------------------------------------------------------------------
def load_image(filename, color=True):
    """An image file as float32 H x W x 3 RGB (``color``) or H x W x 1 intensity, in [0, 1], as
    pycaffe reads it through scikit-image: gray is repeated to three channels in colour, alpha is
    dropped (in colour) or composited on white (for intensity)."""
    with Image.open(filename) as im:
        if im.mode == "P":
            im = im.convert("RGBA" if "transparency" in im.info else "RGB")
        pixels = numpy.asarray(im)
    if pixels.dtype.kind in "ui":  # img_as_float: scaled by the integer type's maximum
        pixels = numpy.multiply(pixels, 1.0 / numpy.iinfo(pixels.dtype).max)
    img = (pixels if color else _intensity(pixels)).astype(numpy.float32)
    if img.ndim == 2:
        img = img[:, :, numpy.newaxis]
        if color:
            img = numpy.tile(img, (1, 1, 3))
    elif img.shape[2] == 4:
        img = img[:, :, :3]
    return img


def _intensity(pixels):
    """scikit-image's rgb2gray (0.2125 R + 0.7154 G + 0.0721 B), RGBA composited on white first;
    single-channel images as they are."""
    if pixels.ndim == 2:
        return pixels
    if pixels.shape[2] == 2:
        return pixels[:, :, 0]
    rgb = pixels[:, :, :3]
    if pixels.shape[2] == 4:
        alpha = pixels[:, :, 3:]
        rgb = numpy.clip((1 - alpha) + alpha * rgb, 0, 1)
    return rgb @ numpy.array([0.2125, 0.7154, 0.0721], dtype=rgb.dtype)


def oversample(images, crop_dims):
    """The four corner crops and the centre crop of each image, then the same five mirrored left
    to right: a (10 N) x h x w x K float32 array."""
    im_shape = numpy.array(images[0].shape)
    crop_dims = numpy.array(crop_dims)
    h, w = crop_dims[:2]
    corners = [(y, x) for y in (0, im_shape[0] - h) for x in (0, im_shape[1] - w)]
    centre = (numpy.tile(im_shape[:2] / 2.0, 2) + numpy.concatenate([-crop_dims / 2.0,
                                                                     crop_dims / 2.0]))
    boxes = numpy.array([(y, x, y + h, x + w) for y, x in corners] + [centre]).astype(int)
    crops = numpy.stack([numpy.asarray(im)[y0:y1, x0:x1, :]
                         for im in images for y0, x0, y1, x1 in boxes]).astype(numpy.float32)
    crops = crops.reshape((len(images), 5) + crops.shape[1:])
    return numpy.concatenate([crops, crops[:, :, :, ::-1, :]], axis=1).reshape(
        (10 * len(images),) + crops.shape[2:])
