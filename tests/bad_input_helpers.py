"""A small workspace of real inputs (an LMDB, a net reading it, a solver, a trained caffemodel,
a binary and an HDF5 solverstate with their sidecars) and a way to run the command in-process
the way a shell sees it: exit status, stdout, stderr."""
import contextlib
import io
import os
import signal

import numpy

from caffecli.cli.main import run
from data_helpers import write_datum_db

DEPLOY = """name: "small"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 1 dim: 4
  dim: 4 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
"""
TRAIN_NET = """name: "small"
layer { name: "data" type: "Data" top: "data" top: "label"
  data_param { source: "db" backend: LMDB batch_size: 4 } transform_param { scale: 0.01 } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
SOLVER = """net: "train.prototxt"
base_lr: 0.01
momentum: 0.9
lr_policy: "fixed"
max_iter: %d
display: 1
snapshot: %d
snapshot_prefix: "%s"
snapshot_after_train: false
snapshot_format: %s
random_seed: 3
solver_mode: CPU
"""


class Timeout(BaseException):
    """Raised by the alarm: not an Exception, so the command's error handling lets it through."""


def _alarm(signum, frame):
    raise Timeout()


def run_command(args, cwd, timeout=60):
    """Run ``caffecli args`` in-process in ``cwd``; (status, stdout, stderr). A run longer than
    ``timeout`` seconds raises Timeout (a hang)."""
    out, err = io.StringIO(), io.StringIO()
    old_dir = os.getcwd()
    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        os.chdir(cwd)
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            status = run(list(args))
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
        os.chdir(old_dir)
    return status, out.getvalue(), err.getvalue()


def assert_clean_end(status, stderr, needles=()):
    """Success, or exactly one ``caffecli: error:`` line, the last line, exit 1, no traceback
    and no internal error; ``needles`` must be in that line."""
    assert "Traceback" not in stderr, stderr[-700:]
    if status == 0 and not needles:
        return None
    lines = stderr.splitlines()
    errors = [l for l in lines if l.startswith("caffecli: error: ")]
    assert status == 1 and len(errors) == 1 and lines[-1] == errors[0], stderr[-700:]
    assert "internal error" not in errors[0], errors[0]
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


def make_workspace(folder, formats=("BINARYPROTO", "HDF5")):
    """Write the inputs into ``folder``; return {name: path relative to it}."""
    rs = numpy.random.RandomState(0)
    write_datum_db(os.path.join(folder, "db"), rs.randint(0, 255, (12, 1, 4, 4)),
                   labels=rs.randint(0, 3, 12))
    files = {"db": "db", "deploy": "deploy.prototxt", "train_net": "train.prototxt"}
    with open(os.path.join(folder, "deploy.prototxt"), "w") as f:
        f.write(DEPLOY)
    with open(os.path.join(folder, "train.prototxt"), "w") as f:
        f.write(TRAIN_NET)
    for fmt in formats:
        prefix = "snap_" + fmt.lower()
        name = "solver_%s.prototxt" % fmt.lower()
        with open(os.path.join(folder, name), "w") as f:
            f.write(SOLVER % (2, 2, prefix, fmt))
        status, _, err = run_command(["train", "-solver", name], folder)
        assert status == 0, err[-2000:]
        ext = ".h5" if fmt == "HDF5" else ""
        files["solver_" + fmt.lower()] = name
        files["model_" + fmt.lower()] = "%s_iter_2.caffemodel%s" % (prefix, ext)
        files["state_" + fmt.lower()] = "%s_iter_2.solverstate%s" % (prefix, ext)
    # the solver that resumes from the snapshots (two more iterations, no more snapshots)
    with open(os.path.join(folder, "resume.prototxt"), "w") as f:
        f.write(SOLVER % (4, 0, "resumed", "BINARYPROTO"))
    files["resume"] = "resume.prototxt"
    return files
