"""How data-parallel ranks talk: a communicator sums (all-reduce) or copies (broadcast) a flat
array across ranks, and GradientSync averages a net's gradients with it (Caffe's NCCL class).

``NcclComm`` runs between GPUs (cupy.cuda.nccl), in one process or one rank per process;
``ThreadComm`` in one process on any device (CPU training with several workers, the stand-in
device, and tests); ``MpiComm`` between processes started by mpirun/srun, on host buffers, with
``BucketedGradientSync`` overlapping its all-reduces with the backward pass.
"""
import collections
import os
import threading
import time
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
    """All-reduce between GPUs with NCCL through cupy; one communicator per rank/device (all the
    ranks' in one process, or this process's rank only)."""

    def __init__(self, comms, size=None):
        self._comms = comms if isinstance(comms, dict) else dict(enumerate(comms))
        self.size = size or len(self._comms)

    @staticmethod
    def _nccl(device):
        reason = backend.unavailable_reason(device)
        if reason:
            raise CaffeError(reason)
        try:
            from cupy.cuda import nccl
        except ImportError:
            raise CaffeError("multi-GPU training needs NCCL (cupy.cuda.nccl is unavailable)") \
                from None
        return nccl

    @classmethod
    def for_devices(cls, devices):
        nccl = cls._nccl(devices[0] if devices else 0)
        if len(set(devices)) != len(devices):
            raise CaffeError("NCCL cannot put two ranks on one GPU: %s" % (devices,))
        return cls(nccl.NcclCommunicator.initAll(list(devices)))

    @classmethod
    def across_processes(cls, mpi_comm, device):
        """This process's rank of an NCCL communicator over every MPI rank (one GPU each): the
        root's unique id reaches the others over MPI, as NVCaffe and Horovod do."""
        nccl = cls._nccl(device)
        uid = mpi_comm.broadcast_object(nccl.get_unique_id() if mpi_comm.rank == 0 else None)
        comm = nccl.NcclCommunicator(mpi_comm.size, uid, mpi_comm.rank)
        return cls({mpi_comm.rank: comm}, mpi_comm.size)

    @classmethod
    def for_rank(cls, uid, size, rank):
        """This process's rank of a communicator other processes join with the same ``uid``."""
        nccl = cls._nccl(context.device())
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


class MpiComm:
    """Ranks in processes of their own, started by an MPI launcher: all-reduce and broadcast
    with mpi4py on host buffers (device arrays go through the host). Waits poll, so a signal
    is handled while this rank waits for the others."""

    def __init__(self, mpi, comm):
        self.mpi, self._comm = mpi, comm
        self.rank, self.size = comm.Get_rank(), comm.Get_size()

    def start_allreduce(self, host):
        """Begin summing the numpy array ``host`` in place across ranks; returns the request."""
        return self._comm.Iallreduce(self.mpi.IN_PLACE, host, op=self.mpi.SUM)

    def allreduce_sum(self, rank, array):
        self._through_host(array, self.start_allreduce)

    def broadcast(self, rank, array, root=0):
        self._through_host(array, lambda host: self._comm.Ibcast(host, root=root))

    def _through_host(self, array, start):
        host = numpy.ascontiguousarray(backend.to_host(array))
        self.wait([start(host)])
        if host is not array:
            array[...] = backend.array_module(array).asarray(host)

    def broadcast_object(self, obj, root=0):
        """The root's ``obj`` (anything picklable) on every rank."""
        return self._comm.bcast(obj, root=root)

    def allgather_object(self, obj):
        return self._comm.allgather(obj)

    def progress(self, requests):
        """Let MPI move requests in flight along; True when all are done."""
        return self.mpi.Request.Testall(requests)

    def wait(self, requests):
        delay = 0.0
        while not self.progress(requests):
            time.sleep(delay)
            delay = min(delay + 1e-5, 1e-3)

    def abort(self):
        """End every rank of the job (a rank failed while the others may wait for it)."""
        self._comm.Abort(1)


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

    def close(self):
        """Detach from the net (training is over)."""


Bucket = collections.namedtuple("Bucket", "done_layer slices buffer")


class BucketedGradientSync(GradientSync):
    """GradientSync over MpiComm that overlaps the all-reduce with backward, as Horovod's tensor
    fusion does: the learnable params are packed, in the order backward completes them, into
    host buckets of about ``bucket_bytes``; a bucket's all-reduce starts as soon as the layer
    completing its last gradient is done (on the last of ``iter_size`` passes), later layers'
    backward runs meanwhile, and the update waits for every bucket."""

    def __init__(self, net, comm, rank, bucket_bytes, iter_size=1):
        super().__init__(net, comm, rank)
        self.iter_size = max(int(iter_size), 1)
        self.buckets = self._plan(max(int(bucket_bytes), 1))
        self._passes, self._requests, self._started = 0, [], set()
        net.after_backward.append(self._layer_done)

    def _plan(self, bucket_bytes):
        done = {}  # learnable id -> the layer whose backward completes its gradient
        for p in self.net.param_records:
            done[p.learnable_id] = min(done.get(p.learnable_id, p.layer_id), p.layer_id)
        blobs = self.net.learnable_params
        groups, group, size = [], [], 0
        for lid in sorted(done, key=lambda lid: (-done[lid], lid)):
            group.append(lid)
            size += blobs[lid].count() * self.net.dtype.itemsize
            if size >= bucket_bytes:
                groups.append(group)
                group, size = [], 0
        groups += [group] if group else []
        buckets = []
        for ids in groups:
            ends = numpy.cumsum([0] + [blobs[lid].count() for lid in ids])
            slices = [(lid, ends[k], ends[k + 1]) for k, lid in enumerate(ids)]
            buckets.append(Bucket(min(done[lid] for lid in ids), slices,
                                  numpy.empty(int(ends[-1]), dtype=self.net.dtype)))
        return buckets

    def on_start(self):
        self._passes, self._requests, self._started = 0, [], set()

    def _layer_done(self, layer_id):
        if self._passes == self.iter_size - 1:
            for k, bucket in enumerate(self.buckets):
                if bucket.done_layer == layer_id:
                    self._start(k)
            self.comm.progress(self._requests)
        if layer_id == 0:
            self._passes += 1

    def _start(self, k):
        bucket, diffs = self.buckets[k], self._arrays("diff", self.net.learnable_params)
        for lid, lo, hi in bucket.slices:
            bucket.buffer[lo:hi] = backend.to_host(diffs[lid]).reshape(-1)
        self._started.add(k)
        self._requests.append(self.comm.start_allreduce(bucket.buffer))

    def on_gradients_ready(self):
        for k in range(len(self.buckets)):
            if k not in self._started:
                self._start(k)
        self.comm.wait(self._requests)
        diffs = self._arrays("diff", self.net.learnable_params)
        for bucket in self.buckets:
            flat = bucket.buffer
            flat *= 1.0 / self.comm.size
            for lid, lo, hi in bucket.slices:
                a = diffs[lid]
                a[...] = backend.array_module(a).asarray(flat[lo:hi].reshape(a.shape))

    def close(self):
        self.net.after_backward.remove(self._layer_done)
