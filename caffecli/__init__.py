"""caffecli: BVLC Caffe's command-line tool and pycaffe API in Python (numpy / cupy).

``import caffecli as caffe`` gives pycaffe's surface (caffecli.pycaffe): Net, TRAIN/TEST,
get_solver, set_mode_*, ...
"""
__version__ = "0.1.0"

from . import launcher as _launcher
_launcher.share_cpus()  # before numpy loads its BLAS: ranks on one machine share the cores

from .pycaffe import *  # noqa: F401,F403,E402
