"""Data-parallel training, as caffe.cpp + Caffe's NCCL::Run do it: one solver per rank, the
root's weights broadcast first, gradients averaged after every backward.

``DataParallel``: ranks are threads of one process, one per device (Caffe's multi-GPU). The root
solver (rank 0) is built by the caller under ``context.solver_group(n)``; the others are built
here, in their own threads, with their data layers taking their share of the records.
``ProcessParallel``: ranks are the processes of an MPI job, each built under
``context.join_world``. Either way the root runs Solve (tests, logs, snapshots) and the others
only step; every rank's requests (signals) are agreed after each update, so all of them stop or
snapshot at the same iteration.
"""
import threading

import numpy

from .. import backend, comms, context
from ..proto import caffe_pb2
from . import snapshot as snapshot_io
from .base import ACTIONS, normalised_action


def _no_request():
    return "none"


class ActionSync:
    """A rank's ``action_request``: each rank asks its own ``request`` (a signal may reach any
    or all of them), the votes are summed, and every rank gets the same answer: stop when any
    rank asked to stop, else snapshot when any asked for one.

    Requests are read only at the synchronised point after the update; during the root's test
    pass (the other ranks wait in the next all-reduce) a signal stays pending until then.
    """

    def __init__(self, solver, comm, rank, request):
        self.solver, self.comm, self.rank, self.request = solver, comm, rank, request

    def __call__(self):
        if getattr(self.solver, "testing", False):
            return "none"
        votes = numpy.zeros(len(ACTIONS), dtype="float32")
        votes[ACTIONS.index(normalised_action(self.request()))] = 1
        if context.is_gpu():
            votes = backend.device_module().asarray(votes)
        self.comm.allreduce_sum(self.rank, votes)
        votes = backend.to_host(votes)
        return next((a for a in ("stop", "snapshot") if votes[ACTIONS.index(a)] > 0), "none")


def train_rank(solver, comm, rank, sync, request):
    """One rank's training: the root's weights first, ``sync`` averaging the gradients after
    every backward, requests agreed after every update; the root solves, the others step."""
    sync.broadcast_params()
    solver.add_callback(sync)
    solver.action_request = ActionSync(solver, comm, rank, request)
    try:
        if rank == 0:
            solver.solve()
        else:
            solver.step(solver.param.max_iter - solver.iter)
    finally:
        solver.callbacks.remove(sync)
        sync.close()
        solver.action_request = request


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
        train_rank(solver, self.comm, rank, comms.GradientSync(solver.net, self.comm, rank),
                   self._request if rank == 0 else _no_request)


def _positions(states):
    """Data states without their random streams (entries named ``*_rng``): a rank resumes at
    the root's position but keeps drawing from its own generators."""
    return {layer: {k: v for k, v in state.items() if not k.endswith("_rng")}
            if isinstance(state, dict) else state for layer, state in states.items()}


class ProcessParallel:
    """This process's rank of an MPI job (``comm`` a comms.MpiComm): gradients through NCCL on
    GPUs (cupy), else MPI all-reduces on host buckets of ``bucket_bytes`` overlapping backward."""

    def __init__(self, solver, comm, bucket_bytes):
        self.solver, self.comm, self.bucket_bytes = solver, comm, bucket_bytes

    def share_restored_state(self):
        """After the root restored a snapshot: its iteration, solver history and data positions
        on every rank (the weights follow when training starts), so the snapshot need be on the
        root's machine only, and any number of ranks can resume it."""
        s = self.solver
        mine = (s.iter, s.current_step, [backend.to_host(h.cpu_data()) for h in s.history_blobs()],
                snapshot_io.layer_states(s.net)) if self.comm.rank == 0 else None
        it, step, history, states = self.comm.broadcast_object(mine)
        if self.comm.rank:
            s.iter, s.current_step = it, step
            s.restore_history(history)
            snapshot_io.set_layer_states(s.net, _positions(states))

    def run(self, request):
        """Train this rank to max_iter (or an agreed stop); ``request`` is its signal handler."""
        rank, net = self.comm.rank, self.solver.net
        if context.is_gpu() and not backend.is_standin():
            nccl = comms.NcclComm.across_processes(self.comm, context.device())
            train_rank(self.solver, nccl, rank, comms.GradientSync(net, nccl, rank), request)
        else:
            sync = comms.BucketedGradientSync(net, self.comm, rank, self.bucket_bytes,
                                              self.solver.param.iter_size)
            train_rank(self.solver, self.comm, rank, sync, request)
        return self.solver


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
