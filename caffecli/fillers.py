"""Parameter fillers (Caffe's filler.hpp): initial values for weights and biases.

Fan-in is count / shape[0] and fan-out is count / shape[1], as Caffe computes them.
"""
import numpy

from . import context
from .errors import CaffeError

_FILLERS = {}


def filler(name):
    def deco(fn):
        _FILLERS[name] = fn
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


@filler("constant")
def constant(param, shape):
    return numpy.full(shape, param.value)


@filler("uniform")
def uniform(param, shape):
    return context.rng().uniform(param.min, param.max, size=shape)


@filler("gaussian")
def gaussian(param, shape):
    values = context.rng().normal(param.mean, param.std, size=shape)
    sparse = param.sparse
    if sparse >= 0:
        # Each output keeps on average `sparse` nonzero inputs (Caffe's sparse gaussian).
        if len(shape) < 2:
            raise CaffeError("sparse gaussian filler needs a blob of at least 2 axes")
        num_outputs = shape[0]
        count = int(numpy.prod(shape))
        prob = sparse * num_outputs / float(count)
        values *= context.rng().random(size=shape) < prob
    return values


@filler("positive_unitball")
def positive_unitball(param, shape):
    values = context.rng().random(size=shape)
    n = shape[0] if len(shape) else 1
    flat = values.reshape(n, -1)
    flat /= flat.sum(axis=1, keepdims=True)
    return flat.reshape(shape)


@filler("xavier")
def xavier(param, shape):
    scale = numpy.sqrt(3.0 / _norm(param, shape))
    return context.rng().uniform(-scale, scale, size=shape)


@filler("msra")
def msra(param, shape):
    std = numpy.sqrt(2.0 / _norm(param, shape))
    return context.rng().normal(0.0, std, size=shape)


@filler("bilinear")
def bilinear(param, shape):
    """Weights of bilinear upsampling for Deconvolution (square kernels, 4-D)."""
    if len(shape) != 4 or shape[2] != shape[3]:
        raise CaffeError("bilinear filler needs a 4-D blob with square kernels, got %s"
                         % (tuple(shape),))
    k = shape[3]
    f = numpy.ceil(k / 2.0)
    c = (2 * f - 1 - f % 2) / (2.0 * f)
    idx = numpy.arange(k)
    w1 = 1 - numpy.abs(idx / f - c)
    kernel = w1[:, None] * w1[None, :]
    return numpy.broadcast_to(kernel, shape).copy()


def fill(blob, param):
    """Fill ``blob.data`` per FillerParameter ``param`` (type defaults to constant)."""
    fn = _FILLERS.get(param.type)
    if fn is None:
        raise CaffeError("Unknown filler name: %s (known: %s)" % (param.type, ", ".join(sorted(_FILLERS))))
    if blob.count() == 0:
        return blob
    values = numpy.asarray(fn(param, tuple(blob.shape)), dtype=blob.dtype)
    blob.data[...] = values
    return blob
