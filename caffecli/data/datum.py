"""Datum records <-> arrays (Caffe's CVMatToDatum / DecodeDatum* and the Datum layout).

A decoded Datum is a CxHxW array: uint8 for byte data and decoded images, float32 for
``float_data``. Encoded Datums are decoded natively unless force_color / force_gray is asked.
"""
import numpy

from ..errors import CaffeError
from ..proto import caffe_pb2
from . import image_io


def parse(value, what="<record>"):
    """A Datum from serialized bytes, or a CaffeError naming the record."""
    datum = caffe_pb2.Datum()
    try:
        datum.ParseFromString(value)
    except Exception:
        raise CaffeError("%s: not a serialized Datum" % what) from None
    return datum


def to_array(datum, force_color=False, force_gray=False, what="<record>"):
    """The Datum's pixels as a CxHxW array (decoding encoded images with OpenCV)."""
    if datum.encoded:
        if force_color and force_gray:
            raise CaffeError("cannot set both force_color and force_gray")
        mode = image_io.COLOR if force_color else image_io.GRAY if force_gray \
            else image_io.NATIVE
        return image_io.to_chw(image_io.decode(datum.data, mode, what=what))
    shape = (datum.channels, datum.height, datum.width)
    count = shape[0] * shape[1] * shape[2]
    if min(shape) <= 0:
        raise CaffeError("%s: Datum has shape %dx%dx%d (channels, height and width must be "
                         "positive)" % ((what,) + shape))
    if len(datum.data):
        if len(datum.data) != count:
            raise CaffeError("%s: Datum holds %d bytes but channels x height x width = %d"
                             % (what, len(datum.data), count))
        return numpy.frombuffer(datum.data, dtype=numpy.uint8).reshape(shape)
    if len(datum.float_data) != count:
        raise CaffeError("%s: Datum holds %d float_data values but channels x height x width "
                         "= %d" % (what, len(datum.float_data), count))
    return numpy.asarray(datum.float_data, dtype=numpy.float32).reshape(shape)


def from_image(img, label):
    """CVMatToDatum: an HxWxC uint8 image into a raw (unencoded) byte Datum."""
    chw = image_io.to_chw(img)
    datum = caffe_pb2.Datum(channels=chw.shape[0], height=chw.shape[1], width=chw.shape[2],
                            data=chw.tobytes(), label=int(label), encoded=False)
    return datum


def from_encoded(buf, label):
    """An encoded Datum holding image file bytes."""
    return caffe_pb2.Datum(data=bytes(buf), label=int(label), encoded=True)
