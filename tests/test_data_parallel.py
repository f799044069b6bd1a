"""Data-parallel training (Caffe's multi-GPU path) run on the CPU with a thread communicator:
n ranks on batch b train exactly as one solver on batch n*b, only the root tests and snapshots,
every rank stops together, a failing rank does not hang the others, and ``train -gpu 0,1``
goes through it."""
import os

import numpy
import pytest

from caffecli import comms, context, registry
from caffecli.cli.main import main
from caffecli.layer import Layer
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from caffecli.solvers import get_solver
from caffecli.solvers.data_parallel import DataParallel

SEEN = []  # (rank, count) of every RankData layer set up


class RankData(Layer):
    """Record k is (x_k, y_k) from a fixed formula; a rank keeps record k when k % count ==
    rank, as Caffe's DataLayer::Skip hands out a database's records. It makes its batches on
    the host, as data layers do."""
    device_code = False
    exact_num_bottom_blobs = 0
    exact_num_top_blobs = 2

    def setup(self, bottom, top):
        self.rank, self.count = context.solver_rank(), context.solver_count()
        self.batch = int(self.layer_param.python_param.param_str or 4)
        self.offset = 0
        self.fail_at = int(os.environ.get("RANKDATA_FAIL_AT", "-1"))
        self.calls = 0
        SEEN.append((self.rank, self.count))

    def reshape(self, bottom, top):
        top[0].reshape((self.batch, 3))
        top[1].reshape((self.batch, 2))

    def forward(self, bottom, top):
        self.calls += 1
        if self.rank == 1 and self.calls == self.fail_at:
            raise RuntimeError("rank 1 data failed")
        ks = []
        while len(ks) < self.batch:
            if self.offset % self.count == self.rank:
                ks.append(self.offset % 37)
            self.offset += 1
        k = numpy.asarray(ks, dtype=numpy.float64)[:, None]
        x = numpy.concatenate([numpy.sin(k), numpy.cos(2 * k), k / 37.0], axis=1)
        top[0].data[...] = x
        top[1].data[...] = numpy.concatenate([x[:, :1] - x[:, 1:2], 2 * x[:, 2:]], axis=1)

    def get_data_state(self):  # records taken: the same on every rank, so the root's fits all
        return {"taken": self.calls * self.batch}

    def set_data_state(self, state):
        self.calls = state["taken"] // self.batch
        self.offset = state["taken"] * self.count


@pytest.fixture(autouse=True)
def rank_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # final snapshots land here
    registry.unregister_layer("TestRankData")
    registry.register_layer("TestRankData")(RankData)
    SEEN.clear()
    yield
    registry.unregister_layer("TestRankData")


NET = """name: "dp"
layer { name: "data" type: "TestRankData" top: "x" top: "y" python_param { param_str: "%d" } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "p"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
                        bias_filler { type: "constant" value: 0.1 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "p" bottom: "y" top: "loss" }
"""

SOLVER = """base_lr: 0.1
momentum: 0.9
weight_decay: 0.001
lr_policy: "fixed"
max_iter: %d
display: 1
random_seed: 3
type: "%s"
"""


def solver_param(batch, max_iter=8, kind="SGD", extra=""):
    param = parse_text(SOLVER % (max_iter, kind) + extra, caffe_pb2.SolverParameter())
    param.net_param.CopyFrom(parse_text(NET % batch, caffe_pb2.NetParameter()))
    return param


def weights(solver):
    return [p.data.copy() for p in solver.net.learnable_params]


def train_parallel(param, ranks, request=None, snapshot=None):
    with context.solver_group(ranks):
        root = get_solver(param)
        if request is not None:
            root.action_request = request
        dp = DataParallel(root, comms.ThreadComm(ranks))
        dp.run(snapshot)
    return dp


