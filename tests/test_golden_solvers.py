"""Golden solver cases: every solver__* folder replayed step by step against BVLC Caffe's numbers,
Caffe's iteration-6 snapshot resumed to 12, our own snapshot resumed bitwise, and the log."""
import io
import os
import re

import numpy
import pytest

from caffecli import glog, registry, solvers
from golden import assert_close, case_names, golden_dir, writable_case

# each test runs in CPU mode, in GPU mode, and in GPU mode with CUDA graphs
pytestmark = pytest.mark.devices(graphs=True)

CASES = case_names({"solver"})
NEEDED = ("HDF5Data", "SoftmaxWithLoss", "EuclideanLoss")


def _require_layers():
    missing = [t for t in NEEDED if t not in registry.layer_types()]
    if missing:
        pytest.skip("layers not implemented yet: " + ", ".join(missing))


@pytest.fixture
def case_dir(request, tmp_path, monkeypatch):
    """A writable copy of the case folder as the working directory (snapshots land there)."""
    _require_layers()
    case = writable_case(request.param, tmp_path)
    monkeypatch.chdir(tmp_path)
    glog.set_stream(io.StringIO())
    yield case
    glog.set_stream(None)


def _compare_params(solver, h5, it, case):
    group = h5["params_after/%d" % it]
    for lname in group:
        blobs = solver.net.layer_by_name(lname).blobs
        for i in group[lname]:
            assert_close(blobs[int(i)].data, group[lname][i][()], case.rtol, case.atol,
                         "%s: iteration %d, %s param %s" % (case.name, it, lname, i))


def _caffe_state_file(case):
    return [s for s in case.meta["snapshots"] if "_iter_6." in s and "solverstate" in s][0]


@pytest.mark.parametrize("case_dir", CASES, indirect=True)
def test_solver_steps_match_caffe(case_dir):
    case = case_dir
    s = solvers.get_solver("solver.prototxt")
    s.net.copy_trained_layers_from("init.caffemodel")
    with case.h5() as h5:
        losses = h5["loss_per_iter"][()]
        for it in range(1, len(losses) + 1):
            s.step(1)
            assert s.iter == it
            assert_close(s.net.blob_by_name("loss").data, losses[it - 1], case.rtol, case.atol,
                         "%s: loss after iteration %d" % (case.name, it))
            _compare_params(s, h5, it, case)


@pytest.mark.parametrize("case_dir", CASES, indirect=True)
def test_caffe_snapshot_resumes_to_caffe_result(case_dir):
    case = case_dir
    s = solvers.get_solver("solver.prototxt")
    s.restore(_caffe_state_file(case))
    assert s.iter == 6
    s.step(case.meta.get("iters", 12) - s.iter)
    with case.h5() as h5:
        _compare_params(s, h5, s.iter, case)


@pytest.mark.parametrize("case_dir", CASES, indirect=True)
def test_own_snapshot_resumes_bitwise(case_dir):
    case = case_dir
    s = solvers.get_solver("solver.prototxt")
    s.net.copy_trained_layers_from("init.caffemodel")
    s.step(12)    # snapshots at 6 (and 12) into the working copy, over Caffe's files
    want = [b.data.copy() for b in s.net.learnable_params]
    state_file = _caffe_state_file(case)
    assert os.path.exists(state_file + ".caffecli")   # ours now, with the exact-resume sidecar
    r = solvers.get_solver("solver.prototxt")
    r.restore(state_file)
    r.step(12 - r.iter)
    for got, w in zip(r.net.learnable_params, want):
        assert numpy.array_equal(got.data, w, equal_nan=True)


_LINE = re.compile(r"^[IWE]\d+ [\d:.]+ +\d+ (\S+)\] (.*)$")
_NUM = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?|-?nan|-?inf")


def _solver_lines(text):
    """The solver.cpp / sgd_solver.cpp messages, without timings."""
    out, params = [], False
    for line in text.splitlines():
        m = _LINE.match(line)
        if not m:
            if params:    # the solver parameters printed after solver.cpp:45
                out.append(("solver.cpp:45", line))
            continue
        params = m.group(1) == "solver.cpp:45"
        if m.group(1).startswith(("solver.cpp", "sgd_solver.cpp")):
            msg = re.sub(r"\(\S+ iter/s, \S+s/", "(_ iter/s, _s/", m.group(2))
            out.append((m.group(1), msg))
    return out


LOG_CASES = [c for c in CASES if os.path.exists(os.path.join(golden_dir(), c, "train.log"))]


@pytest.mark.parametrize("case_dir", LOG_CASES, indirect=True)
def test_training_log_matches_caffe(case_dir):
    case = case_dir
    with open(case.path("train.log")) as f:
        want = _solver_lines(f.read())
    param = solvers.read_solver_file("solver.prototxt")
    param.train_state.level = 0          # what `caffe train` adds before logging the solver
    param.train_state.stage.append("")
    param.weights.append("init.caffemodel")
    buf = io.StringIO()
    glog.set_stream(buf)
    solvers.get_solver(param).solve()
    got = _solver_lines(buf.getvalue())
    assert [g[0] for g in got] == [w[0] for w in want]
    for (where, g), (_, w) in zip(got, want):
        assert _NUM.sub("#", g) == _NUM.sub("#", w), where
        for a, b in zip(_NUM.findall(g), _NUM.findall(w)):
            a, b = float(a), float(b)
            assert abs(a - b) <= 1e-5 + 2e-4 * abs(b) or (a != a and b != b), (where, g, w)


@pytest.mark.parametrize("case_dir", CASES, indirect=True)
def test_mid_epoch_resume_is_exact(case_dir):
    """Caffe restarts the data at a resume; the sidecar resumes at the next unseen record."""
    s = solvers.get_solver("solver.prototxt")
    s.net.copy_trained_layers_from("init.caffemodel")
    s.step(3)                                   # 12 of 24 records read: mid-epoch
    state_file = [p for p in s.snapshot() if ".solverstate" in p and
                  not p.endswith(".caffecli")][0]
    s.step(4)
    want = [b.data.copy() for b in s.net.learnable_params]
    r = solvers.get_solver("solver.prototxt")
    r.restore(state_file)
    r.step(4)
    for got, w in zip(r.net.learnable_params, want):
        assert numpy.array_equal(got.data, w, equal_nan=True)
