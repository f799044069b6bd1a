"""The pycaffe-compatible Python surface: ``import caffecli as caffe`` then use it as pycaffe.

Net, TRAIN/TEST, get_solver and the solver classes (SGDSolver(path), AdamSolver(path), ...,
each of its own type whatever the file's ``type`` says), Layer (base of Python layers),
set_mode_cpu/set_mode_gpu/set_device/set_random_seed, layer_type_list, solver_count/rank.
"""
from . import backend as _backend
from . import glog as _glog
from .net import Net  # noqa: F401
from .parallel import solver_count, solver_rank  # noqa: F401
from .proto.caffe_pb2 import TRAIN, TEST  # noqa: F401
from .rng import set_random_seed  # noqa: F401
from . import solvers as _solvers
from .layers.python_layer import Layer  # noqa: F401  (base class of Python layers)
from .solvers import (SGDSolver, NesterovSolver, AdaGradSolver, RMSPropSolver,  # noqa: F401
                      AdaDeltaSolver, AdamSolver)

set_mode_cpu = _backend.set_mode_cpu
set_mode_gpu = _backend.set_mode_gpu
set_device = _backend.set_device


def layer_type_list():
    """Every registered layer type name, sorted (pycaffe's caffe.layer_type_list())."""
    from .registry import layer_types
    return layer_types()


init_log = _glog.init_log   # pycaffe's init_log([level[, stderr]]): glog's files from now on
log = _glog.log             # pycaffe's log(message): one INFO line


def get_solver(filename):
    """The solver a solver prototxt (or SolverParameter) describes, of its ``type``."""
    return _solvers.get_solver(filename)


__all__ = ["Net", "TRAIN", "TEST", "set_mode_cpu", "set_mode_gpu", "set_device",
           "set_random_seed", "layer_type_list", "init_log", "log", "get_solver", "SGDSolver",
           "NesterovSolver", "AdaGradSolver", "RMSPropSolver", "AdaDeltaSolver", "AdamSolver",
           "solver_count", "solver_rank", "Layer"]
