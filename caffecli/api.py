"""The pycaffe-compatible Python surface: ``import caffecli as caffe`` then use it as pycaffe.

Net, TRAIN/TEST, get_solver and the typed solver constructors (SGDSolver, AdamSolver, ...),
set_mode_cpu/set_mode_gpu/set_device/set_random_seed, layer_type_list, solver_count/rank.
"""
from . import backend as _backend
from . import glog as _glog
from .net import Net  # noqa: F401
from .parallel import solver_count, solver_rank  # noqa: F401
from .proto.caffe_pb2 import TRAIN, TEST  # noqa: F401
from .rng import set_random_seed  # noqa: F401

set_mode_cpu = _backend.set_mode_cpu
set_mode_gpu = _backend.set_mode_gpu
set_device = _backend.set_device


def layer_type_list():
    """Every registered layer type name, sorted (pycaffe's caffe.layer_type_list())."""
    from .registry import layer_types
    return layer_types()


def init_log(level=0, stderr=True):
    """Show log lines at ``level`` and above (0 INFO, 1 WARNING, 2 ERROR)."""
    _glog.set_min_level(level)


def log(message):
    """Write one INFO line in Caffe's log format."""
    _glog.info("pycaffe.py:0", message)


def get_solver(filename):
    """The solver a solver prototxt (or SolverParameter) describes, of its ``type``."""
    from .solvers import get_solver as _get_solver
    return _get_solver(filename)


def _typed_solver(type_name):
    def make(filename):
        from .proto import caffe_pb2
        from .proto.io import read_solver_param
        from .solvers import get_solver as _get_solver
        if isinstance(filename, caffe_pb2.SolverParameter):
            param = caffe_pb2.SolverParameter()
            param.CopyFrom(filename)
        else:
            param = read_solver_param(filename)
        param.type = type_name
        return _get_solver(param)
    make.__name__ = make.__qualname__ = type_name + "Solver"
    make.__doc__ = "A %s solver from a solver prototxt, whatever its ``type`` field says " \
        "(pycaffe's caffe.%sSolver)." % (type_name, type_name)
    return make


SGDSolver = _typed_solver("SGD")
NesterovSolver = _typed_solver("Nesterov")
AdaGradSolver = _typed_solver("AdaGrad")
RMSPropSolver = _typed_solver("RMSProp")
AdaDeltaSolver = _typed_solver("AdaDelta")
AdamSolver = _typed_solver("Adam")

__all__ = ["Net", "TRAIN", "TEST", "set_mode_cpu", "set_mode_gpu", "set_device",
           "set_random_seed", "layer_type_list", "init_log", "log", "get_solver", "SGDSolver",
           "NesterovSolver", "AdaGradSolver", "RMSPropSolver", "AdaDeltaSolver", "AdamSolver",
           "solver_count", "solver_rank"]
