"""parse_log and plot_log on a log ``caffecli train`` writes (end to end, in subprocesses), and
parse_log.py's glog-date and row rules on hand-written logs."""
import csv
import os
import subprocess
import sys

import pytest
from PIL import Image

from caffecli.errors import CaffeError
from caffecli.tools import plot_log as plot_log_mod
from caffecli.tools.parse_log import parse_log

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY_NET = """name: "tiny"
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 4 dim: 3 } shape { dim: 4 }
    data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "accuracy" type: "Accuracy" bottom: "ip" bottom: "label" top: "accuracy"
  include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""
TINY_SOLVER = """net: "net.prototxt" test_iter: 2 test_interval: 4 base_lr: 0.1
lr_policy: "step" gamma: 0.5 stepsize: 4 display: 2 max_iter: 8 solver_mode: CPU
random_seed: 1 snapshot_after_train: false
"""


def caffecli(args, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "caffecli"] + args, cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def train_log(tmp_path_factory):
    """The stderr of ``caffecli train`` on a tiny net: tests at 0/4/8, display every 2, lr
    halved at 4."""
    folder = tmp_path_factory.mktemp("train")
    (folder / "net.prototxt").write_text(TINY_NET)
    (folder / "solver.prototxt").write_text(TINY_SOLVER)
    result = caffecli(["train", "--solver", "solver.prototxt"], folder)
    assert result.returncode == 0, result.stderr
    (folder / "tiny.log").write_text(result.stderr)
    return folder / "tiny.log"


def read_csv(path):
    with open(path, newline="") as f:
        text = f.read()
    assert text.endswith("\r\n")  # csv.excel line ends, as parse_log.py writes
    return list(csv.reader(text.splitlines()))


def test_parse_log_csvs_from_a_caffecli_log(train_log, tmp_path):
    result = caffecli(["parse_log", str(train_log), str(tmp_path), "--verbose"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Wrote %s" % (tmp_path / "tiny.log.train") in result.stdout
    train = read_csv(tmp_path / "tiny.log.train")
    test = read_csv(tmp_path / "tiny.log.test")
    assert train[0] == ["NumIters", "Seconds", "LearningRate", "loss"]
    assert test[0] == ["NumIters", "Seconds", "LearningRate", "accuracy", "loss"]
    assert [r[0] for r in train[1:]] == ["0.0", "2.0", "4.0", "6.0"]
    assert [r[0] for r in test[1:]] == ["0.0", "4.0", "8.0"]
    # a row carries the lr last printed before it; the first row borrows the second's
    assert [float(r[2]) for r in train[1:]] == [0.1, 0.1, 0.1, 0.05]
    assert [float(r[2]) for r in test[1:]] == [0.1, 0.1, 0.05]
    seconds = [float(r[1]) for r in train[1:]]
    assert seconds == sorted(seconds) and seconds[0] >= 0
    logged = [line.rsplit("loss = ", 1)[1].split()[0]
              for line in train_log.read_text().splitlines()
              if "Train net output #0: loss = " in line]
    assert [float(r[3]) for r in train[1:]] == [float(v) for v in logged]
    assert all(0 <= float(r[3]) <= 1 for r in test[1:])


def test_plot_log_draws_all_charts_or_one(train_log, tmp_path):
    result = caffecli(["plot_log", str(train_log), str(tmp_path / "all.png")], tmp_path)
    assert result.returncode == 0, result.stderr
    grid = Image.open(tmp_path / "all.png")
    assert grid.size == (800, 1088)  # 2 x 4 charts at 80 dpi
    plot_log_mod.plot_logs([str(train_log), str(train_log)], str(tmp_path / "one.png"), chart=7)
    one = Image.open(tmp_path / "one.png").convert("RGB")
    assert one.size == (400, 272)
    colours = {one.getpixel((x, y)) for x in range(0, 400, 4) for y in range(0, 272, 4)}
    assert len(colours) > 10  # lines, markers, text: not a blank image
    with pytest.raises(CaffeError, match="chart type 8"):
        plot_log_mod.plot_logs([str(train_log)], str(tmp_path / "x.png"), chart=8)


def test_plot_log_without_matplotlib_names_the_extra(train_log, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(CaffeError, match=r"matplotlib package: pip install 'caffecli\[plot\]'"):
        plot_log_mod.plot_logs([str(train_log)], str(tmp_path / "x.png"))


def test_chart_types_are_plot_training_logs():
    names = [plot_log_mod.chart_description(i) for i in range(8)]
    assert names[0] == "Test accuracy  vs. Iters" and names[3] == "Test loss  vs. Seconds"
    assert names[5] == "Train learning rate  vs. Seconds" and names[6] == "Train loss  vs. Iters"


LOG_LINES = """\
{d1} 23:59:58.500000  7 solver.cpp:289] Solving tiny
{d1} 23:59:58.600000  7 solver.cpp:347] Iteration 0, Testing net (#0)
{d1} 23:59:58.700000  7 solver.cpp:414]     Test net output #0: loss = 2.5
  a continuation line without a time stamp
{d1} 23:59:59.000000  7 solver.cpp:239] Iteration 0 (0 iter/s, 0s/2 iters), loss = 2
{d1} 23:59:59.100000  7 solver.cpp:258]     Train net output #0: loss = 2
{d2} 00:00:01.000000  7 sgd_solver.cpp:112] Iteration 2, lr = 0.5
{d2} 00:00:01.000000  7 solver.cpp:258]     Train net output #0: loss = 1.5
{d2} 00:00:02.000000  7 solver.cpp:347] Iteration 4, Testing net (#0)
{d2} 00:00:02.500000  7 solver.cpp:414]     Test net output #0: loss = 1e-3
"""


@pytest.mark.parametrize("d1, d2", [("I1231", "I0101"), ("I20261231", "I20270101")])
def test_glog_dates_cross_the_new_year(tmp_path, d1, d2):
    """Classic I1231 dates take the file's year and roll over when the month goes down; glog
    0.6's I20261231 dates carry their year."""
    path = tmp_path / "year.log"
    path.write_text(LOG_LINES.format(d1=d1, d2=d2))
    train, test = parse_log(str(path))
    assert [(r["NumIters"], r["Seconds"], r["loss"]) for r in train] == [(0.0, 0.6, 2.0),
                                                                         (2.0, 2.5, 1.5)]
    assert [r["LearningRate"] for r in train] == [0.5, 0.5]
    assert [(r["NumIters"], r["Seconds"], r["loss"]) for r in test] == [(0.0, 0.2, 2.5),
                                                                        (4.0, 4.0, 0.001)]


def test_parse_log_needs_a_solving_line(tmp_path):
    path = tmp_path / "no.log"
    path.write_text("I1231 10:00:00.000000  7 net.cpp:1] Iteration 1\n")
    with pytest.raises(CaffeError, match="no 'Solving' line"):
        parse_log(str(path))


def test_plot_log_grid_notes_charts_without_numbers(tmp_path):
    path = tmp_path / "noacc.log"
    path.write_text(LOG_LINES.format(d1="I0301", d2="I0301"))
    plot_log_mod.plot_logs([str(path)], str(tmp_path / "grid.png"))
    assert Image.open(tmp_path / "grid.png").size == (800, 1088)
    with pytest.raises(CaffeError, match=r"no test accuracy column to plot \(test outputs: loss\)"):
        plot_log_mod.plot_logs([str(path)], str(tmp_path / "one.png"), chart=0)
