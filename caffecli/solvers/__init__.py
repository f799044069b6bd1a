"""Solvers (Caffe's six update rules) and ``get_solver``: a registry keyed by SolverParameter.type.

``get_solver(path_or_param)`` builds the solver the parameter's ``type`` names (a legacy
``solver_type`` enum is upgraded first); new rules register with ``@register_solver("Name")``.
"""
from .base import (Solver, as_solver_param, read_solver_file, register_solver,  # noqa: F401
                   solver_class, solver_types)
from .sgd import SGDSolver, NesterovSolver  # noqa: F401
from .adaptive import AdaGradSolver, RMSPropSolver, AdaDeltaSolver, AdamSolver  # noqa: F401
from .lr_policy import learning_rate  # noqa: F401


def get_solver(param_or_path, **kwargs):
    """The Solver instance of the class named by the parameter's ``type`` (pycaffe's get_solver)."""
    param = as_solver_param(param_or_path)
    return solver_class(param.type)(param, **kwargs)


__all__ = ["Solver", "SGDSolver", "NesterovSolver", "AdaGradSolver", "RMSPropSolver",
           "AdaDeltaSolver", "AdamSolver", "get_solver", "register_solver", "solver_types",
           "solver_class", "read_solver_file", "learning_rate"]
