"""Training across processes for real: the MPI launcher the test extra installs (MPICH's
mpiexec, from pip) starts ``caffecli train`` as 2 ranks on this machine, over the loopback.

BVLC's LeNet (models/lenet) over a generated LMDB of 999 records (odd, so the ranks' share of
the records changes at each wrap-around): 2 ranks of batch 32 give the weights of 1 process of
batch 64 at every snapshot (on the CPU and on stand-in GPUs), 1 process resumes the 2-rank
snapshot and 2 ranks the 1-process one; a SIGINT on the launcher, a rank killed or terminated,
a rank failing and a setup error each end every rank in seconds with one line, never a hang.
"""
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import time

import numpy
import pytest

from caffecli.proto import caffe_pb2
from data_helpers import write_datum_db

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _hydra():
    """MPICH's mpiexec beside this Python (pip's mpich wheel), else on PATH; None without."""
    found = shutil.which("mpiexec", path=sysconfig.get_path("scripts")) or shutil.which("mpiexec")
    if not found or importlib.util.find_spec("mpi4py") is None:
        return None
    version = subprocess.run([found, "--version"], capture_output=True, text=True).stdout
    return found if "HYDRA" in version else None


MPIEXEC = _hydra()
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="needs mpi4py and MPICH's mpiexec "
                                "(pip install -e '.[test]' brings both)")
ENV = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
ENV.pop("CAFFECLI_STANDIN_GPU", None)
SNAPSHOTS = (50, 100, 150, 200)


def command(args, ranks=None, launch=()):
    launch = [MPIEXEC, "-n", str(ranks)] + list(launch) if ranks else []
    return launch + [sys.executable, "-m", "caffecli", "train"] + list(args)


def run(args, ranks=None, env=ENV, launch=()):
    """Run ``caffecli train args`` (under mpiexec with ``ranks``); its output, checked."""
    done = subprocess.run(command(args, ranks, launch), env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:]
    return done.stdout


def weights(path):
    net = caffe_pb2.NetParameter()
    with open(path, "rb") as f:
        net.ParseFromString(f.read())
    return {(layer.name, i): numpy.asarray(b.data) for layer in net.layer
            for i, b in enumerate(layer.blobs)}


def assert_same_weights(a, b, rtol=1e-4, atol=2e-6):
    """Equal up to summation order: BLAS rounds a 2x32 and a 1x64 batch differently, and 200
    training iterations carry that rounding along (seen: 3e-5 relative at most)."""
    wa, wb = weights(a), weights(b)
    assert sorted(wa) == sorted(wb) and len(wa) == 8  # LeNet: 4 layers, weights and biases
    for key in wa:
        numpy.testing.assert_allclose(wa[key], wb[key], rtol=rtol, atol=atol, err_msg=str(key))


def lenet_files(folder, batch, prefix, **solver):
    """BVLC's LeNet net and solver, pointed at ``folder``'s LMDB, with ``batch`` per rank."""
    with open(os.path.join(ROOT, "models/lenet/lenet_train_test.prototxt")) as f:
        net = f.read()
    net = re.sub(r'"data/mnist/mnist_(train|test)_lmdb"', '"%s/lmdb"' % folder, net)
    net_path = os.path.join(folder, "lenet_b%d.prototxt" % batch)
    with open(net_path, "w") as f:
        f.write(net.replace("batch_size: 64", "batch_size: %d" % batch))
    with open(os.path.join(ROOT, "models/lenet/lenet_solver.prototxt")) as f:
        text = f.read()
    settings = dict(net='"%s"' % net_path, test_iter=2, test_interval=100, display=50,
                    max_iter=200, snapshot=50, snapshot_prefix='"%s/%s"' % (folder, prefix))
    settings.update(solver)
    for key, value in settings.items():
        text = re.sub(r"(?m)^%s: .*$" % key, "%s: %s" % (key, value), text)
    path = os.path.join(folder, "%s_solver.prototxt" % prefix)
    with open(path, "w") as f:
        f.write(text + "random_seed: 1\n")
    return path


