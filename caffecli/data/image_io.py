"""Image decode/resize with Caffe's OpenCV semantics (util/io.cpp).

Colour images come back in OpenCV's BGR channel order, a gray file read in colour is replicated
to three channels, and resizing is OpenCV's INTER_LINEAR, so pixels match Caffe exactly.
Images are HxWxC uint8 arrays (C = 1 for gray), as a cv::Mat.
"""
import os

import numpy

from ..errors import CaffeError

NATIVE, COLOR, GRAY = "native", "color", "gray"


def _cv2():
    try:
        import cv2
    except ImportError:
        raise CaffeError("image decoding needs OpenCV: pip install opencv-python-headless") \
            from None
    return cv2


def _flag(cv2, mode):
    return {NATIVE: cv2.IMREAD_UNCHANGED, COLOR: cv2.IMREAD_COLOR,
            GRAY: cv2.IMREAD_GRAYSCALE}[mode]


def _as_hwc(img, what):
    if img.dtype != numpy.uint8:
        raise CaffeError("%s: image data type must be unsigned byte, got %s" % (what, img.dtype))
    return img[:, :, None] if img.ndim == 2 else img


def decode(buf, mode=NATIVE, what="<encoded datum>"):
    """Decode encoded image bytes (cv::imdecode); ``what`` names the record in errors."""
    cv2 = _cv2()
    arr = numpy.frombuffer(buf, dtype=numpy.uint8)
    img = cv2.imdecode(arr, _flag(cv2, mode)) if arr.size else None
    if img is None:
        raise CaffeError("%s: could not decode image data" % what)
    return _as_hwc(img, what)


def resize(img, height, width):
    """OpenCV INTER_LINEAR resize to height x width (keeps the channel axis)."""
    cv2 = _cv2()
    out = cv2.resize(img, (int(width), int(height)), interpolation=cv2.INTER_LINEAR)
    return _as_hwc(out, "resize")


def read_image(path, height=0, width=0, is_color=True):
    """Caffe's ReadImageToCVMat: decode ``path`` in colour (BGR) or gray, then resize when
    both ``height`` and ``width`` are positive."""
    if not os.path.isfile(path):
        raise CaffeError("%s: could not open or find image file" % path)
    with open(path, "rb") as f:
        buf = f.read()
    img = decode(buf, COLOR if is_color else GRAY, what=path)
    if height > 0 and width > 0:
        img = resize(img, height, width)
    return img


def encode(img, ext):
    """cv::imencode to ``ext`` ('png', 'jpg', ...); returns bytes."""
    cv2 = _cv2()
    try:
        ok, buf = cv2.imencode("." + ext.lstrip("."), img)
    except cv2.error:   # no encoder for that extension (Caffe's tool aborts there)
        ok = False
    if not ok:
        raise CaffeError("could not encode image as %s" % ext)
    return buf.tobytes()


def to_chw(img):
    """HxWxC image -> CxHxW array (the Datum / blob layout)."""
    return numpy.ascontiguousarray(img.transpose(2, 0, 1))
