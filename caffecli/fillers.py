"""Parameter fillers (Caffe's filler.hpp): initial values for weights and biases.

Fan-in is count / shape[0] and fan-out is count / shape[1], as Caffe computes them. A fill draws
its generator's seed from the run's stream when it is asked for, and writes the values only when
the blob is first read: a net about to load its weights never computes the values they replace,
and the values do not depend on when they are first read.
"""
import math

import numpy

from . import context
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


def _norm(param, shape):
    fan_in, fan_out = _fans(shape)
    n = fan_in
    if param.variance_norm == param.AVERAGE:
        n = (fan_in + fan_out) / 2.0
    elif param.variance_norm == param.FAN_OUT:
        n = fan_out
    return n


def _uniform(rng, out, low, high):
    rng.random(out=out, dtype=out.dtype)
    out *= high - low
    out += low


def _normal(rng, out, mean, std):
    rng.standard_normal(out=out, dtype=out.dtype)
    out *= std
    out += mean


@filler("constant", random=False)
def constant(param, out, rng):
    out[...] = param.value


@filler("uniform")
def uniform(param, out, rng):
    _uniform(rng, out, param.min, param.max)


@filler("gaussian")
def gaussian(param, out, rng):
    _normal(rng, out, param.mean, param.std)
    if param.sparse >= 0:
        # Each output keeps on average `sparse` nonzero inputs (Caffe's sparse gaussian).
        prob = param.sparse * out.shape[0] / float(out.size)
        out *= rng.random(size=out.shape) < prob


@filler("positive_unitball")
def positive_unitball(param, out, rng):
    rng.random(out=out, dtype=out.dtype)
    flat = out.reshape(out.shape[0] if out.ndim else 1, -1)
    flat /= flat.sum(axis=1, keepdims=True)


@filler("xavier")
def xavier(param, out, rng):
    scale = numpy.sqrt(3.0 / _norm(param, out.shape))
    _uniform(rng, out, -scale, scale)


@filler("msra")
def msra(param, out, rng):
    _normal(rng, out, 0.0, numpy.sqrt(2.0 / _norm(param, out.shape)))


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
    if param.type == "bilinear" and param.sparse != -1:
        raise CaffeError("Sparsity not supported by this Filler (bilinear).")
    if param.type in ("xavier", "msra", "positive_unitball") and len(shape) == 0:
        raise CaffeError("%s filler needs a blob with at least one axis (it divides by the "
                         "first), got a 0-D blob" % param.type)
    if param.type == "gaussian" and param.sparse >= 0 and len(shape) < 2:
        raise CaffeError("sparse gaussian filler needs a blob of at least 2 axes")


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
    rng = numpy.random.default_rng(int(context.rng().integers(0, 2 ** 63))) if random else None
    shape = blob.shape

    def write(flat):
        out = flat.reshape(shape)
        if out.dtype in (numpy.float32, numpy.float64):
            fn(param, out, rng)
        else:
            values = numpy.empty(shape)
            fn(param, values, rng)
            out[...] = values

    blob.initialize_data(write)
    return blob
