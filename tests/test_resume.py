"""Snapshots and exact resume: N straight iterations equal N/2 + snapshot + restore + N/2,
bitwise, for every solver type in both formats; Caffe's file layouts; sidecar fallback."""
import os

import h5py
import numpy
import pytest

from caffecli import solvers
from caffecli.proto import caffe_pb2
from caffecli.proto.io import read_binary

from solver_helpers import RESUME_NET, solver_param

SETTINGS = {
    "SGD": 'momentum: 0.9 weight_decay: 0.01 lr_policy: "step" gamma: 0.5 stepsize: 3',
    "Nesterov": 'momentum: 0.8 lr_policy: "multistep" gamma: 0.5 stepvalue: 2 stepvalue: 5',
    "AdaGrad": 'delta: 1e-3 lr_policy: "inv" gamma: 0.1 power: 0.75',
    "RMSProp": 'rms_decay: 0.9 delta: 1e-4 lr_policy: "poly" power: 2',
    "AdaDelta": 'momentum: 0.95 delta: 1e-4 lr_policy: "fixed"',
    "Adam": 'momentum: 0.9 momentum2: 0.999 delta: 1e-6 lr_policy: "fixed" clip_gradients: 1',
}
N = 6


def _solver(kind, fmt, extra=""):
    text = ('type: "%s" base_lr: 0.05 %s max_iter: %d random_seed: 11 snapshot_prefix: "snap" '
            'snapshot_format: %s display: 1 snapshot_after_train: false %s'
            % (kind, SETTINGS[kind], N, fmt, extra))
    return solvers.get_solver(solver_param(text, RESUME_NET))


def _state(s):
    params = [b.data.copy() for b in s.net.learnable_params]
    history = [h.data.copy() for h in s.history]
    return params, history


def _assert_bitwise(a, b):
    for x, y in zip(a[0] + a[1], b[0] + b[1]):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert numpy.array_equal(x, y), "max diff %g" % numpy.abs(x - y).max()


@pytest.mark.parametrize("fmt", ["BINARYPROTO", "HDF5"])
@pytest.mark.parametrize("kind", sorted(SETTINGS))
def test_resume_is_bitwise_exact(kind, fmt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    straight = _solver(kind, fmt)
    straight.step(N // 2)
    paths = straight.snapshot()
    straight.step(N - N // 2)
    want = _state(straight)

    ext = ".solverstate.h5" if fmt == "HDF5" else ".solverstate"
    state_file = "snap_iter_%d%s" % (N // 2, ext)
    assert state_file in paths
    resumed = _solver(kind, fmt)   # fresh fillers and rng: everything must come from the files
    resumed.restore(state_file)
    assert resumed.iter == N // 2
    resumed.step(N - resumed.iter)
    _assert_bitwise(_state(resumed), want)


def test_resume_through_solve(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    straight = _solver("SGD", "BINARYPROTO", "snapshot: 4")
    straight.solve()
    want = _state(straight)
    resumed = _solver("SGD", "BINARYPROTO", "snapshot: 4")
    resumed.solve("snap_iter_4.solverstate")
    assert resumed.iter == N
    _assert_bitwise(_state(resumed), want)


def test_binary_solverstate_layout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = _solver("Adam", "BINARYPROTO")
    s.step(2)
    model, state_file, sidecar = s.snapshot()
    assert (model, state_file) == ("snap_iter_2.caffemodel", "snap_iter_2.solverstate")
    assert sidecar.startswith(state_file)
    state = read_binary(state_file, caffe_pb2.SolverState())
    assert state.iter == 2 and state.learned_net == model and state.current_step == 0
    n = len(s.net.learnable_params)
    assert len(state.history) == 2 * n   # Adam: m then v
    assert list(state.history[n].shape.dim) == list(s.net.learnable_params[0].shape)
    numpy.testing.assert_array_equal(numpy.asarray(state.history[n].data),
                                     s.history[n].data.reshape(-1))
    net = read_binary(model, caffe_pb2.NetParameter())
    assert [l.name for l in net.layer if l.blobs] == ["ip1", "ip2"]
    assert not [f for f in os.listdir(".") if f.endswith(".tmp")]


def test_hdf5_solverstate_layout(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = _solver("SGD", "HDF5")
    s.step(4)
    model, state_file, _ = s.snapshot()
    assert model == "snap_iter_4.caffemodel.h5" and state_file == "snap_iter_4.solverstate.h5"
    with h5py.File(state_file, "r") as f:
        assert f["iter"].dtype == numpy.int32 and f["iter"][0] == 4
        assert f["current_step"][0] == 1    # step policy, stepsize 3: iteration 3 used step 1
        assert f["learned_net"][()] == model.encode()
        assert sorted(f["history"]) == ["0", "1", "2", "3"]
        numpy.testing.assert_array_equal(f["history/2"][()], s.history[2].data)
    with h5py.File(model, "r") as f:
        numpy.testing.assert_array_equal(f["data/ip1/0"][()],
                                         s.net.layer_by_name("ip1").blobs[0].data)


def test_without_sidecar_data_restarts_like_caffe(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = _solver("SGD", "BINARYPROTO")
    s.step(3)
    _, state_file, sidecar = s.snapshot()
    assert s.net.layer_by_name("data").cursor == (3 * 3) % 7
    os.remove(sidecar)
    r = _solver("SGD", "BINARYPROTO")
    r.restore(state_file)
    assert r.iter == 3 and r.net.layer_by_name("data").cursor == 0
    numpy.testing.assert_array_equal(r.net.layer_by_name("ip1").blobs[0].data,
                                     s.net.layer_by_name("ip1").blobs[0].data)


def test_restore_rejects_a_state_from_another_solver_type(tmp_path, monkeypatch):
    from caffecli.errors import CaffeError
    monkeypatch.chdir(tmp_path)
    s = _solver("SGD", "BINARYPROTO")
    s.step(1)
    _, state_file, _ = s.snapshot()
    a = _solver("Adam", "BINARYPROTO")
    with pytest.raises(CaffeError, match="Incorrect length of history blobs"):
        a.restore(state_file)
    with pytest.raises(CaffeError, match="not found"):
        a.restore("missing.solverstate")


def test_restore_finds_weights_beside_the_state(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = _solver("SGD", "BINARYPROTO")
    s.step(2)
    s.snapshot()
    os.mkdir("elsewhere")
    monkeypatch.chdir(tmp_path / "elsewhere")
    r = _solver("SGD", "BINARYPROTO")
    r.restore(str(tmp_path / "snap_iter_2.solverstate"))
    numpy.testing.assert_array_equal(r.net.layer_by_name("ip2").blobs[0].data,
                                     s.net.layer_by_name("ip2").blobs[0].data)


def test_a_sidecar_for_another_state_file_is_ignored(tmp_path, monkeypatch, logs):
    monkeypatch.chdir(tmp_path)
    s = _solver("SGD", "BINARYPROTO")
    s.step(3)
    _, state_file, sidecar = s.snapshot()
    state = read_binary(state_file, caffe_pb2.SolverState())
    state.history[0].data[0] += 1           # e.g. Caffe rewrote the state under the same name
    with open(state_file, "wb") as f:
        f.write(state.SerializeToString())
    r = _solver("SGD", "BINARYPROTO")
    r.restore(state_file)
    assert r.net.layer_by_name("data").cursor == 0
    assert "another solver state file (checksum differs)" in logs.getvalue()
