"""The Python layer: ``type: "Python"`` runs a user class with pycaffe's layer interface.

python_param { module layer param_str } names a module (found on sys.path or in the current
directory) and a class in it. As in pycaffe the class is built with the LayerParameter, gets
``param_str`` and ``phase`` (0 TRAIN, 1 TEST), and is called ``setup(bottom, top)``,
``reshape(bottom, top)``, ``forward(bottom, top)`` and ``backward(top, propagate_down,
bottom)`` with lists of blobs whose ``data``/``diff`` are numpy arrays. ``self.blobs`` holds
the layer's parameters; ``self.blobs.add_blob(*shape)`` adds one.
"""
import importlib
import os
import sys

import numpy

from ..blob import Blob
from ..errors import CaffeError
from ..layer import Layer as _EngineLayer
from ..pycaffe.net_mixin import PyBlob
from ..registry import register_layer


class BlobVec:
    """pycaffe's BlobVec over a layer's parameter blobs, with ``add_blob(*shape)``."""

    def __init__(self, owner):
        self._owner = owner

    def add_blob(self, *shape, **kwargs):
        if kwargs:
            raise TypeError("BlobVec.add_blob takes no kwargs")
        if len(shape) == 1 and not isinstance(shape[0], (int, numpy.integer)):
            shape = tuple(shape[0])
        self._owner.blobs.append(Blob(tuple(int(d) for d in shape), dtype=self._owner.py_dtype))

    def __len__(self):
        return len(self._owner.blobs)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [PyBlob(b) for b in self._owner.blobs[index]]
        return PyBlob(self._owner.blobs[index])

    def __iter__(self):
        return (PyBlob(b) for b in self._owner.blobs)


class Layer:
    """Base class of Python layers (pycaffe's ``caffe.Layer``): override the four methods."""

    def __init__(self, param=None):
        self.layer_param = param

    @property
    def type(self):
        return "Python"

    def setup(self, bottom, top):
        pass

    def reshape(self, bottom, top):
        raise NotImplementedError("%s must define reshape(bottom, top)" % type(self).__name__)

    def forward(self, bottom, top):
        raise NotImplementedError("%s must define forward(bottom, top)" % type(self).__name__)

    def backward(self, top, propagate_down, bottom):
        raise NotImplementedError("%s must define backward(top, propagate_down, bottom)"
                                  % type(self).__name__)


def import_layer_class(module_name, class_name, where):
    """The class ``module_name.class_name``; the current directory is searched after sys.path."""
    if not module_name:
        raise CaffeError("%s: python_param.module is not set" % where)
    if not class_name:
        raise CaffeError("%s: python_param.layer is not set" % where)
    cwd = os.getcwd()
    added = cwd not in sys.path and "" not in sys.path
    if added:
        sys.path.append(cwd)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise CaffeError("%s: cannot import Python layer module '%s': %s"
                         % (where, module_name, exc)) from exc
    except Exception as exc:
        raise CaffeError("%s: importing Python layer module '%s' failed: %s: %s"
                         % (where, module_name, type(exc).__name__, exc)) from exc
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
    cls = getattr(module, class_name, None)
    if cls is None:
        raise CaffeError("%s: Python layer module '%s' (%s) has no class '%s'"
                         % (where, module_name, getattr(module, "__file__", "?"), class_name))
    return cls


@register_layer("Python")
class PythonLayer(_EngineLayer):
    """Adapter from the engine's Layer contract to a user's pycaffe-style layer object."""

    def __init__(self, param):
        super().__init__(param)
        pp = param.python_param
        where = "Layer %s (Python)" % param.name
        cls = import_layer_class(pp.module, pp.layer, where)
        self.py_dtype = numpy.float32
        self.user = self._call("create %s.%s" % (pp.module, pp.layer), cls, param)
        self._bind("blobs", BlobVec(self))

    def _bind(self, name, value):
        try:
            setattr(self.user, name, value)
        except AttributeError as exc:
            raise self.error("cannot set '%s' on the Python layer object: %s" % (name, exc))

    def _call(self, what, fn, *args):
        try:
            return fn(*args)
        except CaffeError:
            raise
        except Exception as exc:
            pp = self.layer_param.python_param
            raise self.error("%s.%s %s raised %s: %s" % (pp.module, pp.layer, what,
                                                          type(exc).__name__, exc)) from exc

    def _method(self, name):
        fn = getattr(self.user, name, None)
        if fn is None:
            pp = self.layer_param.python_param
            raise self.error("%s.%s has no method %s()" % (pp.module, pp.layer, name))
        return fn

    def layer_setup(self, bottom, top):
        self.py_dtype = bottom[0].dtype if bottom else getattr(self, "net_dtype", numpy.float32)
        self._bind("param_str", self.layer_param.python_param.param_str)
        self._bind("phase", int(self.phase))
        self._call("setup", self._method("setup"), self._wrap(bottom), self._wrap(top))

    def reshape(self, bottom, top):
        self._call("reshape", self._method("reshape"), self._wrap(bottom), self._wrap(top))

    def forward_impl(self, bottom, top):
        self._call("forward", self._method("forward"), self._wrap(bottom), self._wrap(top))

    def backward_impl(self, top, propagate_down, bottom):
        self._call("backward", self._method("backward"), self._wrap(top),
                   [bool(p) for p in propagate_down], self._wrap(bottom))

    @staticmethod
    def _wrap(blobs):
        return [PyBlob(b) for b in blobs]
