"""Solver: builds the train and test nets, runs the iteration loop, tests, displays and snapshots.

Follows Caffe's solver.cpp (Init, InitTrainNet, InitTestNets, Step, Solve, Test, Snapshot,
Restore) line for line in behaviour and log output; the update rule lives in subclasses.
"""
import math
import os
import time

import numpy

from .. import context, glog
from ..errors import CaffeError
from ..util.paths import as_path, is_path
from ..proto import caffe_pb2
from ..proto.io import read_solver_param, net_to_text
from ..proto.upgrade import upgrade_snapshot_prefix, upgrade_solver_as_needed
from . import snapshot as snapshot_io
from .graphed import graph_iteration
from .nets import build_test_nets, build_train_net

f32 = numpy.float32
ACTIONS = ("none", "stop", "snapshot")


def read_solver_file(path):
    """A SolverParameter from a prototxt, upgraded and with snapshot_prefix defaulted (as Caffe's
    ReadSolverParamsFromTextFileOrDie)."""
    param = read_solver_param(as_path(path))
    return upgrade_snapshot_prefix(param, as_path(path))


def as_solver_param(param_or_path):
    """A SolverParameter (a copy) from a path or a SolverParameter."""
    if is_path(param_or_path):
        return read_solver_file(param_or_path)
    if not isinstance(param_or_path, caffe_pb2.SolverParameter):
        raise CaffeError("expected a solver prototxt path or a SolverParameter, got %s"
                         % type(param_or_path).__name__)
    param = caffe_pb2.SolverParameter()
    param.CopyFrom(param_or_path)
    return upgrade_solver_as_needed(param, "<solver>")


_SOLVERS = {}


def register_solver(type_name):
    """Class decorator: make solver ``type`` string ``type_name`` build this class."""
    def deco(cls):
        if type_name in _SOLVERS and _SOLVERS[type_name] is not cls:
            raise CaffeError("Solver type %s already registered." % type_name)
        _SOLVERS[type_name] = cls
        cls.type = type_name
        return cls
    return deco


def solver_types():
    return sorted(_SOLVERS)


def solver_class(type_name):
    cls = _SOLVERS.get(type_name)
    if cls is None:
        raise CaffeError("Unknown solver type: %s (known types: %s)"
                         % (type_name, ", ".join(solver_types())))
    return cls


def normalised_action(action):
    """An action request's answer (a name, or Caffe's SolverAction number) as a name."""
    if isinstance(action, int):
        return ACTIONS[action] if 0 <= action < len(ACTIONS) else "none"
    action = str(action or "none").lower()
    return action if action in ACTIONS else "none"


def _no_action():
    return "none"


