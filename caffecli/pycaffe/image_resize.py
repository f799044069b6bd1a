"""pycaffe's image resizing (caffe.io.resize_image): orders 0 and 1 sampled in numpy after
scipy.ndimage's anti-aliasing, the spline orders wholly through scipy.ndimage, as scikit-image
itself does (its zoom took longer for orders 0 and 1 on most images measured: upsizing 100x80
to 300x200 linearly 5.8 against 0.7 ms).

pycaffe resizes 1- and 3-channel images with ``skimage.transform.resize(order=1,
mode='constant')`` and others with ``scipy.ndimage.zoom``. ``resize_like_skimage`` repeats the
former step by step (Gaussian anti-aliasing on the axes being shrunk, sigma = (factor - 1) / 2,
kernel radius int(4 sigma + 0.5), zero padding; then half-pixel-centred linear interpolation with
zero outside the image; results cast to the input's float type after each pass, as scipy does);
``zoom_like_ndimage`` repeats the latter (corner-aligned, zero outside [0, n - 1]). Measured by
bench/resize_vs_skimage.py against scikit-image 0.26 / scipy 1.17 on random float32 images with
values 0..255, up- and down-sizing, 1, 3 and 5 channels: linear differs by at most 1.5e-5 (one
float32 ulp at 255, from summation order), nearest neighbour not at all. OpenCV's INTER_LINEAR,
the core dependency that could have done it, differs by up to 187 of 255 on the same images (no
anti-aliasing, replicated borders), so it is not used.
"""
import numpy

_TRUNCATE = 4.0


def _float_type(dtype):
    return dtype if dtype in (numpy.float32, numpy.float64) else numpy.dtype(numpy.float64)


def _gaussian_1d(image, sigma, axis):
    """scipy.ndimage.gaussian_filter1d(mode='constant', cval=0) along ``axis``, as scikit-image's
    anti-aliasing calls it (float64 inside, the image's type out): 2-9x as fast as the numpy
    taps it replaced, the same float32 values and float64 within 4.4e-16."""
    from scipy import ndimage   # a dependency; loaded when an image is first shrunk
    return ndimage.gaussian_filter1d(image, sigma, axis, mode="constant", cval=0.0,
                                     truncate=_TRUNCATE)


def _sample_axis(image, coords, axis, order, grid):
    """Sample ``image`` (float64) along ``axis`` at fractional ``coords``, linearly (order 1) or
    at the nearest index (order 0, halves rounded up) with zero outside the image: with ``grid``
    (ndimage's 'grid-constant') taps outside the axis count as zero, without it (ndimage's
    'constant') any point outside [0, n - 1] is zero, however close."""
    n = image.shape[axis]
    shape = [1] * image.ndim
    shape[axis] = len(coords)
    if order == 0:
        index = numpy.floor(coords + 0.5).astype(numpy.int64)
        taps = [(index, numpy.ones(len(coords)))]
    else:
        lower = numpy.floor(coords).astype(numpy.int64)
        frac = coords - lower
        taps = [(lower, 1.0 - frac), (lower + 1, frac)]
    inside = numpy.ones(len(coords), bool) if grid else (coords >= 0) & (coords <= n - 1)
    out = 0.0
    for index, weight in taps:
        weight = numpy.where(inside & (index >= 0) & (index < n), weight, 0.0)
        taken = numpy.take(image, numpy.clip(index, 0, n - 1), axis=axis)
        out = out + taken * weight.reshape(shape)
    return out


def resize_like_skimage(image, new_dims, order=1):
    """skimage.transform.resize(image, new_dims, order, mode='constant') for an H x W x K float
    image in [0, 1]: anti-aliased when shrinking, clipped to the input's range."""
    dtype = _float_type(image.dtype)
    out = image.astype(dtype, copy=False)
    in_hw = numpy.array(image.shape[:2], dtype=numpy.float64)
    factors = in_hw / numpy.array(new_dims, dtype=numpy.float64)
    for axis, sigma in enumerate(numpy.maximum(0.0, (factors - 1) / 2)):
        if sigma > 1e-15:  # only the axes being shrunk
            out = _gaussian_1d(out, sigma, axis)
    sampled = out.astype(numpy.float64)
    for axis, (size, factor) in enumerate(zip(new_dims, factors)):
        coords = (numpy.arange(size, dtype=numpy.float64) + 0.5) * factor - 0.5
        sampled = _sample_axis(sampled, coords, axis, order, grid=True)
    return numpy.clip(sampled.astype(dtype), image.min(), image.max())


def zoom_like_ndimage(image, new_dims, order=1):
    """scipy.ndimage.zoom(image, (h'/h, w'/w, 1), order): corner-aligned resampling of the two
    leading axes, any number of channels, in the image's own float type."""
    dtype = _float_type(image.dtype)
    sampled = image.astype(numpy.float64)
    for axis, size in enumerate(new_dims):
        n = image.shape[axis]
        step = (n - 1) / (size - 1) if size > 1 else 1.0
        coords = numpy.arange(size, dtype=numpy.float64) * step
        sampled = _sample_axis(sampled, coords, axis, order, grid=False)
    return sampled.astype(dtype)


def spline_resize(image, new_dims, order, like_skimage):
    """Orders 2 to 5 through scipy.ndimage, as pycaffe's libraries do: like skimage's resize
    (Gaussian anti-aliasing of shrunk axes, then zoom with grid_mode and zero outside, clipped
    to the input's range) or like scipy.ndimage.zoom itself (corner to corner)."""
    from scipy import ndimage   # a dependency; loaded only for these orders
    image = image.astype(_float_type(image.dtype), copy=False)
    shape = tuple(new_dims) + image.shape[2:]
    factors = numpy.array(image.shape, dtype=numpy.float64) / numpy.array(shape)
    if not like_skimage:
        return ndimage.zoom(image, 1 / factors, order=order)
    filtered = image
    if (factors > 1).any():
        filtered = ndimage.gaussian_filter(image, numpy.maximum(0.0, (factors - 1) / 2),
                                           cval=0.0, mode="constant")
    out = ndimage.zoom(filtered, 1 / factors, order=order, mode="grid-constant", cval=0.0,
                       grid_mode=True)
    return numpy.clip(out, image.min(), image.max())


def resize_image(im, new_dims, interp_order=1):
    """Resize an H x W x K image to ``new_dims`` (height, width) as pycaffe does: 1- and 3-channel
    images are scaled to [0, 1], resized like scikit-image (anti-aliased, zero beyond the border)
    and scaled back; a constant image stays constant; other channel counts are resampled corner
    to corner like scipy.ndimage.zoom. float32 out; interp_order 0 to 5 (orders 0 and 1 in
    numpy here, splines through scipy.ndimage)."""
    if interp_order not in range(6):
        raise ValueError("interp_order must be 0 to 5 (a spline order), got %r" % (interp_order,))
    spline = interp_order >= 2
    new_dims = tuple(int(d) for d in new_dims)
    if im.shape[-1] in (1, 3):
        im_min, im_max = im.min(), im.max()
        if not im_max > im_min:
            return numpy.full(new_dims + (im.shape[-1],), im_min, dtype=numpy.float32)
        im_std = (im - im_min) / (im_max - im_min)
        resized = (spline_resize(im_std, new_dims, interp_order, True) if spline else
                   resize_like_skimage(im_std, new_dims, interp_order))
        resized = resized * (im_max - im_min) + im_min
    else:
        resized = (spline_resize(im, new_dims, interp_order, False) if spline else
                   zoom_like_ndimage(im, new_dims, interp_order))
    return resized.astype(numpy.float32)
