"""Data-parallel training, as caffe.cpp + Caffe's NCCL::Run do it: one solver per device in its
own thread, the root's weights broadcast first, gradients averaged after every backward.

The root solver (rank 0) is built by the caller under ``context.solver_group(n)`` and runs
Solve (tests, logs, snapshots); the others are built here, in their own threads, with their
data layers taking their share of the records, and only step. Signals reach the root; its
request is broadcast after each update so every rank stops or snapshots at the same iteration.
"""
import threading

import numpy

from .. import backend, comms, context
from ..proto import caffe_pb2
from .base import ACTIONS, normalised_action


class ActionSync:
    """A rank's ``action_request``: the root asks its own handler, every rank gets the answer.

    Requests are read only at the synchronised point after the update; during the root's test
    pass (the other ranks wait in the next all-reduce) a signal stays pending until then.
    """

    def __init__(self, solver, comm, rank, request):
        self.solver, self.comm, self.rank, self.request = solver, comm, rank, request

    def __call__(self):
        if getattr(self.solver, "testing", False):
            return "none"
        xp = backend.device_module() if context.is_gpu() else numpy
        code = xp.zeros(1, dtype="float32")
        if self.rank == 0:
            code[0] = ACTIONS.index(normalised_action(self.request()))
        self.comm.broadcast(self.rank, code, 0)
        return ACTIONS[int(code[0])]


class DataParallel:
    """Train ``root`` (rank 0) together with ``comm.size - 1`` copies of it.

    ``devices`` lists one GPU per rank (None: every rank computes on the CPU, for tests and for
    machines without GPUs).
    """

    def __init__(self, root, comm, devices=None):
        if context.solver_count() != comm.size:
            raise ValueError("build the root solver under context.solver_group(%d)" % comm.size)
        self.root, self.comm, self.devices = root, comm, devices
        self.solvers = [root] + [None] * (comm.size - 1)

    def run(self, snapshot=None):
        """Solve on every rank (the workers restore ``snapshot`` as the root already has)."""
        self._snapshot = snapshot
        self._request = self.root.action_request
        run_ranks(self.comm.size, self._work, on_error=self.comm.abort)
        return self.root

    def _worker(self, rank):
        param = caffe_pb2.SolverParameter()
        param.CopyFrom(self.root.param)
        if self.devices:
            param.device_id = self.devices[rank]
        solver = type(self.root)(param, dtype=self.root.dtype)
        if self._snapshot:
            solver.restore(self._snapshot)
        return solver

    def _work(self, rank):
        if self.devices:
            context.use_device_here(self.devices[rank])
        solver = self.root if rank == 0 else self._worker(rank)
        self.solvers[rank] = solver
        sync = comms.GradientSync(solver.net, self.comm, rank)
        sync.broadcast_params()
        solver.add_callback(sync)
        solver.action_request = ActionSync(solver, self.comm, rank, self._request)
        try:
            if rank == 0:
                solver.solve()
            else:
                solver.step(solver.param.max_iter - solver.iter)
        finally:
            solver.callbacks.remove(sync)
            if rank == 0:
                solver.action_request = self._request


def run_ranks(size, work, on_error=None):
    """Run ``work(rank)`` in ``size`` threads with solver_rank()/solver_count() set; re-raise
    the first failure. Rank 0 runs in the calling thread (it owns logging and testing).
    ``on_error`` (e.g. a communicator's abort) is called at the first failure so the other
    ranks do not wait for the failed one forever."""
    errors = []

    def entry(rank):
        context.set_solver_rank(rank)
        try:
            work(rank)
        except BaseException as exc:  # surfaced to the caller below
            first = not errors
            errors.append(exc)
            if first and on_error is not None:
                on_error()

    threads = [threading.Thread(target=entry, args=(r,), daemon=True) for r in range(1, size)]
    with context.solver_group(size):
        try:
            for t in threads:
                t.start()
            entry(0)
            for t in threads:
                t.join()
        finally:
            context.set_solver_rank(0)
    if errors:
        # a rank's own error beats the BrokenBarrierError it caused in the others
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or errors)[0]
