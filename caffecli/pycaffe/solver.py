"""pycaffe's solvers: ``caffe.SGDSolver(path)`` ... and ``caffe.get_solver(path)``, facades over
the engine's solvers whose ``net`` and ``test_nets`` are pycaffe Nets."""
from .. import solvers as engine
from .net import EngineView, Net


class Solver(EngineView):
    """A pycaffe solver; ``SGDSolver(path)`` and friends build the rule their class names."""

    rule = None  # the engine solver type a subclass builds (None: the file's ``type``)

    def __init__(self, param, **kwargs):
        param = engine.as_solver_param(param)
        cls = engine.solver_class(self.rule or param.type)
        self._engine = cls(param, **kwargs)
        self._net = Net.wrap(self._engine.net)
        self._test_nets = [Net.wrap(n) for n in self._engine.test_nets]

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
        """One update from the current diffs (learning rate, regularization, momentum), iter+1."""
        self._engine.apply_update()

    def add_callback(self, *callback):
        """pycaffe's two forms: ``add_callback(on_start, on_gradients_ready)`` (two callables,
        called before each iteration's forward and after its backward) or
        ``add_callback(nccl)`` (a caffe.NCCL, or any object with those two methods)."""
        if len(callback) == 2 and all(callable(c) for c in callback):
            callback = (_Callbacks(*callback),)
        if len(callback) != 1 or not all(callable(getattr(callback[0], m, None))
                                         for m in ("on_start", "on_gradients_ready")):
            raise TypeError("add_callback takes (on_start, on_gradients_ready) callables or a "
                            "caffe.NCCL")
        self._engine.add_callback(callback[0])

    def share_weights(self, net):
        """Make ``net`` use this solver's train-net weights (for layers of the same name)."""
        getattr(net, "engine", net).share_trained_layers_with(self._engine.net)


class _Callbacks:
    """Two plain callables in the shape the engine's solver calls (Caffe's Solver::Callback)."""

    def __init__(self, on_start, on_gradients_ready):
        self.on_start, self.on_gradients_ready = on_start, on_gradients_ready


class SGDSolver(Solver):
    """pycaffe's SGDSolver(path); the other rules derive from it, as in pycaffe."""

    rule = "SGD"

    @property
    def lr(self):
        """The learning rate of the current iteration (Caffe's GetLearningRate), a Python float
        as Boost.Python hands it over."""
        return float(self._engine.get_learning_rate())


def _rule_class(rule):
    return type(rule + "Solver", (SGDSolver,), {"rule": rule, "__doc__":
                                                "pycaffe's %sSolver(path)." % rule})


NesterovSolver = _rule_class("Nesterov")
AdaGradSolver = _rule_class("AdaGrad")
RMSPropSolver = _rule_class("RMSProp")
AdaDeltaSolver = _rule_class("AdaDelta")
AdamSolver = _rule_class("Adam")


_BY_RULE = {cls.rule: cls for cls in (SGDSolver, NesterovSolver, AdaGradSolver, RMSPropSolver,
                                      AdaDeltaSolver, AdamSolver)}


def get_solver(param, **kwargs):
    """The solver a solver prototxt (or SolverParameter) describes, of its ``type`` (the
    plain Solver facade for a rule registered by the user)."""
    param = engine.as_solver_param(param)
    return _BY_RULE.get(param.type, Solver)(param, **kwargs)
