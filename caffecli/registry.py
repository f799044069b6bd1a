"""The layer registry: maps a prototxt ``type`` string to a class or a creator function.

A built-in type lives in ``caffecli/layers/<module_name(type)>.py`` (``InnerProduct`` in
inner_product.py, ``LSTMUnit`` in lstm_unit.py), imported the first time a net asks for the type.
Register a class with ``@register_layer("MyType")``; a creator (a function taking the
LayerParameter and returning a layer, e.g. to pick an engine) with ``register_creator``. User
modules can do the same before building a net.
"""
import importlib
import re

import numpy

from . import glog
from .errors import CaffeError

_REGISTRY = {}
_WORD = re.compile(r"(?<=[a-z0-9])(?=[A-Z][a-z])|(?<=[A-Z]{2})(?=[A-Z][a-z])")


def module_name(type_name):
    """The file of a built-in type: words split at capitals, an acronym kept whole, lowered
    (ReLU -> relu, InnerProduct -> inner_product, HDF5Data -> hdf5_data)."""
    return _WORD.sub("_", type_name).lower()


def register_layer(type_name):
    """Class decorator: make ``type_name`` build this class."""
    def deco(cls):
        _add(type_name, cls)
        cls.type = type_name
        return cls
    return deco


def register_creator(type_name, creator):
    """Make ``type_name`` build layers with ``creator(layer_param)``."""
    _add(type_name, creator)
    return creator


def _add(type_name, creator):
    if type_name in _REGISTRY and _REGISTRY[type_name] is not creator:
        raise CaffeError("Layer type %s already registered." % type_name)
    _REGISTRY[type_name] = creator


def unregister_layer(type_name):
    _REGISTRY.pop(type_name, None)


def layer_types():
    """The registered type strings, sorted."""
    _load_builtin()
    return sorted(_REGISTRY)


def say_creating(name):
    """The line Caffe's layer factory logs for each layer it makes (inner layers too)."""
    glog.info("layer_factory.creating_layer", "Creating layer " + name)


def create_layer(param, dtype=numpy.float32, log=False):
    """Build the layer a LayerParameter names (its net computing in ``dtype``), or fail listing
    the known types; ``log``: say so first, as Caffe's factory does."""
    if log:
        say_creating(param.name)
    creator = _REGISTRY.get(param.type) or _load(param.type)
    if creator is None:
        raise CaffeError("Unknown layer type: %s (layer '%s'; known types: %s)"
                         % (param.type, param.name, ", ".join(layer_types())))
    layer = creator(param)
    layer.net_dtype = numpy.dtype(dtype)
    layer.net_log = log
    return layer


def _load(type_name):
    """Import the built-in module of ``type_name``; its creator, or None for an unknown type."""
    try:
        importlib.import_module("caffecli.layers." + module_name(type_name))
    except ModuleNotFoundError as exc:
        if not exc.name.startswith("caffecli.layers"):
            raise
    return _REGISTRY.get(type_name)


def _load_builtin():
    from . import layers  # the layers import this module: a cycle at import time
    layers.load_all()