class Solver:
    """Trains ``.net`` with the update rule of a subclass (apply_update); tests ``.test_nets``."""

    type = None

    def __init__(self, param, dtype=numpy.float32):
        self.param = as_solver_param(param)
        self.dtype = numpy.dtype(dtype)
        self.action_request = _no_action
        self.callbacks = []
        self.requested_early_exit = False
        self.testing = False
        self.losses = []
        self.smoothed_loss = 0.0
        self.iter = 0
        self.current_step = 0
        self._iterations_last = 0
        self._timer = time.perf_counter()
        self._init()

    # ---- construction ------------------------------------------------------------------
    @property
    def root(self):
        return context.is_root_solver()

    def _info(self, where, message):
        if self.root:
            glog.info(where, message)

    def _init(self):
        param = self.param
        self._info("solver.init", "Initializing solver from parameters: \n"
                   + net_to_text(param).rstrip("\n"))
        if param.average_loss < 1:
            raise CaffeError("average_loss should be non-negative (got %d; it must be >= 1)."
                             % param.average_loss)
        self._check_snapshot_write_permissions()
        if param.random_seed >= 0:
            context.set_random_seed(param.random_seed + context.solver_rank())
        self.net = build_train_net(self)
        # only the root solver tests (Caffe's workers build no test nets)
        self.test_nets = build_test_nets(self) if self.root else []
        self._info("solver.scaffolding_done", "Solver scaffolding done.")
        self.iter = 0
        self.current_step = 0

    def _check_snapshot_write_permissions(self):
        param = self.param
        if not (self.root and param.snapshot):
            return
        if not param.HasField("snapshot_prefix"):
            raise CaffeError("In solver params, snapshot is specified but snapshot_prefix is not")
        probe = self.snapshot_filename(".tempfile")
        try:
            with open(probe, "w"):
                pass
            os.remove(probe)
        except OSError:
            raise CaffeError("Cannot write to snapshot prefix '%s'.  Make sure that the "
                             "directory exists and is writable." % param.snapshot_prefix) \
                from None

    # ---- the loop ----------------------------------------------------------------------
    def add_callback(self, callback):
        """Register an object with on_start() and on_gradients_ready() (data parallelism)."""
        self.callbacks.append(callback)

    def requested_action(self):
        return normalised_action(self.action_request() if self.action_request else "none")

    def step(self, iters):
        """Run ``iters`` iterations (forward/backward iter_size times, update, test, snapshot)."""
        param = self.param
        start_iter = self.iter
        stop_iter = self.iter + int(iters)
        average_loss = param.average_loss
        self.losses = []
        self.smoothed_loss = f32(0)
        self._timer = time.perf_counter()
        warned_nonfinite = False
        while self.iter < stop_iter:
            # (the diffs are cleared after the test nets run: they share only the weights)
            if (param.test_interval and self.iter % param.test_interval == 0
                    and (self.iter > 0 or param.test_initialization)):
                if self.root:
                    self.test_all()
                if self.requested_early_exit:
                    break
            for cb in self.callbacks:
                cb.on_start()
            display = bool(param.display) and self.iter % param.display == 0
            self.net.debug_info = display and param.debug_info
            loss = f32(0)
            graphed = graph_iteration(self)   # passes and update as one CUDA graph
            if graphed is not None:
                loss += f32(float(graphed))
            else:
                self.net.clear_param_diffs(lazy=True)
                for _ in range(max(param.iter_size, 1)):
                    loss += f32(float(self.net.forward_backward()))
                self.net.settle_param_diffs()
            loss /= f32(max(param.iter_size, 1))
            self._update_smoothed_loss(loss, start_iter, average_loss)
            if not warned_nonfinite and not math.isfinite(float(loss)):
                warned_nonfinite = True
                if self.root:
                    glog.warning("solver.loss_not_finite", "Iteration %d, loss = %s: the training "
                                 "loss is not finite" % (self.iter, glog.fmt(loss)))
            if display:
                self._display()
            for cb in self.callbacks:
                cb.on_gradients_ready()
            if graphed is not None:          # updated in the graph: the rate's log, the count
                self.announce_rate()
                self.iter += 1
            else:
                self.apply_update()
            request = self.requested_action()
            if ((param.snapshot and self.iter % param.snapshot == 0 and self.root)
                    or request == "snapshot"):
                self.snapshot()
            if request == "stop":
                self.requested_early_exit = True
                break

    def _display(self):
        now = time.perf_counter()
        lapse = now - self._timer
        if not context.is_gpu():   # Caffe's CPU Timer counts whole milliseconds
            lapse = int(lapse * 1000) / 1000.0
        per_s = (self.iter - self._iterations_last) / (lapse if lapse else 1.0)
        self._info("solver.iteration_speed", "Iteration %d (%s iter/s, %ss/%d iters), loss = %s" % (
            self.iter, glog.fmt(per_s), glog.fmt(lapse), self.param.display,
            glog.fmt(self.smoothed_loss)))
        self._timer = now
        self._iterations_last = self.iter
        self._log_outputs(self.net, "solver.train_output", "    Train net output #")

    def _log_outputs(self, net, where, prefix):
        score_index = 0
        for j, blob in enumerate(net.output_blobs):
            name = net.output_names[j]
            weight = f32(net.blob_loss_weights[net.output_ids[j]])
            values = numpy.asarray(blob.cpu_data(), dtype=f32).reshape(-1)
            for v in values:
                msg = ""
                if weight:
                    msg = " (* %s = %s loss)" % (glog.fmt(weight), glog.fmt(weight * v))
                self._info(where, "%s%d: %s = %s%s" % (prefix, score_index, name,
                                                       glog.fmt(v), msg))
                score_index += 1

    def _update_smoothed_loss(self, loss, start_iter, average_loss):
        loss = f32(loss)
        if len(self.losses) < average_loss:
            self.losses.append(loss)
            size = len(self.losses)
            self.smoothed_loss = (f32(self.smoothed_loss) * f32(size - 1) + loss) / f32(size)
        else:
            idx = (self.iter - start_iter) % average_loss
            self.smoothed_loss = f32(self.smoothed_loss) + (loss - self.losses[idx]) \
                / f32(average_loss)
            self.losses[idx] = loss

    def solve(self, resume_file=None):
        """Train to max_iter (restoring ``resume_file`` first), snapshot, final display/test."""
        param = self.param
        glog.info("solver.solving", "Solving " + self.net.name)
        glog.info("solver.learning_rate_policy", "Learning Rate Policy: " + param.lr_policy)
        self.requested_early_exit = False
        if resume_file:
            glog.info("solver.restoring", "Restoring previous solver status from %s"
                      % as_path(resume_file))
            self.restore(resume_file)
        start_iter = self.iter
        self.step(param.max_iter - self.iter)
        if param.snapshot_after_train and (not param.snapshot
                                           or self.iter % param.snapshot != 0):
            self.snapshot()
        if self.requested_early_exit:
            glog.info("solver.stopped_early", "Optimization stopped early.")
            return
        if param.display and self.iter % param.display == 0:
            loss = f32(float(self.net.forward_pass()))
            self._update_smoothed_loss(loss, start_iter, param.average_loss)
            glog.info("solver.final_loss", "Iteration %d, loss = %s"
                      % (self.iter, glog.fmt(self.smoothed_loss)))
        if param.test_interval and self.iter % param.test_interval == 0:
            self.test_all()
        glog.info("solver.optimization_done", "Optimization Done.")

    # ---- testing -----------------------------------------------------------------------
    def test_all(self):
        """Run every test net (Caffe's TestAll); returns a list of {output name: mean} dicts."""
        results = []
        for i in range(len(self.test_nets)):
            if self.requested_early_exit:
                break
            results.append(self.test(i))
        return results

    def test(self, test_net_id=0):
        self.testing = True
        try:
            return self._test(test_net_id)
        finally:
            self.testing = False

    def _test(self, test_net_id):
        param = self.param
        glog.info("solver.testing_net",
                  "Iteration %d, Testing net (#%d)" % (self.iter, test_net_id))
        net = self.test_nets[test_net_id]
        net.share_trained_layers_with(self.net)
        n_iter = param.test_iter[test_net_id]
        scores, score_ids = None, []
        loss = f32(0)
        for i in range(n_iter):
            request = self.requested_action()
            while request != "none":
                if request == "snapshot":
                    self.snapshot()
                elif request == "stop":
                    self.requested_early_exit = True
                request = self.requested_action()
            if self.requested_early_exit:
                break
            iter_loss = f32(float(net.forward_pass()))
            if param.test_compute_loss:
                loss += iter_loss
            values = [numpy.asarray(b.cpu_data(), dtype=f32).reshape(-1)
                      for b in net.output_blobs]
            if scores is None:
                score_ids = [j for j, v in enumerate(values) for _ in range(v.size)]
                scores = numpy.concatenate(values) if values else numpy.zeros(0, f32)
            else:
                scores = scores + numpy.concatenate(values)
        if self.requested_early_exit:
            glog.info("solver.test_interrupted", "Test interrupted.")
            return {}
        if param.test_compute_loss:
            loss /= f32(n_iter)
            glog.info("solver.test_loss", "Test loss: " + glog.fmt(loss))
        out = {}
        for i, j in enumerate(score_ids):
            bid = net.output_ids[j]
            name = net.blob_names[bid]
            weight = f32(net.blob_loss_weights[bid])
            mean = f32(scores[i]) / f32(n_iter)
            msg = ""
            if weight:
                msg = " (* %s = %s loss)" % (glog.fmt(weight), glog.fmt(weight * mean))
            glog.info("solver.test_net_output", "    Test net output #%d: %s = %s%s"
                      % (i, name, glog.fmt(mean), msg))
            out.setdefault(name, []).append(float(mean))
        return {k: (v[0] if len(v) == 1 else v) for k, v in out.items()}

    # ---- update (subclasses) -----------------------------------------------------------
    def apply_update(self):
        raise NotImplementedError

    # ---- snapshots ---------------------------------------------------------------------
    def snapshot_filename(self, extension):
        return "%s_iter_%d%s" % (self.param.snapshot_prefix, self.iter, extension)

    def snapshot(self):
        """Write the weights and the solver state (plus the exact-resume sidecar); return the
        paths written. Only the root solver writes (data-parallel ranks hold the same weights)."""
        if not self.root:
            return []
        return snapshot_io.snapshot(self)

    def restore(self, state_file):
        """Load a .solverstate or .solverstate.h5 (and its sidecar when present)."""
        snapshot_io.restore(self, as_path(state_file))

    # state hooks used by snapshot.py
    def history_blobs(self):
        return []

    def restore_history(self, arrays):
        if arrays:
            raise CaffeError("Incorrect length of history blobs.")