@pytest.fixture(scope="module")
def lenet(tmp_path_factory):
    """A folder with the LMDB and four trainings: 1 process of batch 64, 2 ranks of 32, 1 process of 64
    resuming the 2-rank snapshot at iteration 100, and 2 ranks resuming the 1-process one."""
    folder = str(tmp_path_factory.mktemp("lenet"))
    rng = numpy.random.default_rng(0)
    labels = rng.integers(0, 10, 999)
    images = (rng.random((999, 1, 28, 28)) * 60).astype(numpy.uint8)
    for i, label in enumerate(labels):  # a bar whose height is the label: something to learn
        images[i, 0, 2 + 2 * label:4 + 2 * label, 4:24] = 250
    write_datum_db(os.path.join(folder, "lmdb"), images, labels)
    run(["--solver", lenet_files(folder, 64, "one")])
    run(["--solver", lenet_files(folder, 32, "two")], ranks=2,  # each rank's log a file
        launch=["-errfile-pattern", os.path.join(folder, "two.%r.log")])
    run(["--solver", lenet_files(folder, 64, "resumed"),
         "--snapshot", os.path.join(folder, "two_iter_100.solverstate")])
    run(["--solver", lenet_files(folder, 32, "resumed2"),
         "--snapshot", os.path.join(folder, "one_iter_100.solverstate")], ranks=2)
    return folder


def snap(lenet, prefix, it):
    return os.path.join(lenet, "%s_iter_%d.caffemodel" % (prefix, it))


def test_two_ranks_of_32_train_as_one_process_of_64_at_every_snapshot(lenet):
    for it in SNAPSHOTS:
        assert_same_weights(snap(lenet, "one", it), snap(lenet, "two", it))


def test_only_rank_0_logs_tests_and_snapshots(lenet):
    quiet = os.path.join(lenet, "two.1.log")  # mpiexec makes a rank's file at its first line
    assert not os.path.exists(quiet) or os.path.getsize(quiet) == 0
    with open(os.path.join(lenet, "two.0.log")) as f:
        root = [line for line in f.read().splitlines() if line.startswith("I")]
    assert sum("Testing net (#0)" in line for line in root) == 3  # iterations 0, 100, 200
    assert sum("Snapshotting to binary proto file" in line for line in root) == len(SNAPSHOTS)
    assert root[-1].endswith("Optimization Done.")


def test_one_process_resumes_a_two_rank_snapshot(lenet):
    for it in (150, 200):
        assert_same_weights(snap(lenet, "resumed", it), snap(lenet, "two", it))


def test_two_ranks_resume_a_one_process_snapshot(lenet):
    """Only the root reads the snapshot; it hands the history and data position to rank 1."""
    for it in (150, 200):
        assert_same_weights(snap(lenet, "resumed2", it), snap(lenet, "one", it))


def test_gpu_mode_ranks_on_the_standin_device(lenet):
    """--gpu 0,1: each rank takes its own GPU, gradients go over MPI through the host."""
    out = run(["--solver", lenet_files(lenet, 32, "gpu", max_iter=50), "--gpu", "0,1"],
              ranks=2, env=dict(ENV, CAFFECLI_STANDIN_GPU="2"))
    assert "Using GPUs 0" in out
    assert_same_weights(snap(lenet, "gpu", 50), snap(lenet, "one", 50))


# ---- faults ---------------------------------------------------------------------------------
def start(args, folder, ranks=2):
    log = open(os.path.join(folder, "job.log"), "w+")
    job = subprocess.Popen(command(args, ranks), env=ENV, stdout=log, stderr=subprocess.STDOUT)
    return job, log


def wait_for(log, pattern, job, seconds=120):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and job.poll() is None:
        log.seek(0)
        if re.search(pattern, log.read()):
            return
        time.sleep(0.2)
    raise AssertionError("no %r in the job's output" % pattern)


def finish(job, log, seconds=30):
    """The job's exit status and output, once it ends; fails (killing it) after ``seconds``."""
    started = time.monotonic()
    try:
        status = job.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        job.kill()
        raise AssertionError("the job still ran %d s later" % seconds) from None
    log.seek(0)
    return status, log.read(), time.monotonic() - started


