"""caffe.io.resize_image (numpy only) against pycaffe's recipe (scikit-image / scipy), by hand.

Needs scikit-image and scipy (``pip install scikit-image scipy``); run
``python bench/resize_vs_skimage.py``. Prints the largest |difference| over up- and down-sizing
cases on random float32 images with values in [0, 255], per interpolation order, and OpenCV's
INTER_LINEAR against pycaffe for comparison.
"""
import cv2
import numpy
from scipy.ndimage import zoom
from skimage.transform import resize

from caffecli.pycaffe.image_resize import resize_image

CASES = [((32, 48), (64, 96)), ((64, 96), (32, 48)), ((100, 100), (227, 227)),
         ((256, 256), (227, 227)), ((500, 375), (256, 256)), ((37, 23), (11, 70)),
         ((17, 29), (17, 29)), ((300, 40), (7, 300))]


def pycaffe_resize(im, new_dims, order):
    """What BVLC's caffe.io.resize_image computes, written out with its libraries."""
    if im.shape[-1] in (1, 3):
        lo, hi = im.min(), im.max()
        scaled = resize((im - lo) / (hi - lo), new_dims, order=order, mode="constant")
        return (scaled * (hi - lo) + lo).astype(numpy.float32)
    factors = tuple(numpy.array(new_dims, float) / numpy.array(im.shape[:2]))
    return zoom(im, factors + (1,), order=order).astype(numpy.float32)


def main():
    rng = numpy.random.RandomState(0)
    worst = {}
    for (h, w), new in CASES:
        for k in (1, 3, 5):
            im = (rng.rand(h, w, k) * 255).astype(numpy.float32)
            for order in (0, 1):
                ref = pycaffe_resize(im, new, order)
                ours = resize_image(im, new, order)
                assert ours.shape == ref.shape and ours.dtype == ref.dtype
                key = "order %d, %s channels" % (order, "1/3" if k in (1, 3) else "other")
                worst[key] = max(worst.get(key, 0.0), float(numpy.abs(ours - ref).max()))
            if k == 3:
                cv = cv2.resize(im, (new[1], new[0]), interpolation=cv2.INTER_LINEAR)
                diff = float(numpy.abs(cv - pycaffe_resize(im, new, 1)).max())
                worst["opencv INTER_LINEAR"] = max(worst.get("opencv INTER_LINEAR", 0.0), diff)
    for key, value in sorted(worst.items()):
        print("%-24s max |difference| vs pycaffe (values 0..255): %.3g" % (key, value))


if __name__ == "__main__":
    main()
