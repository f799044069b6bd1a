"""caffecli: BVLC Caffe's command-line tool and pycaffe API in Python (numpy / cupy).

``import caffecli as caffe`` gives pycaffe's surface: Net, TRAIN/TEST, get_solver, set_mode_*.
"""
__version__ = "0.1.0"

from .proto.caffe_pb2 import TRAIN, TEST  # noqa: F401,E402
from .api import *  # noqa: F401,F403,E402


def __getattr__(name):
    """``caffe.Layer`` (the base of Python layers), loaded on first use so that importing
    caffecli does not import every layer family."""
    if name == "Layer":
        from .layers.python_layer import Layer
        return Layer
    raise AttributeError("module 'caffecli' has no attribute %r" % name)
