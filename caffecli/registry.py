"""The layer registry: maps a prototxt ``type`` string to a class or a creator function.

Register a class with ``@register_layer("MyType")``; register a creator (a function taking the
LayerParameter and returning a layer, e.g. to pick an engine) with
``register_creator("MyType", fn)``. User modules can do the same before building a net.
"""
import numpy

from .errors import CaffeError

_REGISTRY = {}


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


def create_layer(param, dtype=numpy.float32):
    """Build the layer a LayerParameter names (its net computing in ``dtype``), or fail listing
    the known types."""
    _load_builtin()
    creator = _REGISTRY.get(param.type)
    if creator is None:
        raise CaffeError("Unknown layer type: %s (layer '%s'; known types: %s)"
                         % (param.type, param.name, ", ".join(sorted(_REGISTRY))))
    layer = creator(param)
    layer.net_dtype = numpy.dtype(dtype)
    return layer


def _load_builtin():
    from . import layers  # noqa: F401  (importing registers every built-in family)
