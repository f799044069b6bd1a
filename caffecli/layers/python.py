"""The Python layer: ``type: "Python"`` runs a user's subclass of caffe.Layer.

python_param { module layer param_str } names a module (found on sys.path or in the current
directory) and a class in it deriving from caffe.Layer (the engine's Layer). As in pycaffe the
class is built with the LayerParameter and gets ``param_str`` and ``phase`` (0 TRAIN, 1 TEST);
its setup/reshape/forward/backward run on host copies of the blobs (numpy arrays), and
``self.blobs.add_blob(*shape)`` adds a parameter blob.
"""
import importlib
import os
import sys

from ..errors import CaffeError
from ..layer import Layer
from ..registry import register_creator


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


def create_python_layer(param):
    """The user's layer object, ready to be set up: it runs on the host with its errors named."""
    pp = param.python_param
    where = "Layer %s (Python)" % param.name
    cls = import_layer_class(pp.module, pp.layer, where)
    if not (isinstance(cls, type) and issubclass(cls, Layer)):
        raise CaffeError("%s: %s.%s must be a class deriving from caffe.Layer"
                         % (where, pp.module, pp.layer))
    try:
        layer = cls(param)
    except Exception as exc:
        raise CaffeError("%s: creating %s.%s raised %s: %s"
                         % (where, pp.module, pp.layer, type(exc).__name__, exc)) from exc
    layer.type = "Python"
    layer.device_code = False      # it computes with numpy,
    layer.hands_blobs = True       # on Blobs whose data/diff are pycaffe's (mutable) host arrays
    layer.param_str = pp.param_str
    return layer


register_creator("Python", create_python_layer)
