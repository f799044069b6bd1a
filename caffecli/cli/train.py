"""``caffecli train``: train or finetune a model from a solver prototxt (caffe.cpp's train())."""
import contextlib
import signal

from .. import backend, comms, context, glog, launcher
from ..errors import CaffeError
from ..proto import caffe_pb2
from ..solvers import get_solver, read_solver_file
from ..solvers.data_parallel import DataParallel, ProcessParallel
from ..util.progress import progress
from . import mpi_rank
from .devices import device_name, parse_gpus
from .errors import Interrupted

EFFECTS = ("stop", "snapshot", "none")
FORCE_AFTER = 3   # this many SIGINTs end training at once, whatever -sigint_effect says
SIGINT_SAYS = {"stop": "stopping", "snapshot": "snapshotting",
               "none": "ignored (-sigint_effect none)"}


def requested_action(flag, value):
    """Validate a ``-sigint_effect`` / ``-sighup_effect`` value."""
    if value not in EFFECTS:
        raise CaffeError('Invalid signal effect "%s" was specified (--%s takes %s)'
                         % (value, flag, ", ".join(EFFECTS)))
    return value


class SignalHandler:
    """SIGINT/SIGHUP set flags; ``action()`` returns the configured effect once per signal.

    SIGHUP is checked first, as Caffe's SignalHandler does. Handlers are restored on close().
    The third SIGINT raises Interrupted at once, its message from ``lost()``: what is given up.
    """

    def __init__(self, sigint_effect="stop", sighup_effect="snapshot"):
        self.effects = {"SIGINT": sigint_effect, "SIGHUP": sighup_effect}
        self.got = {"SIGINT": False, "SIGHUP": False}
        self.sigints = 0
        self.said = 0   # presses said so far
        self.lost = lambda: "stopped at once; no snapshot written"
        self.previous = {}
        for name in ("SIGINT", "SIGHUP"):
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            try:
                self.previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: no handlers, training still works
                pass

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        self.got[name] = True
        if name == "SIGINT":
            self.sigints += 1
            if self.sigints >= FORCE_AFTER:
                self.close()
                raise Interrupted("Ctrl-C %d times: %s" % (self.sigints, self.lost()))

    def _say_presses(self):
        """A line per Ctrl-C counted since the last call, so a user (or a script waiting for
        it) knows the press counted. Said here, between iterations, not in the handler: a
        handler that writes can land inside a write of the log file."""
        while self.said < self.sigints:     # the handler only counts up; only this says
            self.said += 1
            left = FORCE_AFTER - self.said
            glog.warning("train.sigint", "Ctrl-C: %s; %d more end%s the run at once, without "
                         "a snapshot" % (SIGINT_SAYS[self.effects["SIGINT"]], left,
                                         "s" if left == 1 else ""))

    def action(self):
        self._say_presses()
        for name in ("SIGHUP", "SIGINT"):
            if self.got[name]:
                self.got[name] = False
                return self.effects[name]
        return "none"

    def close(self):
        for signum, handler in self.previous.items():
            try:
                signal.signal(signum, handler)
            except (ValueError, TypeError):
                pass
        self.previous = {}


class Progress:
    """A bar of iterations while stderr is a terminal (log lines print above it)."""

    def __init__(self, solver):
        self.solver = solver
        self.bar = progress(solver.param.max_iter, initial=solver.iter, unit="iter")

    def update(self):
        self.bar.update(self.solver.iter - self.bar.n)

    def close(self):
        self.bar.close()


