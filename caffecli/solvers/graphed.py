"""A solver's whole iteration as one CUDA graph (unless CAFFECLI_CUDA_GRAPHS=0): the diffs
cleared, the layers' forward and backward, and every parameter's update, replayed after the
data layers.

The update's host values (the learning rate, Adam's bias correction) become device scalars
refilled before each launch from the same policy the eager update uses, so replays update as
eager iterations do. The rate is logged, and a step policy advances, after the launch, as
eager iterations log it after their forward-backward. Iterations that accumulate gradients
(iter_size > 1), clip them (a host read of their norm) or run data-parallel callbacks fall back
to Net.forward_backward, itself a graph where it can be.
"""
import numpy

from .. import context, replay
from .lr_policy import learning_rate


def graph_iteration(solver):
    """Run one iteration's passes and update through the solver's graph; the loss of the pass,
    or None (nothing run) where the iteration must run as usual."""
    param = solver.param
    if not (context.is_gpu() and replay.enabled()) or solver.callbacks \
            or max(param.iter_size, 1) > 1 or param.clip_gradients >= 0 \
            or not hasattr(solver, "update_params"):
        return None
    step = solver.__dict__.get("_graph_step")
    if step is None:
        step = solver._graph_step = replay.GraphStep(
            solver.net, before=solver.net.clear_param_diffs, after=lambda: _update(solver),
            feeds=lambda xp: _scalar_feeds(solver, xp), blobs=solver.history_blobs())
    return step.run()


def _host_scalars(solver):
    """This iteration's scalars, the rate computed without logging or advancing its step."""
    rate = learning_rate(solver.param, solver.iter, solver.current_step, log=False)[0]
    return solver.iteration_scalars(rate)


def _update(solver):
    scalars = solver.device_scalars if replay.capturing() else _host_scalars(solver)
    solver.update_params(scalars)


def _scalar_feeds(solver, xp):
    solver.device_scalars = {name: xp.zeros((), numpy.float32)
                             for name in _host_scalars(solver)}

    def refill():
        for name, value in _host_scalars(solver).items():
            solver.device_scalars[name].fill(value)
    return [refill]
