"""Which engine runs a layer on the device: Caffe's layer_factory.cpp. Convolution,
Deconvolution, Pooling, LRN, ReLU, Sigmoid, TanH and Softmax take ``engine: DEFAULT | CAFFE |
CUDNN``; DEFAULT means CUDNN where cuDNN can run the layer, as in a cuDNN build of Caffe.

CAFFE is caffecli's own device code (the layer's forward_gpu/backward_gpu, or its written-once
hooks). A CUDNN engine is a class registered here for a type (``@register("ReLU")``; the ones
caffecli has live in kernels/cudnn_engines.py); it is built with the layer and gets the layer's
device views: ``reshape`` (build per-shape plans there, see PlanCache), ``forward`` and
``backward``. Where cuDNN is missing, has no engine for the type, or does not take the
configuration (Caffe's rules here, or ``Unsupported`` raised by the engine's reshape when its
plan cannot be built), the layer runs on CAFFE; a layer that asked for CUDNN by name, or whose
plan failed, says so in one INFO line. An engine class with ``by_default = False`` runs only
where the prototxt names CUDNN. The cuDNN engines are on where the frontend is installed
(all golden cases agree on them on an H200); ``CAFFECLI_CUDNN=0`` turns them off.
"""
import importlib
import importlib.util

from . import backend, glog
from .proto import caffe_pb2
from .util import environ

CAFFE, CUDNN = "CAFFE", "CUDNN"
CUDNN_LRN_MAX_N = 16     # cuDNN's largest cross-channel LRN window
_PARAMS = {"Convolution": "convolution_param", "Deconvolution": "convolution_param",
           "Pooling": "pooling_param", "LRN": "lrn_param", "ReLU": "relu_param",
           "Sigmoid": "sigmoid_param", "TanH": "tanh_param", "Softmax": "softmax_param"}
_CUDNN = {}              # layer type -> CUDNN engine class
_MULTIPLE_TOPS = "cuDNN does not support multiple tops"


class Unsupported(Exception):
    """Raised by a CUDNN engine's reshape: cuDNN cannot run this shape or configuration."""


def register(layer_type):
    """Class decorator: the CUDNN engine of ``layer_type``."""
    def add(cls):
        _CUDNN[layer_type] = cls
        return cls
    return add


def requested(layer_param):
    """DEFAULT, CAFFE or CUDNN as the prototxt says; None for types without an engine field."""
    field = _PARAMS.get(layer_param.type)
    if field is None:
        return None
    sub = getattr(layer_param, field)
    return type(sub).Engine.Name(sub.engine)


def enabled():
    """Whether the cuDNN engines may run (unless CAFFECLI_CUDNN=0)."""
    return environ.get("CAFFECLI_CUDNN") != "0"


def cudnn_missing():
    """Why the process cannot use cuDNN (None when it can)."""
    if not enabled():
        return "caffecli's cuDNN engines are turned off (CAFFECLI_CUDNN=0)"
    if backend.is_standin():
        return "the stand-in device has no cuDNN"
    if importlib.util.find_spec("cudnn") is None:
        return "NVIDIA's cudnn frontend is not installed (pip install nvidia-cudnn-frontend)"
    try:
        importlib.import_module(".kernels.cudnn_engines", __package__)   # registers them
    except Exception as exc:   # the frontend found no cuDNN library, or another version's
        return "the cuDNN frontend failed to load (%s: %s)" % (type(exc).__name__, exc)
    return None


def cudnn_limit(layer_param, num_tops):
    """Why cuDNN cannot run this configuration (Caffe's rules), or None."""
    kind = layer_param.type
    if kind in ("Convolution", "Deconvolution"):
        if any(d > 1 for d in layer_param.convolution_param.dilation):
            return "cuDNN doesn't support the dilated %s" % kind.lower()
    elif kind == "Pooling":
        if num_tops > 1:
            return _MULTIPLE_TOPS
        if layer_param.pooling_param.pool == caffe_pb2.PoolingParameter.MAX:
            return "cuDNN max pooling would break the argmax of in-place layers after it"
    elif kind == "LRN":
        p = layer_param.lrn_param
        if p.norm_region == p.ACROSS_CHANNELS and p.local_size > CUDNN_LRN_MAX_N:
            return "local_size %d is above cuDNN's limit of %d" % (p.local_size, CUDNN_LRN_MAX_N)
    return None


def choose(layer_param, num_tops):
    """(engine name, why not CUDNN or None) for a layer; logs the one INFO line of a layer
    that asked for CUDNN and cannot have it, as Caffe does for pooling's multiple tops."""
    asked = requested(layer_param)
    if asked in (None, "CAFFE"):
        return CAFFE, None
    reason = cudnn_missing()
    if reason is None and layer_param.type not in _CUDNN:
        reason = "caffecli has no cuDNN %s engine" % layer_param.type
    if reason is None and asked == "DEFAULT" and not getattr(
            _CUDNN[layer_param.type], "by_default", True):
        return CAFFE, "DEFAULT runs %s on caffecli's own kernel" % layer_param.type
    if reason is None:
        reason = cudnn_limit(layer_param, num_tops)
    if reason is None:
        return CUDNN, None
    if reason == _MULTIPLE_TOPS:
        glog.info("layer_factory.multiple_tops", "cuDNN does not support multiple tops. Using "
                  "Caffe's own pooling layer.")
    elif asked == "CUDNN":
        glog.info("engines.fallback", "Layer %s: %s; using engine CAFFE (caffecli's own device "
                  "code)" % (layer_param.name, reason))
    return CAFFE, reason


def device_engine(layer, num_tops):
    """The CUDNN engine object for ``layer`` or None (CAFFE)."""
    engine, _ = choose(layer.layer_param, num_tops)
    return _CUDNN[layer.layer_param.type](layer) if engine == CUDNN else None


def fall_back(layer, reason):
    """The INFO line of a layer whose CUDNN engine could not take its shape: CAFFE runs it."""
    glog.info("engines.fallback", "Layer %s: cuDNN cannot run it (%s); using engine CAFFE "
              "(caffecli's own device code)" % (layer.name, reason))


class PlanCache:
    """Plans (cuDNN execution plans, workspaces) built once per key, e.g. the bottom shape; the
    ``limit`` most recently used are kept (a net fed images of many sizes does not keep a
    workspace per size; the shape in use is never the one dropped)."""

    def __init__(self, build, limit=8):
        self.build, self.plans, self.limit = build, {}, limit

    def get(self, key):
        plan = self.plans.pop(key, None)
        if plan is None:
            plan = self.build(key)
            while len(self.plans) >= self.limit:
                del self.plans[next(iter(self.plans))]
        self.plans[key] = plan          # now the most recently used
        return plan
