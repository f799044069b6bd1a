"""SIGINT during a real ``caffecli train`` subprocess, with Caffe's default snapshot_after_train:
``stop`` ends with a final snapshot and exit 0; ``snapshot`` writes one and trains on."""
import re
import signal

import numpy
import pytest

from caffecli import Net
from caffecli.proto import caffe_pb2
from caffecli.proto.io import read_binary

from test_cli import SIGNAL_SOLVER, _train_with_signals

# SIGNAL_SOLVER without "snapshot_after_train: false": Caffe's default (true) applies
SOLVER = SIGNAL_SOLVER.replace("snapshot_after_train: false\n", "")
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")


def snapshot_iters(log):
    return [int(n) for n in re.findall(r"Snapshotting to binary proto file sig_iter_(\d+)"
                                       r"\.caffemodel", log)]


def check_snapshot(folder, it):
    """The model and state of iteration ``it`` exist and load; the state names the model."""
    model = folder / ("sig_iter_%d.caffemodel" % it)
    state = read_binary(str(folder / ("sig_iter_%d.solverstate" % it)), caffe_pb2.SolverState())
    assert state.iter == it and state.learned_net == model.name
    net = Net(str(folder / "net.prototxt"), str(model), caffe_pb2.TEST)
    assert numpy.isfinite(net.params["ip"][1].data).all()


def test_default_sigint_stops_with_a_final_snapshot(tmp_path):
    assert "snapshot_after_train" not in SOLVER
    rc, log = _train_with_signals(tmp_path, [("Iteration 3 ", signal.SIGINT)], solver=SOLVER)
    assert rc == 0, log[-2000:]
    (final,) = snapshot_iters(log)
    assert final >= 3
    assert log.index("Snapshotting to binary proto file") < log.index(
        "Optimization stopped early.")
    assert log.rstrip().endswith("Optimization Done.")
    # the loop ended at the first iteration after the signal: nothing after the snapshot
    assert not re.search(r"Iteration %d \(" % (final + 1), log)
    check_snapshot(tmp_path, final)


def test_sigint_snapshot_effect_trains_on(tmp_path):
    rc, log = _train_with_signals(
        tmp_path, [("Iteration 3 ", signal.SIGINT), ("Snapshotting solver state", None),
                   (", lr = ", None), (", lr = ", None), (", lr = ", signal.SIGHUP)],
        ["-sigint_effect", "snapshot", "-sighup_effect", "stop"], solver=SOLVER)
    assert rc == 0, log[-2000:]
    first, final = snapshot_iters(log)  # the SIGINT one, then the final one after SIGHUP
    assert final >= first + 3
    after = log[log.index("sig_iter_%d.solverstate" % first):]
    assert re.search(r"Iteration %d \(" % (first + 1), after)  # training went on
    assert "Optimization stopped early." in after
    check_snapshot(tmp_path, first)
    check_snapshot(tmp_path, final)
    a = Net(str(tmp_path / "net.prototxt"), str(tmp_path / ("sig_iter_%d.caffemodel" % first)),
            caffe_pb2.TEST)
    b = Net(str(tmp_path / "net.prototxt"), str(tmp_path / ("sig_iter_%d.caffemodel" % final)),
            caffe_pb2.TEST)
    # the Input blob is zeros, so only the bias learns
    assert not numpy.array_equal(a.params["ip"][1].data, b.params["ip"][1].data)
