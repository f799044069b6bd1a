"""Data-parallel training, as Caffe's multi-GPU (parallel.cpp): one solver per device, each on
its own batch, gradients all-reduced and averaged before every update.

A communicator sums a flat array across ranks: ``NcclComm`` on GPUs (cupy.cuda.nccl), and
``ThreadComm`` in one process on any backend (CPU training with several workers, and tests).
Data layers hand each rank a distinct share of the records through ``solver_rank()`` /
``solver_count()`` (record k goes to rank k % count, as Caffe's DataLayer::Skip).
"""
import contextlib
import threading

from . import backend
from .errors import CaffeError

_local = threading.local()
_group = {"count": 1}


def solver_count():
    """How many solvers train together (1 without data parallelism)."""
    return _group["count"]


def solver_rank():
    """This thread's rank among them (0 is the root solver, which tests and logs)."""
    return getattr(_local, "rank", 0)


def is_root_solver():
    return solver_rank() == 0


def _set_rank(rank):
    _local.rank = rank


@contextlib.contextmanager
def solver_group(size):
    """solver_count() is ``size`` inside: set before the root solver is built, as caffe.cpp
    calls Caffe::set_solver_count, so its data layers already take their share."""
    previous = _group["count"]
    _group["count"] = int(size)
    try:
        yield
    finally:
        _group["count"] = previous


class ThreadComm:
    """In-process all-reduce over ``size`` threads (one rank each) with a barrier."""

    def __init__(self, size):
        self.size = size
        self._barrier = threading.Barrier(size)
        self._slots = [None] * size
        self._result = None

    def allreduce_sum(self, rank, array):
        """Replace ``array`` (numpy or cupy) with the sum of every rank's array."""
        self._slots[rank] = array
        if self._barrier.wait() == 0:
            total = backend.to_host(self._slots[0]).copy()
            for a in self._slots[1:]:
                total += backend.to_host(a)
            self._result = total
        self._barrier.wait()
        array[...] = backend.get_array_module(array).asarray(self._result)
        self._barrier.wait()

    def abort(self):
        """Release ranks waiting on the others (one rank failed): they raise BrokenBarrierError."""
        self._barrier.abort()

    def broadcast(self, rank, array, root=0):
        """Copy root's ``array`` into every rank's."""
        self._slots[rank] = array
        self._barrier.wait()
        if rank != root:
            array[...] = backend.get_array_module(array).asarray(
                backend.to_host(self._slots[root]))
        self._barrier.wait()


class NcclComm:
    """All-reduce between GPUs with NCCL through cupy; one communicator per rank/device."""

    def __init__(self, comms):
        self._comms = comms
        self.size = len(comms)

    @classmethod
    def for_devices(cls, devices):
        reason = backend.gpu_unavailable_reason(devices[0] if devices else 0)
        if reason:
            raise CaffeError(reason)
        try:
            from cupy.cuda import nccl
        except ImportError:
            raise CaffeError("multi-GPU training needs NCCL (cupy.cuda.nccl is unavailable)") \
                from None
        if len(set(devices)) != len(devices):
            raise CaffeError("NCCL cannot put two ranks on one GPU: %s" % (devices,))
        return cls(nccl.NcclCommunicator.initAll(list(devices)))

    def _dtype(self, array):
        from cupy.cuda import nccl
        return {"float32": nccl.NCCL_FLOAT32, "float64": nccl.NCCL_FLOAT64}[str(array.dtype)]

    def allreduce_sum(self, rank, array):
        import cupy
        from cupy.cuda import nccl
        stream = cupy.cuda.get_current_stream()
        self._comms[rank].allReduce(array.data.ptr, array.data.ptr, array.size,
                                    self._dtype(array), nccl.NCCL_SUM, stream.ptr)
        stream.synchronize()

    def abort(self):
        """Tear the communicators down so ranks blocked in a collective return with an error."""
        for comm in self._comms:
            try:
                comm.abort()
            except Exception:  # already destroyed, or an old NCCL without abort
                pass

    def broadcast(self, rank, array, root=0):
        import cupy
        stream = cupy.cuda.get_current_stream()
        self._comms[rank].bcast(array.data.ptr, array.size, self._dtype(array), root,
                                stream.ptr)
        stream.synchronize()


class GradientSync:
    """Averages one rank's learnable-parameter diffs with the other ranks' (Caffe's NCCL
    on_gradients_ready): flatten, all-reduce sum, scale by 1/size, scatter back."""

    def __init__(self, net, comm, rank):
        self.net, self.comm, self.rank = net, comm, rank

    def _flat(self, attr):
        xp = backend.xp()
        params = self.net.learnable_params
        return xp.concatenate([getattr(p, attr).reshape(-1) for p in params]) if params \
            else xp.zeros(0, dtype=self.net.dtype)

    def _scatter(self, flat, attr):
        offset = 0
        for p in self.net.learnable_params:
            n = p.count
            getattr(p, attr)[...] = flat[offset:offset + n].reshape(p.shape)
            offset += n

    def on_start(self):
        """Nothing to do before forward (Caffe's NCCL reduces after backward)."""

    def on_gradients_ready(self):
        flat = self._flat("diff")
        self.comm.allreduce_sum(self.rank, flat)
        flat *= 1.0 / self.comm.size
        self._scatter(flat, "diff")

    def broadcast_params(self):
        """Give every rank the root's weights (done once before training)."""
        flat = self._flat("data")
        self.comm.broadcast(self.rank, flat, 0)
        self._scatter(flat, "data")


def run_ranks(size, work, on_error=None):
    """Run ``work(rank)`` in ``size`` threads with solver_rank()/solver_count() set; re-raise
    the first failure. Rank 0 runs in the calling thread (it owns logging and testing).
    ``on_error`` (e.g. a communicator's abort) is called at the first failure so the other
    ranks do not wait for the failed one forever."""
    errors = []

    def entry(rank):
        _set_rank(rank)
        try:
            work(rank)
        except BaseException as exc:  # surfaced to the caller below
            first = not errors
            errors.append(exc)
            if first and on_error is not None:
                on_error()

    threads = [threading.Thread(target=entry, args=(r,), daemon=True) for r in range(1, size)]
    with solver_group(size):
        try:
            for t in threads:
                t.start()
            entry(0)
            for t in threads:
                t.join()
        finally:
            _set_rank(0)
    if errors:
        # a rank's own error beats the BrokenBarrierError it caused in the others
        real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
        raise (real or errors)[0]