def _select_devices(param, gpu_flag, job=None):
    """caffe.cpp: -gpu, else the solver's solver_mode/device_id; log and set the mode. A rank of
    an MPI job (``job``) takes its own GPU of the list."""
    if not gpu_flag and param.HasField("solver_mode") and \
            param.solver_mode == caffe_pb2.SolverParameter.GPU:
        gpu_flag = str(param.device_id) if param.HasField("device_id") else "0"
        try:
            gpus = parse_gpus(gpu_flag)
        except CaffeError as exc:
            raise CaffeError("the solver asks for solver_mode: GPU (device %s) but %s; set "
                             "solver_mode: CPU to train on the CPU"
                             % (gpu_flag, str(exc).split(": ", 1)[-1])) from None
    else:
        gpus = parse_gpus(gpu_flag)
    if not gpus:
        glog.info("caffe.use_cpu", "Use CPU.")
        context.set_mode_cpu()
        return gpus
    if job is not None:
        gpus = [mpi_rank.local_device(gpus, job.world)]
    glog.info("caffe.using_gpus", "Using GPUs " + ", ".join(str(g) for g in gpus))
    for g in gpus:
        glog.info("caffe.gpu_name", "GPU %d: %s" % (g, device_name(g)))
    param.device_id = gpus[0]
    context.set_device(gpus[0])
    context.set_mode_gpu()
    return gpus


def run_train(solver_path, weights="", snapshot="", gpu="", level=0, stages=("",),
              sigint_effect="stop", sighup_effect="snapshot"):
    """Train as ``caffe train`` does, or as one rank of an MPI job when mpirun/srun started
    this process (launcher.detect); return the exit status (0)."""
    if not solver_path:
        raise CaffeError("Need a solver definition to train (--solver).")
    if snapshot and weights:
        raise CaffeError("Give a snapshot to resume training or weights to finetune but not both.")
    sigint_effect = requested_action("sigint_effect", sigint_effect)
    sighup_effect = requested_action("sighup_effect", sighup_effect)
    flags = (solver_path, weights, snapshot, gpu, level, stages, sigint_effect, sighup_effect)
    world = launcher.detect()
    if world is None:
        return _train(*flags)
    job = mpi_rank.Rank(world)
    return job.run(lambda: _train(*flags, job=job))


def _train(solver_path, weights, snapshot, gpu, level, stages, sigint_effect, sighup_effect,
           job=None):
    root = job is None or job.rank == 0
    with contextlib.ExitStack() as stack:
        handler = SignalHandler(sigint_effect, sighup_effect)
        stack.callback(handler.close)
        with job.setup() if job else contextlib.nullcontext():
            param = read_solver_file(solver_path)
            param.train_state.level = level
            param.train_state.stage.extend(stages)
            gpus = _select_devices(param, gpu, job)
            if snapshot or weights:
                del param.weights[:]
            if weights and root:  # the other ranks of a job get the root's weights
                param.weights.append(weights)   # one entry, as caffe.cpp adds the flag
            bucket = mpi_rank.bucket_bytes() if job else None
            stack.enter_context(context.solver_group(job.size if job else max(len(gpus), 1)))
            solver = get_solver(param)
            progress = Progress(solver) if root else None
            if progress is not None:
                stack.callback(progress.close)
            handler.lost = lambda: ("stopped at iteration %d without a snapshot; the "
                                    "iterations since the last snapshot are lost" % solver.iter)

            def action():
                if progress is not None:
                    progress.update()
                return handler.action()
            solver.action_request = action
            if snapshot and root:
                glog.info("caffe.resuming_from", "Resuming from " + snapshot)
                solver.restore(snapshot)
        glog.info("caffe.starting_optimization", "Starting Optimization")
        if job is not None:
            job.solver = solver
            parallel = ProcessParallel(solver, job.comm, bucket)
            if snapshot:
                parallel.share_restored_state()
            parallel.run(action)
        elif len(gpus) > 1:
            comm = comms.NcclComm.for_devices(gpus) if not backend.is_standin() \
                else comms.ThreadComm(len(gpus))
            DataParallel(solver, comm, gpus).run(snapshot or None)
        else:
            solver.solve()
        if progress is not None:
            progress.update()
    glog.info("caffe.optimization_done", "Optimization Done.")
    return 0
