"""``caffecli train`` as one rank of an MPI job (mpirun, mpiexec or srun started it): MPI through
mpi4py, this process's rank in the run context, quiet ranks other than the root, this rank's GPU,
and an exit that never leaves the other ranks waiting.

A rank that fails prints one line and aborts the job (MPI_Abort), so every rank ends; a failure
while setting up is agreed first, so the job prints one line and every rank exits cleanly. A
SIGTERM (Open MPI's mpirun sends one to every rank when a rank died or it was interrupted, then
SIGKILL) ends the rank at once, the root saying so in one line.
"""
import atexit
import contextlib
import os
import signal
import sys
import time

from .. import comms, context, glog
from ..errors import CaffeError
from ..util.optional import MissingExtra
from .errors import one_line

BUCKET_MB_VAR = "CAFFECLI_BUCKET_MB"
DEFAULT_BUCKET_MB = 1.0
ABORT_GRACE_S = 0.5  # before MPI_Abort: time for the launcher to forward this rank's last lines


class RankError(CaffeError):
    """A failure on one rank, its message naming the rank."""


def bucket_bytes():
    """The all-reduce bucket size (Horovod's fusion threshold): CAFFECLI_BUCKET_MB, in MiB."""
    text = os.environ.get(BUCKET_MB_VAR, "") or str(DEFAULT_BUCKET_MB)
    try:
        mb = float(text)
    except ValueError:
        mb = -1.0
    if mb <= 0:
        raise CaffeError("%s must be a positive number of MiB, got '%s'" % (BUCKET_MB_VAR, text))
    return int(mb * (1 << 20))


def local_device(gpus, world):
    """This rank's GPU from the --gpu list: the k-th for the k-th rank on this machine, or the
    only one listed for every rank (a scheduler that shows each rank its own GPU as device 0)."""
    if len(gpus) == 1:
        return gpus[0]
    if world.local_size > len(gpus):
        raise CaffeError("%d ranks run on this machine but --gpu names %d GPUs (%s): give one "
                         "per rank" % (world.local_size, len(gpus), ",".join(map(str, gpus))))
    return gpus[world.local_rank]


def _import_mpi(world):
    try:
        import mpi4py
    except ImportError:
        if world.rank:
            raise SystemExit(1) from None  # the root says it, once
        raise MissingExtra("%s started caffecli as %d ranks, and training across processes "
                           "needs mpi4py: pip install 'caffecli[mpi]'"
                           % (world.launcher, world.size)) from None
    mpi4py.rc.finalize = False  # Rank._exit decides: Finalize after success, else Abort
    mpi4py.rc.thread_level = "funneled"  # only the solver's thread calls MPI
    from mpi4py import MPI
    return MPI


class Rank:
    """This process's place in the MPI job the launcher started (``world``, launcher.World)."""

    def __init__(self, world):
        mpi = _import_mpi(world)
        self.world, self.comm = world, comms.MpiComm(mpi, mpi.COMM_WORLD)
        self.rank, self.size = self.comm.rank, self.comm.size
        self.ok = self.size != world.size  # then each process is an MPI job of its own
        self.solver = None
        atexit.register(self._exit)
        if self.ok:
            if world.rank:
                raise SystemExit(1)
            raise CaffeError("%s started %d ranks but MPI sees %d: mpi4py uses another MPI "
                             "than the launcher's (%s)" % (world.launcher, world.size, self.size,
                                                           mpi.Get_library_version().strip()
                                                           .split("\n")[0]))
        context.join_world(self.rank, self.size)
        if self.rank:
            glog.set_min_level(max(1, glog.min_level()))
        signal.signal(signal.SIGTERM, self._terminated)

    def _exit(self):
        if self.ok:
            self.comm.mpi.Finalize()
        else:  # MPICH's launcher drops what it has not forwarded yet when the job aborts
            for stream in (sys.stdout, sys.stderr):
                stream.flush()
            time.sleep(ABORT_GRACE_S)
            self.comm.abort()

    def _terminated(self, signum, frame):
        if self.rank == 0:
            at = " at iteration %d" % self.solver.iter if self.solver is not None else ""
            os.write(2, ("caffecli: error: the MPI launcher ended the job%s (SIGTERM: a rank "
                         "failed or the job was cancelled)\n" % at).encode())
        os._exit(128 + signum)

    @contextlib.contextmanager
    def setup(self):
        """Set up on every rank, then agree: when any rank failed, the lowest failing one
        reports its error and every rank exits with status 1 (none waits for the others)."""
        failure = None
        try:
            yield
        except Exception as exc:  # noqa: BLE001 - every failure must reach the agreement
            failure = exc
        messages = self.comm.allgather_object(None if failure is None else one_line(failure))
        failed = [r for r, m in enumerate(messages) if m is not None]
        if failed:
            self.ok = True  # every rank stops here: a clean exit, no abort
            if failed[0] != self.rank:
                raise SystemExit(1)
            raise self._named(failure) from failure

    def _named(self, exc):
        return RankError("rank %d of %d: %s" % (self.rank, self.size, one_line(exc)))

    def run(self, train):
        """``train()``; a failure names this rank and, at exit, aborts the whole job."""
        try:
            status = train()
        except RankError:
            raise
        except Exception as exc:
            raise self._named(exc) from exc
        self.ok = True
        return status
