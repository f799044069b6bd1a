"""How data-parallel ranks talk: a communicator sums (all-reduce) or copies (broadcast) a flat
array across ranks, and GradientSync averages a net's gradients with it (Caffe's NCCL class).

``NcclComm`` runs between GPUs (cupy.cuda.nccl); ``ThreadComm`` in one process on any device
(CPU training with several workers, the stand-in device, and tests).
"""
import os
import threading
import weakref

import numpy

from . import backend, context
from .errors import CaffeError

UID_BYTES = 128  # NCCL_UNIQUE_ID_BYTES


def nccl_module():
    """cupy's NCCL binding when GPUs can talk through it; None without cupy or on the stand-in."""
    if backend.is_standin() or backend.device_module() is None:
        return None
    try:
        from cupy.cuda import nccl
    except ImportError:
        return None
    return nccl if getattr(nccl, "available", True) else None


def new_uid():
    """A communicator id as bytes (pycaffe's NCCL.new_uid): NCCL's unique id where NCCL is
    available, else random bytes naming an in-process ThreadComm."""
    nccl = nccl_module()
    if nccl is None:
        return os.urandom(UID_BYTES)
    return numpy.asarray(nccl.get_unique_id(), dtype=numpy.int8).tobytes()


_thread_comms = weakref.WeakValueDictionary()   # uid -> ThreadComm, while a rank holds it
_thread_comms_lock = threading.Lock()


def thread_comm(uid, size):
    """The ThreadComm that ranks (threads of this process) passing ``uid`` share; it lives as
    long as some rank keeps it."""
    with _thread_comms_lock:
        comm = _thread_comms.setdefault(bytes(uid), ThreadComm(size))
    if comm.size != size:
        raise CaffeError("communicator id already used by %d ranks; this rank expects %d "
                         "(set_solver_count)" % (comm.size, size))
    return comm


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
            total = self._slots[0].copy()
            for a in self._slots[1:]:
                total += a
            self._result = total
        self._barrier.wait()
        array[...] = self._result
        self._barrier.wait()

    def abort(self):
        """Release ranks waiting on the others (one rank failed): they raise BrokenBarrierError."""
        self._barrier.abort()

    def broadcast(self, rank, array, root=0):
        """Copy root's ``array`` into every rank's."""
        self._slots[rank] = array
        self._barrier.wait()
        if rank != root:
            array[...] = self._slots[root]
        self._barrier.wait()


class NcclComm:
    """All-reduce between GPUs with NCCL through cupy; one communicator per rank/device."""

    def __init__(self, comms, size=None):
        self._comms = comms   # rank -> communicator: every rank's, or this process's one
        self.size = len(comms) if size is None else size

    @classmethod
    def for_devices(cls, devices):
        reason = backend.unavailable_reason(devices[0] if devices else 0)
        if reason:
            raise CaffeError(reason)
        try:
            from cupy.cuda import nccl
        except ImportError:
            raise CaffeError("multi-GPU training needs NCCL (cupy.cuda.nccl is unavailable)") \
                from None
        if len(set(devices)) != len(devices):
            raise CaffeError("NCCL cannot put two ranks on one GPU: %s" % (devices,))
        return cls(dict(enumerate(nccl.NcclCommunicator.initAll(list(devices)))))

    @classmethod
    def for_rank(cls, uid, size, rank):
        """This process's rank of a communicator other processes join with the same ``uid``."""
        from cupy.cuda import nccl
        if len(uid) != UID_BYTES:
            raise CaffeError("an NCCL id has %d bytes, got %d (use NCCL.new_uid())"
                             % (UID_BYTES, len(uid)))
        comm_id = tuple(numpy.frombuffer(bytes(uid), dtype=numpy.int8).tolist())
        return cls({rank: nccl.NcclCommunicator(size, comm_id, rank)}, size)

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
        for comm in self._comms.values():
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

    def _arrays(self, attr, params):
        """The ``attr`` arrays of ``params`` on the mode's side (where the solver updates)."""
        side = context.mode()
        return [getattr(p.at(side), attr) for p in params]

    def _flat(self, arrays):
        xp = backend.array_module(*arrays)
        return xp.concatenate([a.reshape(-1) for a in arrays]) if arrays \
            else xp.zeros(0, dtype=self.net.dtype)

    def _scatter(self, flat, arrays):
        offset = 0
        for a in arrays:
            a[...] = flat[offset:offset + a.size].reshape(a.shape)
            offset += a.size

    def on_start(self):
        """Nothing to do before forward (Caffe's NCCL reduces after backward)."""

    def on_gradients_ready(self):
        self.average_diffs(self.net.learnable_params)

    def average_diffs(self, params):
        """Replace the diffs of ``params`` by their mean over the ranks (every rank passes the
        same parameters, in the same order)."""
        arrays = self._arrays("diff", params)
        flat = self._flat(arrays)
        self.comm.allreduce_sum(self.rank, flat)
        flat *= 1.0 / self.comm.size
        self._scatter(flat, arrays)

    def broadcast_params(self):
        """Give every rank the root's weights (done once before training)."""
        arrays = self._arrays("data", self.net.learnable_params)
        flat = self._flat(arrays)
        self.comm.broadcast(self.rank, flat, 0)
        self._scatter(flat, arrays)
