"""The pycaffe facade: what ``import caffe`` (and ``import caffecli as caffe``) gives.

Net, the solver classes and get_solver, Layer (the base of Python layers, the engine's own),
the mode and device (set_mode_cpu/set_mode_gpu/set_device), set_random_seed, layer_type_list,
init_log/log, TRAIN/TEST, Timer, and data parallelism as pycaffe's train.py drives it: NCCL,
has_nccl, solver_count/set_solver_count, solver_rank/set_solver_rank, set_multiprocess.
"""
from .. import glog as _glog
from ..context import (set_device, set_mode_cpu, set_mode_gpu, set_multiprocess,  # noqa: F401
                       set_random_seed, set_solver_count, set_solver_rank, solver_count,
                       solver_rank)
from ..errors import CaffeError  # noqa: F401
from ..layer import Layer  # noqa: F401
from ..proto.caffe_pb2 import TEST, TRAIN  # noqa: F401
from ..registry import layer_types as layer_type_list  # noqa: F401
from .nccl import NCCL, has_nccl  # noqa: F401
from .net import Net  # noqa: F401
from .solver import (AdaDeltaSolver, AdaGradSolver, AdamSolver, NesterovSolver,  # noqa: F401
                     RMSPropSolver, SGDSolver, Solver, get_solver)
from .timer import Timer  # noqa: F401


init_log = _glog.init_log     # pycaffe's: minloglevel, logtostderr, then glog's files
log = _glog.log               # one INFO line from _caffe.cpp


__all__ = ["Net", "TRAIN", "TEST", "set_mode_cpu", "set_mode_gpu", "set_device",
           "set_random_seed", "layer_type_list", "init_log", "log", "get_solver", "Solver",
           "SGDSolver", "NesterovSolver", "AdaGradSolver", "RMSPropSolver", "AdaDeltaSolver",
           "AdamSolver", "solver_count", "solver_rank", "set_solver_count", "set_solver_rank",
           "set_multiprocess", "NCCL", "has_nccl", "Timer", "Layer", "CaffeError"]
