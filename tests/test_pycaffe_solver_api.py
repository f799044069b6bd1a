"""pycaffe's Solver API through ``import caffe``: callbacks, apply_update, share_weights, lr,
the class hierarchy, Timer, and data parallelism with caffe.NCCL as BVLC's train.py drives it."""
import threading

import numpy
import pytest

import caffe
from caffecli import comms, context
from caffecli.errors import CaffeError

NET = """name: "regress"
layer { name: "data" type: "Input" top: "x" top: "t"
  input_param { shape { dim: %(batch)d dim: 3 } shape { dim: %(batch)d dim: 2 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h"
  inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.5 }
    bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "ip2" type: "InnerProduct" bottom: "h" top: "y"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" top: "loss" }
"""

SOLVER = """net: "%(net)s"
base_lr: 0.1
momentum: 0.9
weight_decay: 0.001
lr_policy: "step"
gamma: 0.5
stepsize: 2
max_iter: 6
display: 0
random_seed: %(seed)d
snapshot_after_train: false
layer_wise_reduce: %(layer_wise)s
"""

X = numpy.random.default_rng(5).uniform(-1, 1, (8, 3)).astype(numpy.float32)
T = numpy.random.default_rng(6).uniform(-1, 1, (8, 2)).astype(numpy.float32)


def solver_file(tmp_path, batch=8, seed=3, layer_wise=True):
    net = tmp_path / ("net%d.prototxt" % batch)
    net.write_text(NET % {"batch": batch})
    path = tmp_path / ("solver%d_%d_%s.prototxt" % (batch, seed, layer_wise))
    path.write_text(SOLVER % {"net": net, "seed": seed, "layer_wise": str(layer_wise).lower()})
    return str(path)


def feed(solver, rows=slice(None)):
    solver.net.blobs["x"].data[...] = X[rows]
    solver.net.blobs["t"].data[...] = T[rows]


def weights(solver):
    return [p.data.copy() for name in solver.net.params for p in solver.net.params[name]]


# ---- callbacks, update, sharing ------------------------------------------------------------
def test_add_callback_with_two_callables(tmp_path):
    solver = caffe.SGDSolver(solver_file(tmp_path))
    feed(solver)
    calls = []
    bias = solver.net.params["ip1"][1]
    solver.add_callback(lambda: calls.append(("start", solver.iter)),
                        lambda: calls.append(("grads", solver.iter, bias.data.copy(),
                                              bool(bias.diff.any()))))
    before = bias.data.copy()
    solver.step(2)
    assert [c[:2] for c in calls] == [("start", 0), ("grads", 0), ("start", 1), ("grads", 1)]
    numpy.testing.assert_array_equal(calls[1][2], before)   # gradients ready, not yet applied
    assert calls[1][3]


def test_gradients_ready_shows_each_diff_in_arrays_held_from_before(tmp_path):
    """Arrays taken from ``.diff`` before a step (pycaffe's views of the blobs' memory) show
    the gradients in on_gradients_ready: a frozen layer's zeros (lr_mult 0, no gradient: the
    solver's lazy clear of an inner product's weights is settled after the passes), a
    learned layer's gradient."""
    net = tmp_path / "frozen.prototxt"
    net.write_text((NET % {"batch": 8}).replace(
        'top: "y"\n  inner_product_param', 'top: "y"\n  param { lr_mult: 0 }\n  '
        'inner_product_param'))
    path = tmp_path / "frozen_solver.prototxt"
    path.write_text(SOLVER % {"net": net, "seed": 3, "layer_wise": "true"})
    solver = caffe.SGDSolver(str(path))
    feed(solver)
    frozen, learned = (solver.net.params[n][0].diff for n in ("ip2", "ip1"))
    seen = []
    solver.add_callback(lambda: None, lambda: seen.append((frozen.copy(), learned.copy())))
    solver.step(1)
    frozen[...] = 7.0           # stale values the next step's clear must hide
    solver.step(1)
    assert not seen[0][0].any() and not seen[1][0].any()
    assert seen[0][1].any() and seen[1][1].any()


