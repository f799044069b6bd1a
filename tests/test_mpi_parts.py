"""The pieces of training across processes, in one process: which launcher started us and as
which rank, the cores each rank takes, which GPU a rank takes, bucketed all-reduces that start
while backward runs, signals agreed by vote, and the one line when mpi4py is missing."""
import sys
import threading

import numpy
import pytest

from caffecli import comms, context, launcher
from caffecli.cli import mpi_rank
from caffecli.cli.main import main
from caffecli.errors import CaffeError
from caffecli.net import Net, TRAIN
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from caffecli.solvers.data_parallel import ActionSync, run_ranks

OPEN_MPI = {"OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_SIZE": "8",
            "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "2"}
HYDRA = {"PMI_RANK": "1", "PMI_SIZE": "2", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}
SRUN = {"SLURM_PROCID": "5", "SLURM_STEP_NUM_TASKS": "7", "SLURM_LOCALID": "1",
        "SLURM_NODEID": "2", "SLURM_STEP_TASKS_PER_NODE": "2(x2),3"}


@pytest.mark.parametrize("env, world", [
    (OPEN_MPI, launcher.World("Open MPI", 3, 8, 1, 2)),
    (HYDRA, launcher.World("MPICH", 1, 2, 1, 2)),
    (SRUN, launcher.World("Slurm", 5, 7, 1, 3)),
    # mpirun inside a Slurm allocation: the allocation's variables are inherited, mpirun's win
    (dict(SRUN, **HYDRA), launcher.World("MPICH", 1, 2, 1, 2)),
])
def test_the_launchers_variables_name_the_rank(env, world):
    assert launcher.detect(env) == world


@pytest.mark.parametrize("env", [{}, {"PMI_RANK": "0", "PMI_SIZE": "1"},
                                 {"SLURM_PROCID": "0", "SLURM_NTASKS": "4"}])
def test_no_launcher_or_a_single_rank_trains_as_a_plain_process(env):
    assert launcher.detect(env) is None


def test_each_rank_gets_its_share_of_the_cores_unless_the_user_set_threads(monkeypatch):
    monkeypatch.setattr(launcher.os, "sched_getaffinity", lambda pid: set(range(8)))
    env = dict(OPEN_MPI)
    assert launcher.share_cpus(env) == 4 and env["OMP_NUM_THREADS"] == "4"
    env = dict(OPEN_MPI, OPENBLAS_NUM_THREADS="3")
    assert launcher.share_cpus(env) is None and "OMP_NUM_THREADS" not in env
    assert launcher.share_cpus({}) is None


def test_a_rank_takes_its_own_gpu_of_the_list():
    world = launcher.World("MPICH", 3, 4, 1, 2)
    assert mpi_rank.local_device([4, 6], world) == 6
    assert mpi_rank.local_device([2], world) == 2  # each rank shown its own GPU as device 2
    with pytest.raises(CaffeError, match=r"3 ranks run on this machine but --gpu names 2 GPUs "
                                         r"\(0,5\): give one per rank"):
        mpi_rank.local_device([0, 5], world._replace(local_size=3))


def test_bucket_size_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv(mpi_rank.BUCKET_MB_VAR, "0.5")
    assert mpi_rank.bucket_bytes() == 1 << 19
    monkeypatch.setenv(mpi_rank.BUCKET_MB_VAR, "lots")
    with pytest.raises(CaffeError, match="CAFFECLI_BUCKET_MB must be a positive number"):
        mpi_rank.bucket_bytes()


def test_a_joined_process_is_its_rank_in_every_thread():
    seen = []
    context.join_world(3, 4)
    try:
        thread = threading.Thread(target=lambda: seen.append(
            (context.solver_rank(), context.solver_count(), context.data_share(True),
             context.data_share(False))))
        thread.start()
        thread.join()
    finally:
        context.join_world(0, 1)
    assert seen == [(3, 4, (3, 4), (0, 1))]


# ---- bucketed all-reduce --------------------------------------------------------------------
NET = """name: "b" force_backward: false
layer { name: "data" type: "DummyData" top: "x" top: "y" dummy_data_param {
  shape { dim: 4 dim: 2 dim: 6 dim: 6 } shape { dim: 4 }
  data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "c" convolution_param {
  num_output: 3 kernel_size: 3 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "c" top: "h" inner_product_param {
  num_output: 40 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "s" inner_product_param {
  num_output: 5 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "s" bottom: "y" top: "loss" }
"""


class RecordingComm:
    """Stands in for MpiComm: ``size`` ranks whose gradients equal this one's; notes the layer
    whose backward had just finished when each all-reduce started."""
    size = 2

    def __init__(self, net):
        self.layer, self.started = None, []
        net.after_backward.append(lambda i: setattr(self, "layer", net.layer_names[i]))

    def start_allreduce(self, host):
        host *= self.size
        self.started.append((self.layer, host.size))
        return None

    def progress(self, requests):
        return True

    def wait(self, requests):
        pass


def diffs(net):
    return [p.diff.copy() for p in net.learnable_params]


def test_buckets_start_reducing_while_backward_still_runs():
    net = Net(parse_text(NET, caffe_pb2.NetParameter()), TRAIN, log=False)
    comm = RecordingComm(net)
    # ip2 (205 floats) + ip1 (1960) fill one bucket, conv's 57 the next
    sync = comms.BucketedGradientSync(net, comm, 0, bucket_bytes=4 * 2150)
    sync.on_start()
    net.forward_backward()
    alone = diffs(net)
    sync.on_gradients_ready()
    assert comm.started == [("ip1", 205 + 1960), ("conv", 57)]
    for got, want in zip(diffs(net), alone):  # summed over 2 equal ranks, averaged
        numpy.testing.assert_allclose(got, want, rtol=1e-6)
    sync.close()
    assert net.after_backward == net.after_backward[:1]  # only RecordingComm's hook is left


def test_with_iter_size_the_buckets_wait_for_the_last_pass():
    net = Net(parse_text(NET, caffe_pb2.NetParameter()), TRAIN, log=False)
    comm = RecordingComm(net)
    sync = comms.BucketedGradientSync(net, comm, 0, bucket_bytes=1, iter_size=2)
    sync.on_start()
    net.forward_backward()
    assert comm.started == []
    net.forward_backward()
    assert [layer for layer, _ in comm.started] == ["ip2", "ip2", "ip1", "ip1", "conv", "conv"]
    sync.on_gradients_ready()
    assert len(comm.started) == 6


# ---- requests agreed by vote ----------------------------------------------------------------
class Idle:
    testing = False


@pytest.mark.parametrize("votes, agreed", [
    (("none", "stop"), "stop"), (("snapshot", "none"), "snapshot"),
    (("snapshot", "stop"), "stop"), (("none", "none"), "none")])
def test_any_ranks_signal_is_every_ranks_answer(votes, agreed):
    comm, answers = comms.ThreadComm(2), {}

    def work(rank):
        answers[rank] = ActionSync(Idle(), comm, rank, lambda: votes[rank])()
    run_ranks(2, work)
    assert answers == {0: agreed, 1: agreed}


# ---- mpi4py missing -------------------------------------------------------------------------
@pytest.mark.parametrize("rank", ["0", "1"])
def test_mpirun_without_mpi4py_says_which_extra_once(rank, monkeypatch, capsys, tmp_path):
    monkeypatch.setitem(sys.modules, "mpi4py", None)  # makes "import mpi4py" fail
    for name, value in dict(HYDRA, PMI_RANK=rank).items():
        monkeypatch.setenv(name, value)
    try:   # main() returns the status; a quiet rank leaves through SystemExit
        status = main(["train", "--solver", str(tmp_path / "solver.prototxt")])
    except SystemExit as exc:
        status = exc.code
    assert status == 1
    err = capsys.readouterr().err
    if rank == "0":
        assert err.strip() == ("caffecli: error: MPICH started caffecli as 2 ranks, and training "
                               "across processes needs mpi4py: pip install 'caffecli[mpi]'")
    else:
        assert err == ""


# ---- NCCL across processes (no GPU here: the handshake only) ---------------------------------
class FakeNccl:
    """cupy.cuda.nccl's two calls the handshake makes, recorded; each id is a new one."""
    ids, made = [], []

    @classmethod
    def get_unique_id(cls):
        cls.ids.append(("id", len(cls.ids)))
        return cls.ids[-1]

    class NcclCommunicator:
        def __init__(self, size, uid, rank):
            FakeNccl.made.append((size, uid, rank))


class SentComm:
    """An MpiComm's object broadcast, as rank ``rank`` of 3 sees it: the root keeps its own
    object, the others get what the root sent."""

    def __init__(self, rank, sent=None):
        self.rank, self.size, self.sent = rank, 3, sent

    def broadcast_object(self, obj, root=0):
        return obj if self.rank == root else self.sent


def test_every_rank_joins_nccl_with_the_roots_unique_id(monkeypatch):
    monkeypatch.setattr(comms.NcclComm, "_nccl", staticmethod(lambda device: FakeNccl))
    root = comms.NcclComm.across_processes(SentComm(0), device=0)
    others = [comms.NcclComm.across_processes(SentComm(rank, FakeNccl.ids[0]), device=rank)
              for rank in (1, 2)]
    assert FakeNccl.ids == [("id", 0)]  # only the root asked NCCL for one
    assert FakeNccl.made == [(3, ("id", 0), 0), (3, ("id", 0), 1), (3, ("id", 0), 2)]
    assert [sorted(c._comms) for c in [root] + others] == [[0], [1], [2]]
    assert {c.size for c in [root] + others} == {3}
