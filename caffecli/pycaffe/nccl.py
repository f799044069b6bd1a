"""pycaffe's ``caffe.NCCL``: one rank's share of data-parallel training (BVLC's python/train.py),
over the project's communicators.

``NCCL(solver, uid)`` joins the communicator ``uid`` names as rank ``solver_rank()`` of
``solver_count()``: NCCL between GPUs (cupy) in GPU mode where NCCL is available, whether the
ranks are processes or threads; otherwise a ThreadComm that the threads of this process passing
the same ``uid`` share (CPU mode, the stand-in device). ``solver.add_callback(nccl)`` averages
the gradients after each backward; with ``layer_wise_reduce``, ``solver.net.after_backward(nccl)``
averages each layer's as soon as that layer's backward is done, as Caffe does.
"""
from .. import comms, context
from ..errors import CaffeError


def has_nccl():
    """Whether GPUs can exchange gradients through NCCL here (pycaffe: built with USE_NCCL).
    ``caffe.NCCL`` also works without it, between threads of one process."""
    return comms.nccl_module() is not None


class NCCL:
    """Gradient averaging for one rank; a solver callback and a net after-backward callback."""

    def __init__(self, solver, uid):
        engine = getattr(solver, "engine", solver)
        rank, size = context.solver_rank(), context.solver_count()
        if context.is_gpu() and has_nccl():
            comm = comms.NcclComm.for_rank(uid, size, rank)
        elif context.multiprocess():
            raise CaffeError("caffe.NCCL between processes needs GPUs with NCCL (cupy.cuda.nccl);"
                             " without it, run the ranks as threads of one process")
        else:
            comm = comms.thread_comm(uid, size)
        self._net = engine.net
        self._sync = comms.GradientSync(engine.net, comm, rank)
        self._averaged = set()  # learnable ids averaged layer-wise since on_start

    @staticmethod
    def new_uid():
        """A fresh communicator id (bytes) to hand to every rank."""
        return comms.new_uid()

    def bcast(self):
        """Give this rank the root's weights; every rank calls it once before training."""
        self._sync.broadcast_params()

    def on_start(self):
        self._averaged.clear()

    def on_gradients_ready(self):
        """Average the gradients that no layer-wise call has averaged this iteration (all of
        them without ``net.after_backward(nccl)``)."""
        rest = [i for i in range(len(self._net.learnables)) if i not in self._averaged]
        self._sync.average_diffs([self._net.learnables[i].blob for i in rest])

    def __call__(self, layer):
        """After layer ``layer``'s backward: average the gradients of the parameters it owns
        (a shared parameter is averaged at its owner, the last layer to add to it)."""
        records = self._net.param_records
        ids = [records[pid].learnable_id for pid in self._net.records[layer].param_ids
               if records[pid].owner < 0]
        self._averaged.update(ids)
        self._sync.average_diffs([self._net.learnables[i].blob for i in ids])
