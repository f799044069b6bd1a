"""pycaffe's solvers: ``caffe.SGDSolver(path)`` ... and ``caffe.get_solver(path)``, facades over
the engine's solvers whose ``net`` and ``test_nets`` are pycaffe Nets."""
from .. import solvers as engine
from .net import Net


class Solver:
    """A pycaffe solver; ``SGDSolver(path)`` and friends build the rule their class names."""

    rule = None  # the engine solver type a subclass builds (None: the file's ``type``)

    def __init__(self, param, **kwargs):
        param = engine.as_solver_param(param)
        cls = engine.solver_class(self.rule or param.type)
        self._engine = cls(param, **kwargs)
        self._net = Net.wrap(self._engine.net)
        self._test_nets = [Net.wrap(n) for n in self._engine.test_nets]

    @property
    def engine(self):
        return self._engine

    def __getattr__(self, name):
        if name == "_engine":
            raise AttributeError(name)
        return getattr(self._engine, name)

    @property
    def net(self):
        return self._net

    @property
    def test_nets(self):
        return self._test_nets

    @property
    def iter(self):
        return self._engine.iter

    @property
    def param(self):
        return self._engine.param

    def step(self, iters):
        self._engine.step(iters)

    def solve(self, resume_file=None):
        self._engine.solve(resume_file)

    def snapshot(self):
        self._engine.snapshot()

    def restore(self, state_file):
        self._engine.restore(state_file)

    def apply_update(self):
        self._engine.apply_update()


def _solver_class(rule):
    return type(rule + "Solver", (Solver,), {"rule": rule, "__doc__":
                                             "pycaffe's %sSolver(path)." % rule})


SGDSolver = _solver_class("SGD")
NesterovSolver = _solver_class("Nesterov")
AdaGradSolver = _solver_class("AdaGrad")
RMSPropSolver = _solver_class("RMSProp")
AdaDeltaSolver = _solver_class("AdaDelta")
AdamSolver = _solver_class("Adam")


_BY_RULE = {cls.rule: cls for cls in (SGDSolver, NesterovSolver, AdaGradSolver, RMSPropSolver,
                                      AdaDeltaSolver, AdamSolver)}


def get_solver(param, **kwargs):
    """The solver a solver prototxt (or SolverParameter) describes, of its ``type`` (the
    plain Solver facade for a rule registered by the user)."""
    param = engine.as_solver_param(param)
    return _BY_RULE.get(param.type, Solver)(param, **kwargs)