def test_add_callback_takes_an_object_and_refuses_other_shapes(tmp_path):
    solver = caffe.SGDSolver(solver_file(tmp_path))
    feed(solver)

    class Counter:
        starts = grads = 0

        def on_start(self):
            self.starts += 1

        def on_gradients_ready(self):
            self.grads += 1
    counter = Counter()
    solver.add_callback(counter)
    solver.step(3)
    assert (counter.starts, counter.grads) == (3, 3)
    for bad in ((print,), (print, print, print), (1, 2), (object(),)):
        with pytest.raises(TypeError, match="add_callback takes"):
            solver.add_callback(*bad)


def test_apply_update_uses_the_current_learning_rate(tmp_path):
    solver = caffe.SGDSolver(solver_file(tmp_path))
    blob = solver.net.layers[1].blobs[0]
    blob.data[...] = 0
    blob.diff[...] = 1
    solver.apply_update()                    # lr 0.1, history starts at zero, decay of 0 is 0
    numpy.testing.assert_allclose(blob.data, -0.1, rtol=1e-6)
    assert solver.iter == 1


def test_lr_follows_the_policy(tmp_path):
    solver = caffe.SGDSolver(solver_file(tmp_path))
    feed(solver)
    assert type(solver.lr) is float and solver.lr == pytest.approx(0.1)   # as Boost.Python gives it
    solver.step(2)
    assert solver.lr == pytest.approx(0.05)
    solver.step(2)
    assert solver.lr == pytest.approx(0.025)


def test_share_weights_gives_a_net_the_solvers_weights(tmp_path):
    solver = caffe.SGDSolver(solver_file(tmp_path))
    feed(solver)
    net = caffe.Net(str(tmp_path / "net8.prototxt"), caffe.TEST)
    solver.share_weights(net)
    solver.step(2)
    for name in solver.net.params:
        for mine, theirs in zip(solver.net.params[name], net.params[name]):
            numpy.testing.assert_array_equal(mine.data, theirs.data)


def test_solver_classes_derive_from_sgd_as_in_pycaffe():
    for cls in (caffe.NesterovSolver, caffe.AdaGradSolver, caffe.RMSPropSolver,
                caffe.AdaDeltaSolver, caffe.AdamSolver):
        assert issubclass(cls, caffe.SGDSolver) and cls is not caffe.SGDSolver


# ---- module functions ----------------------------------------------------------------------
def test_timer_reads_whole_milliseconds_on_the_cpu_and_stops_when_read(logs):
    timer = caffe.Timer()
    assert timer.ms == 0.0
    assert "Timer has never been run before reading time." in logs.getvalue()
    timer.start()
    first = timer.ms                         # reading a running timer stops it
    threading.Event().wait(0.003)
    assert timer.ms == first and first == int(first) and first >= 0


def test_solver_count_rank_and_multiprocess_setters():
    try:
        caffe.set_solver_count(3)
        caffe.set_solver_rank(2)
        assert (caffe.solver_count(), caffe.solver_rank()) == (3, 2)
        caffe.set_multiprocess(True)
        assert context.multiprocess()
    finally:
        caffe.set_solver_count(1)
        caffe.set_solver_rank(0)
        caffe.set_multiprocess(False)


def test_nccl_ids_are_fresh_bytes():
    uids = {caffe.NCCL.new_uid() for _ in range(3)}
    assert len(uids) == 3 and all(isinstance(u, bytes) and len(u) == 128 for u in uids)
    assert caffe.has_nccl() is (comms.nccl_module() is not None)


def test_nccl_between_processes_needs_gpus(tmp_path):
    if caffe.has_nccl():
        pytest.skip("NCCL is available here")
    solver = caffe.SGDSolver(solver_file(tmp_path))
    caffe.set_multiprocess(True)
    try:
        with pytest.raises(CaffeError, match="between processes needs GPUs with NCCL"):
            caffe.NCCL(solver, caffe.NCCL.new_uid())
    finally:
        caffe.set_multiprocess(False)