def rank_pid(rank, solver):
    """The process id of MPI rank ``rank`` running ``solver`` (found in /proc)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/environ" % pid, "rb") as f:
                environ = f.read().split(b"\0")
            with open("/proc/%s/cmdline" % pid, "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"PMI_RANK=%d" % rank in environ and solver.encode() in cmdline:
            return int(pid)
    raise AssertionError("no rank %d" % rank)


@pytest.fixture
def endless(lenet):
    return lenet, lenet_files(lenet, 32, "endless", max_iter=100000, display=1, snapshot=0,
                               test_interval=100000)


def interrupted(endless, interrupt):
    """Start the endless job, ``interrupt(job, solver)`` once it trains; (status, output, s)."""
    folder, solver = endless
    job, log = start(["--solver", solver], folder)
    wait_for(log, r"Iteration [1-9]\d*, lr", job)
    interrupt(job, solver)
    return finish(job, log)


def test_sigint_on_the_launcher_stops_every_rank_and_rank_0_snapshots(endless):
    status, out, _ = interrupted(endless, lambda job, _: job.send_signal(signal.SIGINT))
    assert status == 0, out[-2000:]
    assert out.count("Optimization stopped early.") == 1
    stopped = re.findall(r"endless_iter_(\d+)\.caffemodel", out)
    assert len(stopped) == 1
    assert os.path.exists(os.path.join(endless[0], "endless_iter_%s.solverstate" % stopped[0]))


def test_a_killed_rank_ends_the_job(endless):
    status, out, took = interrupted(
        endless, lambda _, solver: os.kill(rank_pid(1, solver), signal.SIGKILL))
    assert status != 0 and "Traceback" not in out
    assert took < 15


def test_a_terminated_root_says_so_in_one_line(endless):
    """Open MPI's mpirun and Slurm end ranks with SIGTERM: the root says where it was."""
    status, out, took = interrupted(
        endless, lambda _, solver: os.kill(rank_pid(0, solver), signal.SIGTERM))
    lines = [line for line in out.splitlines() if "caffecli: error:" in line]
    assert status != 0 and took < 15
    assert len(lines) == 1 and re.search(r"the MPI launcher ended the job at iteration \d+ "
                                         r"\(SIGTERM", lines[0])


FAILING_LAYER = '''
import caffecli as caffe


class FailOnRank1(caffe.Layer):
    """Passes its input on; on rank 1 its third forward fails."""
    def setup(self, bottom, top):
        self.calls = 0

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        self.calls += 1
        if caffe.solver_rank() == 1 and self.calls == 3:
            raise RuntimeError("rank 1 lost its data")
        top[0].data[...] = bottom[0].data

    def backward(self, top, propagate_down, bottom):
        pass
'''


def test_a_failing_rank_says_so_in_one_line_and_ends_the_job(endless):
    folder, solver = endless
    with open(os.path.join(folder, "failing.py"), "w") as f:
        f.write(FAILING_LAYER)
    net = os.path.join(folder, "lenet_b32.prototxt")
    with open(net) as f:
        text = f.read().replace('layer {\n  name: "conv1"', 'layer { name: "check" type: '
                                '"Python" bottom: "data" top: "checked" python_param { module: '
                                '"failing" layer: "FailOnRank1" } }\nlayer {\n  name: "conv1"')
    with open(os.path.join(folder, "failing.prototxt"), "w") as f:
        f.write(text.replace('bottom: "data"\n  top: "conv1"', 'bottom: "checked"\n  '
                             'top: "conv1"'))
    failing = solver.replace("endless_solver", "failing_solver")
    with open(solver) as f, open(failing, "w") as g:
        g.write(f.read().replace(net, os.path.join(folder, "failing.prototxt")))
    env = dict(ENV, PYTHONPATH=folder)
    job = subprocess.Popen(command(["--solver", failing], 2), env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    out, _ = job.communicate(timeout=120)
    errors = [line for line in out.splitlines() if "caffecli: error:" in line]
    assert job.returncode != 0 and "Traceback" not in out
    assert len(errors) == 1 and "caffecli: error: rank 1 of 2: " in errors[0]
    assert "rank 1 lost its data" in errors[0]


def test_a_setup_error_on_every_rank_is_one_line_and_a_clean_exit(tmp_path):
    solver = tmp_path / "solver.prototxt"
    solver.write_text('net: "%s"\nbase_lr: 0.1\n' % (tmp_path / "missing.prototxt"))
    done = subprocess.run(command(["--solver", str(solver)], 2), env=ENV, timeout=120,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    errors = [line for line in done.stdout.splitlines() if " error: " in line]
    assert done.returncode == 1
    assert len(errors) == 1 and re.match(r"caffecli: error: rank 0 of 2: .*missing"
                                         r"\.prototxt: file not found", errors[0]), done.stdout
    assert "Abort" not in done.stdout
