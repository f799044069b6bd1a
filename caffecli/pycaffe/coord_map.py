"""caffe.coord_map: how coordinates move between the tops of a NetSpec (pycaffe's coord_map.py).

A map is (axis, scale a, shift b): output coordinate = a * input coordinate + b along the spatial
axes from ``axis`` on. Convolution, Pooling and Im2col scale by 1/stride and shift by
(pad - (kernel_extent - 1) / 2) / stride, Deconvolution does the inverse, Crop shifts by -offset,
pointwise layers pass through. ``crop(top_from, top_to)`` builds the Crop layer that aligns
``top_from`` with ``top_to`` (as FCN's nets do). Bad crops raise AssertionError, as in pycaffe.
"""
import numpy

from .net_spec import layers as L

PASS_THROUGH_LAYERS = ["AbsVal", "BatchNorm", "Bias", "BNLL", "Dropout", "Eltwise", "ELU", "Log",
                       "LRN", "Exp", "MVN", "Power", "ReLU", "PReLU", "Scale", "Sigmoid", "Split",
                       "TanH", "Threshold"]
_LEGACY_FIELDS = {"pad_h", "pad_w", "kernel_h", "kernel_w", "stride_h", "stride_w"}


class UndefinedMapException(Exception):
    """The layer has no coordinate mapping (InnerProduct, ...)."""


class AxisMismatchException(Exception):
    """Two maps act on different axes and cannot be composed."""


def _require(condition, message):
    if not condition:
        raise AssertionError(message)


def conv_params(fn):
    """(axis, stride, kernel extent, pad) of a Convolution/Deconvolution/Im2col/Pooling layer,
    as arrays (one value per spatial axis or one for all); the extent counts dilation."""
    params = fn.params.get("convolution_param", fn.params)
    _require(not _LEGACY_FIELDS & set(fn.params), "cropping does not support legacy _h/_w params")
    kernel = numpy.array(params["kernel_size"], ndmin=1)
    dilation = numpy.array(params.get("dilation", 1), ndmin=1)
    return (params.get("axis", 1), numpy.array(params.get("stride", 1), ndmin=1),
            (kernel - 1) * dilation + 1, numpy.array(params.get("pad", 0), ndmin=1))


def crop_params(fn):
    """(axis, offset) of a Crop layer, defaults axis 2 and offset 0."""
    params = fn.params.get("crop_param", fn.params)
    return params.get("axis", 2), numpy.array(params.get("offset", 0), ndmin=1)


def coord_map(fn):
    """The (axis, scale, shift) map of one layer; the identity is (None, 1, 0)."""
    if fn.type_name in ("Convolution", "Pooling", "Im2col"):
        axis, stride, extent, pad = conv_params(fn)
        return axis, 1 / stride, (pad - (extent - 1) / 2) / stride
    if fn.type_name == "Deconvolution":
        axis, stride, extent, pad = conv_params(fn)
        return axis, stride, (extent - 1) / 2 - pad
    if fn.type_name in PASS_THROUGH_LAYERS:
        return None, 1, 0
    if fn.type_name == "Crop":
        axis, offset = crop_params(fn)
        return axis - 1, 1, -offset
    raise UndefinedMapException(fn.type_name)


def compose(base_map, next_map):
    """``next_map`` after ``base_map``: scales multiply, the further shift is scaled by the
    base scale."""
    ax1, a1, b1 = base_map
    ax2, a2, b2 = next_map
    if ax1 is not None and ax2 is not None and ax1 != ax2:
        raise AxisMismatchException("axis %s vs %s" % (ax1, ax2))
    return (ax2 if ax1 is None else ax1), a1 * a2, a1 * b2 + b1


def inverse(coord_map):
    """The map back: 1 / scale and -shift / scale."""
    ax, a, b = coord_map
    return ax, 1 / a, -b / a


def _mappable_bottoms(top):
    """The inputs a top's coordinates come from: all of them, but only the first of a Crop."""
    return top.fn.inputs[:1] if top.fn.type_name == "Crop" else top.fn.inputs


def _step_back(top, maps):
    """Map each mappable bottom of ``top`` (its layer's map composed onto ``maps[top]``) and
    return those bottoms; none past a layer without a map."""
    try:
        step = coord_map(top.fn)
    except UndefinedMapException:
        return []
    bottoms = list(_mappable_bottoms(top))
    for bottom in bottoms:
        maps[bottom] = compose(maps[top], step)
    return bottoms


def coord_map_from_to(top_from, top_to):
    """The map taking ``top_from``'s coordinates to ``top_to``'s, through their nearest common
    ancestor; RuntimeError when only non-spatial layers connect them."""
    from_maps = {top_from: (None, 1, 0)}
    frontier = [top_from]
    while frontier:
        frontier.extend(_step_back(frontier.pop(), from_maps))
    to_maps = {top_to: (None, 1, 0)}
    frontier = [top_to]
    while frontier:
        current = frontier.pop(0)
        if current in from_maps:
            return compose(to_maps[current], inverse(from_maps[current]))
        frontier.extend(_step_back(current, to_maps))
    raise RuntimeError("Could not compute map between tops; are they connected by spatial "
                       "layers?")


def crop(top_from, top_to):
    """A Crop layer (L.Crop) cutting ``top_from`` to ``top_to``'s extent: same scale required,
    a non-negative whole-pixel offset."""
    ax, a, b = coord_map_from_to(top_from, top_to)
    _require(numpy.all(a == 1), "scale mismatch on crop (a = {})".format(a))
    _require(numpy.all(b <= 0), "cannot crop negative offset (b = {})".format(b))
    _require(numpy.all(numpy.round(b) == b), "cannot crop noninteger offset (b = {})".format(b))
    return L.Crop(top_from, top_to, crop_param=dict(axis=ax + 1,
                                                    offset=list(-numpy.round(b).astype(int))))
