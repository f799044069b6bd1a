"""Parameter fillers (Caffe's filler.hpp): initial values for weights and biases.

Fan-in is count / shape[0] and fan-out is count / shape[1], as Caffe computes them, and the
values come from caffe_rng with Caffe's arithmetic. With a seeded stream a fill draws Caffe's
numbers when it is asked for, so a seeded net starts from Caffe's weights. Unseeded, it takes a
stream of its own (one word of the run's) and writes only when the blob is first read: a net
about to load its weights never computes the values they replace.
"""
import math

import numpy

from . import caffe_rng, context
from .errors import CaffeError

_FILLERS = {}


def filler(name, random=True):
    """Register a filler writing values into ``out`` (the blob's shape) from a generator."""
    def deco(fn):
        _FILLERS[name] = (fn, random)
        return fn
    return deco


def _fans(shape):
    count = int(numpy.prod(shape)) if len(shape) else 1
    fan_in = count // shape[0] if len(shape) > 0 and shape[0] else count
    fan_out = count // shape[1] if len(shape) > 1 and shape[1] else count
    return fan_in, fan_out


def _norm(param, shape, t):
    """Caffe's n of the variance norm, in the blob's precision ``t``."""
    fan_in, fan_out = _fans(shape)
    if param.variance_norm == param.AVERAGE:
        return t(fan_in + fan_out) / t(2)
    return t(fan_out if param.variance_norm == param.FAN_OUT else fan_in)


def _set(out, values):
    out[...] = values.reshape(out.shape)


@filler("constant", random=False)
def constant(param, out, rng):
    out[...] = param.value


@filler("uniform")
def uniform(param, out, rng):
    _set(out, rng.uniform(out.size, param.min, param.max, out.dtype))


@filler("gaussian")
def gaussian(param, out, rng):
    t = out.dtype.type
    _set(out, rng.gaussian(out.size, param.mean, param.std, out.dtype))
    if param.sparse >= 0:
        # each input keeps on average `sparse` of the outputs' weights: p = sparse / shape[0]
        p = t(param.sparse) / t(out.shape[0])
        out *= rng.bernoulli(out.size, p, out.dtype).reshape(out.shape)


@filler("positive_unitball")
def positive_unitball(param, out, rng):
    _set(out, rng.uniform(out.size, 0, 1, out.dtype))
    flat = out.reshape(out.shape[0], -1)
    flat /= numpy.cumsum(flat, axis=1)[:, -1:]   # each row's sum, added in order as Caffe does


@filler("xavier")
def xavier(param, out, rng):
    t = out.dtype.type
    scale = numpy.sqrt(t(3) / _norm(param, out.shape, t))
    _set(out, rng.uniform(out.size, -scale, scale, out.dtype))


@filler("msra")
def msra(param, out, rng):
    t = out.dtype.type
    _set(out, rng.gaussian(out.size, 0, numpy.sqrt(t(2) / _norm(param, out.shape, t)),
                           out.dtype))


@filler("bilinear", random=False)
def bilinear(param, out, rng):
    """Weights of bilinear upsampling for Deconvolution (square kernels, 4-D)."""
    k, dt = out.shape[3], out.dtype.type
    f = math.ceil(k / 2.0)
    c = dt((k - 1) / (2.0 * f))     # the centre as Caffe has had it since 2017 (filler.hpp)
    w1 = 1 - numpy.abs(numpy.arange(k, dtype=dt) / dt(f) - c)
    out[...] = w1[:, None] * w1[None, :]


def _check(param, shape):
    """Shape rules of the fillers, checked when the fill is asked for."""
    if param.type == "bilinear" and (len(shape) != 4 or shape[2] != shape[3]):
        raise CaffeError("bilinear filler needs a 4-D blob with square kernels, got %s"
                         % (tuple(shape),))
    if param.type != "gaussian" and param.sparse != -1:
        raise CaffeError("Sparsity not supported by this Filler (%s): sparse is %d"
                         % (param.type, param.sparse))
    if param.type == "gaussian" and param.sparse < -1:
        raise CaffeError("gaussian filler: sparse must be -1 (off) or at least 0, got %d"
                         % param.sparse)
    if param.type == "gaussian" and not param.std > 0:    # caffe_rng_gaussian's check
        raise CaffeError("gaussian filler: std must be positive, got %g" % param.std)
    if param.type == "uniform" and not param.min <= param.max:   # caffe_rng_uniform's
        raise CaffeError("uniform filler: min %g is above max %g" % (param.min, param.max))
    if param.type in ("xavier", "msra", "positive_unitball") and len(shape) == 0:
        raise CaffeError("%s filler needs a blob with at least one axis (it divides by the "
                         "first), got a 0-D blob" % param.type)
    if param.type == "gaussian" and param.sparse >= 0 and len(shape) < 2:
        raise CaffeError("sparse gaussian filler needs a blob of at least 2 axes")
    if param.type == "gaussian" and param.sparse > 0 and param.sparse > shape[0]:
        raise CaffeError("sparse gaussian filler: sparse %d exceeds the %d outputs (the "
                         "probability sparse / outputs must be at most 1)"
                         % (param.sparse, shape[0]))


def fill(blob, param):
    """Fill ``blob``'s data per FillerParameter ``param`` (type defaults to constant): now if
    the blob's data is in use, else when it is first read (unless it is overwritten first)."""
    entry = _FILLERS.get(param.type)
    if entry is None:
        raise CaffeError("Unknown filler name: %s (known: %s)"
                         % (param.type, ", ".join(sorted(_FILLERS))))
    fn, random = entry
    _check(param, blob.shape)
    if blob.count() == 0:
        return blob
    shape = blob.shape

    def write(flat, rng):
        out = flat.reshape(shape)
        if out.dtype in (numpy.float32, numpy.float64):
            fn(param, out, rng)
        else:
            values = numpy.empty(shape)
            fn(param, values, rng)
            out[...] = values

    if random and context.rng_seeded():
        # Caffe's numbers, drawn now: later draws (other fills, dropout, crops) follow them
        drawn = numpy.empty(blob.count(), blob.dtype)
        write(drawn, context.rng())

        def copy(flat):
            flat[...] = drawn
        blob.initialize_data(copy)
    else:
        # a word of the run's stream now; the fill's own stream only if the blob is read
        seed = context.rng().rand() if random else None
        blob.initialize_data(lambda flat: write(
            flat, caffe_rng.Stream(seed) if seed is not None else None))
    return blob