# ---- data parallelism over threads, as train.py's solve() per rank -------------------------
def run_rank_threads(ranks, uid, work):
    """``work(rank)`` in one thread per rank, after set_solver_count / set_solver_rank; the
    first failure is re-raised (the communicator is aborted so no rank waits forever)."""
    errors = []

    def entry(rank):
        try:
            caffe.set_solver_rank(rank)
            work(rank)
        except BaseException as exc:   # reported by the main thread
            errors.append(exc)
            comms.thread_comm(uid, ranks).abort()

    caffe.set_solver_count(ranks)
    try:
        threads = [threading.Thread(target=entry, args=(r,), daemon=True)
                   for r in range(ranks)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    finally:
        caffe.set_solver_count(1)
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if errors:
        raise (real or errors)[0]


@pytest.mark.devices
@pytest.mark.parametrize("layer_wise, after_backward", [(True, True), (True, False),
                                                        (False, False)])
def test_nccl_ranks_on_half_batches_train_as_one_on_the_whole(tmp_path, layer_wise,
                                                              after_backward):
    whole = caffe.SGDSolver(solver_file(tmp_path, 8, seed=3))
    feed(whole)
    whole.step(6)
    uid = caffe.NCCL.new_uid()
    solvers = [None, None]
    files = [solver_file(tmp_path, 4, seed=3 + rank, layer_wise=layer_wise) for rank in (0, 1)]

    def solve(rank):   # each rank: its own solver (and seed) on half the items
        solver = caffe.SGDSolver(files[rank])
        feed(solver, slice(rank * 4, rank * 4 + 4))
        nccl = caffe.NCCL(solver, uid)
        nccl.bcast()
        solver.add_callback(nccl)
        if after_backward and solver.param.layer_wise_reduce:
            solver.net.after_backward(nccl)
        solver.step(6)
        solvers[rank] = solver

    run_rank_threads(2, uid, solve)
    for solver in solvers:
        assert solver.iter == 6
        for got, want in zip(weights(solver), weights(whole)):
            numpy.testing.assert_allclose(got, want, rtol=2e-5, atol=2e-6)


def test_nccl_layer_wise_averages_each_layer_after_its_backward(tmp_path):
    """With after_backward(nccl), a layer's gradients are already averaged when the next
    (lower) layer's backward starts."""
    uid = caffe.NCCL.new_uid()
    seen = {}

    path = solver_file(tmp_path, 4, seed=3)    # written once, before the ranks start

    def solve(rank):
        solver = caffe.SGDSolver(path)
        feed(solver, slice(rank * 4, rank * 4 + 4))
        nccl = caffe.NCCL(solver, uid)
        solver.net.after_backward(nccl)
        solver.net.before_backward(lambda layer: layer == 1 and seen.setdefault(
            rank, solver.net.params["ip2"][0].diff.copy()))
        solver.add_callback(nccl)
        solver.step(1)

    run_rank_threads(2, uid, solve)
    assert sorted(seen) == [0, 1]
    numpy.testing.assert_array_equal(seen[0], seen[1])
    assert seen[0].any()


def test_train_py_timing_hooks_around_nccl(tmp_path, logs):
    """BVLC train.py's time(): a Timer per layer on the net callbacks, solver callbacks before
    and after the NCCL one; rank 0 reports on its display iterations."""
    uid = caffe.NCCL.new_uid()
    reports = []

    path = solver_file(tmp_path, 4, seed=3)    # written once, before the ranks start

    def solve(rank):
        solver = caffe.SGDSolver(path)
        feed(solver, slice(rank * 4, rank * 4 + 4))
        nccl = caffe.NCCL(solver, uid)
        nccl.bcast()
        if rank == 0:
            layers = range(len(solver.net.layers))
            fprop, bprop = [caffe.Timer() for _ in layers], [caffe.Timer() for _ in layers]
            total, allrd = caffe.Timer(), caffe.Timer()

            def show_time():
                if solver.iter % 2 == 0:
                    reports.append((solver.iter, [t.ms for t in fprop + bprop + [total, allrd]]))
            solver.net.before_forward(lambda layer: fprop[layer].start())
            solver.net.after_forward(lambda layer: fprop[layer].stop())
            solver.net.before_backward(lambda layer: bprop[layer].start())
            solver.net.after_backward(lambda layer: bprop[layer].stop())
            solver.add_callback(lambda: total.start(), lambda: (total.stop(), allrd.start()))
            solver.add_callback(nccl)
            solver.add_callback(lambda: "", lambda: (allrd.stop(), show_time()))
        else:
            solver.add_callback(nccl)
        solver.net.after_backward(nccl)
        solver.step(4)

    run_rank_threads(2, uid, solve)
    assert [it for it, _ in reports] == [0, 2]
    assert all(len(times) == 2 * 4 + 2 for _, times in reports)
    assert all(ms >= 0 and ms == int(ms) for _, times in reports for ms in times)
    assert "never been run" not in logs.getvalue()
