"""SIGKILL a training run while it writes a snapshot, again and again: a kill may leave a
temporary file behind, but every file under a snapshot's final name is whole and loads."""
import json
import os
import signal
import subprocess
import sys
import time

import numpy
import pytest

from caffecli import solvers
from caffecli.proto import caffe_pb2
from caffecli.proto.io import read_binary, read_solver_param

from test_cli import ROOT

INPUTS, OUTPUTS = 256, 4096  # 1M weights: a 4 MB model and a 4 MB history per snapshot
NET = '''name: "big"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: %d } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: %d weight_filler { type: "gaussian" std: 0.01 }
                        bias_filler { type: "constant" value: 0.5 } } }
layer { name: "loss" type: "Reduction" bottom: "ip" top: "loss" loss_weight: 1
  reduction_param { operation: SUMSQ } }
''' % (INPUTS, OUTPUTS)
SOLVER = '''net: "net.prototxt"
base_lr: 1e-6
momentum: 0.9
lr_policy: "fixed"
max_iter: 100000000
display: 0
snapshot: 1
snapshot_prefix: "snap/big"
random_seed: 5
'''


def _kill_at_temp_file(folder, env, nth, deadline=60):
    """Start training; SIGKILL it as soon as the ``nth`` temporary snapshot file appears.
    Return the temporary files on disk after the kill."""
    snap = os.path.join(folder, "snap")
    before = set(os.listdir(snap))
    proc = subprocess.Popen([sys.executable, "-m", "caffecli", "train", "-solver",
                             "solver.prototxt"], cwd=folder, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    seen = set()
    end = time.time() + deadline
    try:
        while proc.poll() is None and time.time() < end:
            seen.update(n for n in os.listdir(snap) if n.endswith(".tmp") and n not in before)
            if len(seen) >= nth:
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "training ended by itself: %s" % proc.returncode
    return [n for n in os.listdir(snap) if n.endswith(".tmp") and n not in before]


def _check_model(path):
    net = read_binary(path, caffe_pb2.NetParameter())
    (ip,) = [layer for layer in net.layer if layer.name == "ip"]
    assert list(ip.blobs[0].shape.dim) == [OUTPUTS, INPUTS]
    assert len(ip.blobs[0].data) == OUTPUTS * INPUTS
    assert numpy.isfinite(ip.blobs[1].data).all() and len(ip.blobs[1].data) == OUTPUTS


def _check_state(path):
    state = read_binary(path, caffe_pb2.SolverState())
    assert state.iter > 0 and len(state.history) == 2
    assert len(state.history[0].data) == OUTPUTS * INPUTS
    assert len(state.history[1].data) == OUTPUTS


@pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")
def test_killed_snapshots_never_leave_a_truncated_final_file(tmp_path):
    (tmp_path / "net.prototxt").write_text(NET)
    (tmp_path / "solver.prototxt").write_text(SOLVER)
    (tmp_path / "snap").mkdir()
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    left = []
    # each fresh run writes model, state, sidecar per iteration: land kills on each of them,
    # some while an earlier run's file of the same name is being replaced
    for nth in (1, 2, 3, 4, 5, 6, 8):
        left += _kill_at_temp_file(str(tmp_path), env, nth)
    # the kills landed mid-write: temporary files that were never renamed stayed on disk
    assert left, "no kill landed while a snapshot was being written"
    kinds = {name.split(".")[2] for name in left}  # ".big_iter_3.caffemodel.XXXX.tmp"
    assert kinds & {"caffemodel", "solverstate"}, left

    snap = tmp_path / "snap"
    models = sorted(snap.glob("big_iter_*.caffemodel"))
    states = sorted(snap.glob("big_iter_*.solverstate"))
    assert models and states
    for path in models:
        _check_model(str(path))
    for path in states:
        _check_state(str(path))
    for path in snap.glob("big_iter_*.solverstate.caffecli"):
        assert json.loads(path.read_text())["iter"] > 0

    # and the newest whole snapshot resumes
    newest = max(states, key=lambda p: read_binary(str(p), caffe_pb2.SolverState()).iter)
    cwd = os.getcwd()
    os.chdir(str(tmp_path))
    try:
        solver = solvers.get_solver(read_solver_param("solver.prototxt"))
        solver.restore(str(newest))
    finally:
        os.chdir(cwd)
    assert solver.iter == read_binary(str(newest), caffe_pb2.SolverState()).iter
