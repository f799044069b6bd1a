"""The run context (Caffe's ``Caffe`` singleton): mode, device, data-parallel rank and each
rank's seeded random stream.

The mode only says which side (host or device) a layer or solver asks its blobs for; where data
lives is the data's business (SyncedMemory). Ranks are per thread, as Caffe's solver threads are;
threads outside any rank (prefetchers, user code) have the process's rank: 0, or this process's
MPI rank when the solvers are processes (``join_world``).
"""
import contextlib
import threading

from . import backend, caffe_rng
from .errors import CaffeError

CPU, GPU = "CPU", "GPU"

_run = {"mode": CPU, "device": 0, "solver_count": 1, "multiprocess": False,
        "process_rank": 0}
_thread = threading.local()
_streams = {}


# ---- mode and device ----------------------------------------------------------------------
def mode():
    return _run["mode"]


def is_gpu():
    return _run["mode"] == GPU


def set_mode_cpu():
    _run["mode"] = CPU


def set_mode_gpu():
    """Compute on the device from now on; fails with one line when no GPU can be used."""
    reason = backend.unavailable_reason(_run["device"])
    if reason:
        raise CaffeError(reason)
    _run["mode"] = GPU
    backend.use_device(_run["device"])


def set_device(device):
    _run["device"] = int(device)
    if _run["mode"] == GPU:
        backend.use_device(int(device))


def device():
    return _run["device"]


def use_device_here(device_id):
    """Make ``device_id`` current for this thread only (a data-parallel rank's thread)."""
    if _run["mode"] == GPU:
        backend.use_device(device_id)


# ---- data-parallel ranks ------------------------------------------------------------------
def solver_count():
    """How many solvers train together (1 without data parallelism)."""
    return _run["solver_count"]


def solver_rank():
    """This thread's rank among them (0 is the root solver, which tests and logs)."""
    return getattr(_thread, "rank", _run["process_rank"])


def is_root_solver():
    return solver_rank() == 0


def set_solver_rank(rank):
    _thread.rank = int(rank)


def set_solver_count(count):
    """pycaffe's set_solver_count: ranks built from now on take their share of ``count``."""
    _run["solver_count"] = int(count)


def multiprocess():
    """Whether each rank runs in its own process (pycaffe's train.py), not a thread of this one."""
    return _run["multiprocess"]


def set_multiprocess(value):
    _run["multiprocess"] = bool(value)


@contextlib.contextmanager
def solver_group(size):
    """solver_count() is ``size`` inside: set before the root solver is built, as caffe.cpp calls
    Caffe::set_solver_count, so its data layers already take their share."""
    previous = _run["solver_count"]
    _run["solver_count"] = int(size)
    try:
        yield
    finally:
        _run["solver_count"] = previous


def join_world(rank, size):
    """This process is solver ``rank`` of ``size`` processes (an MPI job): every thread of it
    that is not a rank of its own has that rank."""
    _run["process_rank"], _run["solver_count"] = int(rank), int(size)


def data_share(train):
    """The (rank, count) share of the records a data layer reads: data-parallel ranks deal the
    records of the TRAIN phase among them; only the root tests, so TEST reads them all."""
    return (solver_rank(), solver_count()) if train else (0, 1)


# ---- random streams -----------------------------------------------------------------------
def set_random_seed(seed):
    """Seed this rank's streams as Caffe::set_random_seed seeds its generator and cuRAND's
    (an unsigned 32-bit seed): fillers, host dropout masks, shuffles and crops then draw
    Caffe's numbers, and device draws repeat."""
    seed = int(seed) & 0xFFFFFFFF
    _streams[solver_rank()] = (caffe_rng.Stream(seed), caffe_rng.Stream(seed), True)


def _entry():
    rank = solver_rank()
    entry = _streams.get(rank)
    if entry is None:
        entry = _streams[rank] = (caffe_rng.Stream.unseeded(), caffe_rng.Stream.unseeded(),
                                  False)
    return entry


def rng():
    """This rank's caffe_rng.Stream (seeded from the system's entropy the first time a rank
    asks, as Caffe's is when no seed was set)."""
    return _entry()[0]


def device_rng():
    """This rank's stream for draws made on the device (Caffe's cuRAND generator, seeded
    with the same seed): the keys of the device's counter-based draws, so that a GPU run
    takes from the host stream only what Caffe's GPU mode takes."""
    return _entry()[1]


def rng_seeded():
    """Whether this rank's stream was seeded (its numbers are then Caffe's, in Caffe's order)."""
    entry = _streams.get(solver_rank())
    return entry is not None and entry[2]


def rng_state():
    host, device, _ = _entry()
    return {"host": host.state, "device": device.state}


def set_rng_state(state):
    host, device, _ = _entry()
    host.state, device.state = state["host"], state["device"]
