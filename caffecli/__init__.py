"""caffecli: BVLC Caffe's command-line tool and pycaffe API in Python (numpy / cupy).

``import caffecli as caffe`` gives pycaffe's surface: Net, TRAIN/TEST, get_solver, set_mode_*.
"""
__version__ = "0.1.0"

from .proto.caffe_pb2 import TRAIN, TEST  # noqa: F401,E402
from .pycaffe import *  # noqa: F401,F403,E402

