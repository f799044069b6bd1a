"""A fresh clone sets itself up: the Makefile's own virtual environment, LevelDB installed by
default, CI running the README's command, and the README's Python example writing nothing
into the checkout."""
import configparser
import os
import re
import shutil
import subprocess
import sys

import numpy
import pytest

from data_helpers import write_datum_db

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def read(*parts):
    with open(os.path.join(ROOT, *parts)) as f:
        return f.read()


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
@pytest.mark.parametrize("target", ["test", "demo"])
def test_make_creates_and_uses_its_own_venv(tmp_path, target):
    venv = str(tmp_path / "v")
    out = subprocess.run(["make", "-n", "--no-print-directory", "-C", ROOT, "VENV=" + venv, "PYTHON=python3", target],
                         capture_output=True, text=True, check=True).stdout
    lines = [l for l in out.splitlines() if l.strip()]
    assert lines[0] == "python3 -m venv " + venv
    for line in lines[1:]:   # everything else runs the venv's interpreter
        if "pip" in line or "pytest" in line or "caffecli" in line:
            assert line.startswith((venv + "/bin/python ", "rm ", "touch ")), line


def test_leveldb_is_installed_by_default_and_ci_runs_make_test():
    cfg = configparser.ConfigParser()
    cfg.read(os.path.join(ROOT, "setup.cfg"))
    requires = cfg["options"]["install_requires"].split()
    assert any(r.startswith("plyvel") for r in requires)
    assert re.search(r"^make test$", read(".ci", "run"), re.M)
    assert "Python ≥ 3.9 with its `venv` module" in read("README.md")


@pytest.mark.skipif(not os.path.isdir(os.path.join(ROOT, ".git")) and
                    not os.path.isfile(os.path.join(ROOT, ".git")), reason="not a git checkout")
def test_what_make_demo_and_the_venv_write_is_ignored():
    paths = [".venv/bin/python", ".venv/.installed", "data/mnist/train-images-idx3-ubyte",
             "data/mnist/mnist_train_lmdb/data.mdb", "data/mnist/lenet_iter_10000.caffemodel",
             "data/mnist/lenet_iter_10000.solverstate.caffecli", "caffecli.egg-info/PKG-INFO"]
    proc = subprocess.run(["git", "-C", ROOT, "check-ignore", "--no-index"] + paths,
                          capture_output=True, text=True)
    assert proc.stdout.split() == paths


def test_readme_python_example_writes_nothing_into_the_checkout(tmp_path, tmp_path_factory):
    """Run the README's example where the demo's files would be (small stand-ins: an LMDB of
    8 digits, fresh weights, LeNet with batches of 4) and check that the folder holds exactly
    what it held before."""
    example = re.search(r"```python\n(.*?)```", read("README.md"), re.S).group(1)
    lenet = tmp_path / "models" / "lenet"
    shutil.copytree(os.path.join(ROOT, "models", "lenet"), lenet)
    for name in ("lenet_train_test.prototxt", "lenet_solver.prototxt"):
        text = (lenet / name).read_text()
        (lenet / name).write_text(re.sub(r"batch_size: \d+", "batch_size: 4",
                                         text.replace("test_iter: 100", "test_iter: 1")))
    data = tmp_path / "data" / "mnist"
    data.mkdir(parents=True)
    rs = numpy.random.RandomState(0)
    for name in ("mnist_train_lmdb", "mnist_test_lmdb"):
        write_datum_db(str(data / name), rs.randint(0, 255, (8, 1, 28, 28)),
                       labels=rs.randint(0, 10, 8))
    import caffecli
    net = caffecli.Net(str(lenet / "lenet.prototxt"), caffecli.TEST, log=False)
    net.save(str(data / "lenet_iter_10000.caffemodel"))
    before = sorted(str(p) for p in tmp_path.rglob("*"))
    scratch = tmp_path_factory.mktemp("example_tmp")   # where its tempfile.mkdtemp() goes
    env = dict(os.environ, PYTHONPATH=ROOT, GLOG_minloglevel="2", TMPDIR=str(scratch))
    proc = subprocess.run([sys.executable, "-c", example], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "['data'] ['prob']" in proc.stdout
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before
    assert [p.name for p in scratch.rglob("*.caffemodel")] == ["edited.caffemodel"]