@pytest.mark.parametrize("kind", ["SGD", "Adam"])
def test_two_ranks_train_as_one_solver_on_the_whole_batch(kind):
    single = get_solver(solver_param(8, kind=kind))
    single.solve()
    dp = train_parallel(solver_param(4, kind=kind), 2)
    assert sorted(SEEN) == [(0, 1), (0, 2), (1, 2)]
    root, worker = dp.solvers
    assert root.iter == worker.iter == 8
    for a, b, c in zip(weights(root), weights(worker), weights(single)):
        assert numpy.array_equal(a, b)  # every rank applies the same averaged gradient
        assert numpy.allclose(a, c, rtol=1e-5, atol=1e-6)
    assert not numpy.allclose(weights(root)[0], weights(get_solver(solver_param(4)))[0])


def test_only_the_root_tests_and_snapshots(tmp_path, logs):
    extra = ('test_iter: 2\ntest_interval: 4\nsnapshot: 4\nsnapshot_prefix: "dp"\n'
             'test_initialization: false\n')
    dp = train_parallel(solver_param(4, extra=extra), 2)
    log = logs.getvalue()
    root, worker = dp.solvers
    assert len(root.test_nets) == 1 and worker.test_nets == []
    assert log.count("Test net output #0: loss") == 2  # iterations 4 and 8, root only
    assert log.count("Iteration 8, loss") == 1
    assert sorted(os.listdir(tmp_path)) == sorted(
        "dp_iter_%d.%s" % (i, ext) for i in (4, 8)
        for ext in ("caffemodel", "solverstate", "solverstate.caffecli"))


def test_a_stop_request_stops_every_rank_at_the_same_iteration():
    answers = iter(["none", "none", "stop"])
    dp = train_parallel(solver_param(4, max_iter=100, extra="snapshot_after_train: false\n"),
                        2, request=lambda: next(answers, "none"))
    assert [s.iter for s in dp.solvers] == [3, 3]
    assert dp.solvers[0].requested_early_exit


def test_workers_resume_from_the_roots_snapshot():
    extra = 'snapshot: 4\nsnapshot_prefix: "dp"\n'
    straight = train_parallel(solver_param(4, kind="Nesterov", extra=extra), 2)
    param = solver_param(4, kind="Nesterov", extra=extra)
    with context.solver_group(2):
        root = get_solver(param)
        root.restore("dp_iter_4.solverstate")
        dp = DataParallel(root, comms.ThreadComm(2))
        dp.run("dp_iter_4.solverstate")
    assert [s.iter for s in dp.solvers] == [8, 8]
    for a, b in zip(weights(dp.solvers[1]), weights(straight.solvers[0])):
        assert numpy.allclose(a, b, rtol=1e-5, atol=1e-6)


def test_a_failing_rank_is_reported_and_does_not_hang(monkeypatch):
    monkeypatch.setenv("RANKDATA_FAIL_AT", "3")
    with pytest.raises(RuntimeError, match="rank 1 data failed"):
        train_parallel(solver_param(4, max_iter=50), 2)
    assert context.solver_count() == 1 and context.solver_rank() == 0


def test_root_must_be_built_for_the_group():
    root = get_solver(solver_param(4))
    with pytest.raises(ValueError, match="solver_group"):
        DataParallel(root, comms.ThreadComm(2))


def test_train_with_two_gpus_goes_through_data_parallel(tmp_path, monkeypatch, capsys):
    """``-gpu 0,1`` on two stand-in devices: the command builds two ranks that train together
    on the device (a thread communicator in place of NCCL)."""
    monkeypatch.setenv("CAFFECLI_STANDIN_GPU", "2")
    (tmp_path / "net.prototxt").write_text(NET % 4)
    (tmp_path / "solver.prototxt").write_text(
        'net: "net.prototxt"\n' + SOLVER % (6, "SGD") + 'snapshot_after_train: false\n')
    assert main(["train", "-solver", "solver.prototxt", "-gpu", "0,1"]) == 0
    assert sorted(SEEN) == [(0, 2), (1, 2)]
    err = capsys.readouterr().err
    assert "Using GPUs 0, 1" in err and "Optimization Done." in err
    assert err.count("] Iteration 5 (") == 1  # only the root logs
