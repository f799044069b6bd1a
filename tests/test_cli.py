"""The ``caffecli`` command against Caffe's own logs (shared/golden/cli__*): the same kinds of log
lines in the same order, the same losses, logs that BVLC's parse_log.py reads the same way,
gflags spellings, one-line errors, and SIGINT/SIGHUP handling."""
import collections
import datetime
import os
import re
import shutil
import signal
import subprocess
import sys
import threading

import numpy
import pytest
from click.testing import CliRunner

from caffecli.cli import errors as cli_errors
from caffecli.cli import gflags
from caffecli.cli.main import cli, main
from caffecli.cli.train import SignalHandler
from conftest import real_gpu_reason
from golden import MISSING, golden_dir

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GOLDEN = golden_dir() or ""
needs_golden = pytest.mark.skipif(not GOLDEN, reason=MISSING)

# ---- reading glog logs ---------------------------------------------------------------------
GLOG_LINE = re.compile(r"^([IWEF])(\d{4}|\d{8}) (\d\d:\d\d:\d\d\.\d+)\s+(\d+) "
                       r"([^\s:\]]+):(\d+)\] ?(.*)$")
NUMBER = re.compile(r"-?nan|-?inf|[-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?")


def classic(text):
    """glog 0.6's ``I20261122`` prefixes as classic glog's ``I1122`` (what parse_log.py reads)."""
    return re.sub(r"^([IWEF])\d{4}(\d{4}) ", r"\1\2 ", text, flags=re.M)


def line_kinds(text):
    """(severity, source file, message with every number as '#') per line; continuation lines of
    multi-line messages (net and solver dumps) get an empty severity and file."""
    out = []
    for line in text.splitlines():
        m = GLOG_LINE.match(line)
        if m:
            out.append((m.group(1), m.group(5), NUMBER.sub("#", m.group(7)).rstrip()))
        else:
            out.append(("", "", NUMBER.sub("#", line).rstrip()))
    return out


def tagged(text, tag):
    """[(line number, message)] of the glog lines from source ``tag`` (e.g. 'caffe.cpp')."""
    out = []
    for line in text.splitlines():
        m = GLOG_LINE.match(line)
        if m and m.group(5) == tag:
            out.append((int(m.group(6)), m.group(7)))
    return out


def assert_same_kinds(ours, caffes):
    a, b = line_kinds(ours), line_kinds(caffes)
    if a != b:
        import difflib
        diff = "\n".join(difflib.unified_diff(["%s %s %s" % k for k in b],
                                              ["%s %s %s" % k for k in a],
                                              "caffe", "caffecli", lineterm="", n=2))
        raise AssertionError("log line kinds differ from Caffe's:\n" + diff[:6000])
    # the lines this command prints itself carry caffe.cpp's line numbers too
    assert [n for n, _ in tagged(ours, "caffe.cpp")] == [n for n, _ in tagged(caffes, "caffe.cpp")]


# parse_log.py's four regexes, verbatim, and its row-building rules
RE_ITERATION = re.compile(r'Iteration (\d+)')
RE_TRAIN_OUTPUT = re.compile(r'Train net output #(\d+): (\S+) = ([\.\deE+-]+)')
RE_TEST_OUTPUT = re.compile(r'Test net output #(\d+): (\S+) = ([\.\deE+-]+)')
RE_LEARNING_RATE = re.compile(r'lr = ([-+]?[0-9]*\.?[0-9]+([eE]?[-+]?[0-9]+)?)')


def _log_time(line, year=2026):
    fields = line.strip().split()
    month, day = int(fields[0][1:3]), int(fields[0][3:])
    clock, frac = fields[1].rsplit(".", 1)
    h, m, s = (int(x) for x in clock.split(":"))
    return datetime.datetime(year, month, day, h, m, s, int(frac))


def parse_log(text):
    """(train rows, test rows) as BVLC tools/extra/parse_log.py builds them from a log."""
    lines = text.splitlines()
    start = next(_log_time(l) for l in lines if "Solving" in l)
    iteration, lr = -1, float("nan")
    tables = {"train": [], "test": []}
    rows = {"train": None, "test": None}
    for line in lines:
        m = RE_ITERATION.search(line)
        if m:
            iteration = float(m.group(1))
        if iteration == -1:
            continue
        try:
            seconds = (_log_time(line) - start).total_seconds()
        except (ValueError, IndexError):
            continue
        m = RE_LEARNING_RATE.search(line)
        if m:
            lr = float(m.group(1))
        for key, regex in (("train", RE_TRAIN_OUTPUT), ("test", RE_TEST_OUTPUT)):
            row, table = rows[key], tables[key]
            m = regex.search(line)
            if m:
                if not row or row["NumIters"] != iteration:
                    if row:
                        table.append(row)
                    row = collections.OrderedDict(
                        [("NumIters", iteration), ("Seconds", seconds), ("LearningRate", lr)])
                row[m.group(2)] = float(m.group(3))
            if row and len(table) >= 1 and len(row) == len(table[0]):
                table.append(row)
                row = None
            rows[key] = row
    for table in tables.values():
        if len(table) > 1:
            table[0]["LearningRate"] = table[1]["LearningRate"]
    return tables["train"], tables["test"]


# ---- running the command -------------------------------------------------------------------
def _fresh_process_state():
    """What a new ``caffecli`` process starts with: glog's LOG_FIRST_N lines not yet printed."""
    from caffecli.util import hdf5_class
    hdf5_class.forget()


def run_cli(args, cwd):
    """Run the command through click's CliRunner in ``cwd`` as a fresh process would; return
    the click Result."""
    _fresh_process_state()
    old = os.getcwd()
    os.chdir(cwd)
    try:
        return CliRunner().invoke(cli, args)
    finally:
        os.chdir(old)


def run_subprocess(args, cwd, extra_env=(), **kw):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    env.update(extra_env)
    return subprocess.run([sys.executable, "-m", "caffecli"] + args, cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300, **kw)


def case_copy(name, tmp_path):
    """A writable copy of golden case ``name`` (commands write snapshots into the folder)."""
    dst = tmp_path / name
    shutil.copytree(os.path.join(GOLDEN, name), dst)
    return dst


def golden_log(name, filename="stderr.txt"):
    with open(os.path.join(GOLDEN, name, filename)) as f:
        return f.read()


# ---- gflags spellings ----------------------------------------------------------------------
@pytest.mark.parametrize("argv", [
    ["train", "-solver", "s.prototxt"],
    ["train", "-solver=s.prototxt"],
    ["train", "--solver=s.prototxt"],
    ["train", "--solver", "s.prototxt"],
    ["-solver", "s.prototxt", "train"],
    ["--solver=s.prototxt", "train"],
])
def test_gflags_spellings(argv):
    parsed = gflags.parse(argv)
    assert parsed.positional == ["train"]
    assert parsed.values["solver"] == "s.prototxt" and parsed.given == ["solver"]


def test_gflags_values_types_and_booleans():
    parsed = gflags.parse(["time", "-model", "m", "-level", "-1", "--debug", "-nologtostderr",
                           "-alsologtostderr=false", "-iterations=0x10"])
    assert parsed.positional == ["time"]
    v = parsed.values
    assert (v["model"], v["level"], v["debug"], v["iterations"]) == ("m", -1, True, 16)
    assert v["logtostderr"] is False and v["alsologtostderr"] is False
    assert gflags.parse(["--", "-solver"]).positional == ["-solver"]
    assert gflags.parse(["time", "-phase="]).values["phase"] == ""


def test_gflags_stops_at_a_tool_command():
    parsed = gflags.parse(["-debug", "convert_imageset", "-resize_height", "4", "a"],
                          {"convert_imageset"})
    assert parsed.positional == ["convert_imageset"]
    assert parsed.rest == ["-resize_height", "4", "a"]


def test_stage_flags_split_like_caffe():
    assert gflags.split_list(()) == [""]
    assert gflags.split_list(["a,b", "c"]) == ["a", "b", "c"]
    assert gflags.parse(["-stage", "a,b", "-stage", "c"]).stages == ["a,b", "c"]


def test_flag_description_wraps_as_gflags_does():
    text = gflags.describe(gflags.BY_NAME["gpu"])
    assert text == (
        "    -gpu (Optional; run in GPU mode on given device IDs separated by ','.Use\n"
        "      '-gpu all' to run on all available GPUs. The effective training batch\n"
        "      size is multiplied by the number of devices.) type: string default: \"\"\n")
    assert gflags.describe(gflags.BY_NAME["iterations"]) == (
        "    -iterations (The number of iterations to run.) type: int32 default: 50\n")
    assert all(len(line) < 80 for f in gflags.FLAGS for line in gflags.describe(f).splitlines())


# ---- simple commands and errors ------------------------------------------------------------
def test_layers_lists_registered_types(tmp_path):
    result = run_cli(["layers"], tmp_path)
    assert result.exit_code == 0
    names = result.stdout.split()
    for t in ("Convolution", "InnerProduct", "Pooling", "ReLU", "Input"):
        assert t in names
    assert names == sorted(names)


def test_missing_solver_file_is_one_line_error(tmp_path):
    result = run_cli(["train", "-solver", "nope.prototxt"], tmp_path)
    assert result.exit_code == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("caffecli: error: ")
    assert "nope.prototxt" in lines[0]
    assert "Traceback" not in result.output


def test_weights_and_snapshot_together_is_an_error(tmp_path):
    (tmp_path / "s.prototxt").write_text('net: "n.prototxt"\n')
    result = run_cli(["train", "-solver", "s.prototxt", "-weights", "a.caffemodel",
                      "-snapshot", "b.solverstate"], tmp_path)
    assert result.exit_code == 1
    assert "Give a snapshot to resume training or weights to finetune but not both" \
        in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_bad_signal_effect_is_an_error(tmp_path):
    (tmp_path / "s.prototxt").write_text('net: "n.prototxt"\n')
    result = run_cli(["train", "-solver", "s.prototxt", "-sigint_effect", "explode"], tmp_path)
    assert result.exit_code == 1
    assert 'Invalid signal effect "explode"' in result.stderr


def test_test_needs_weights(tmp_path):
    result = run_cli(["test", "-model", "m.prototxt"], tmp_path)
    assert result.exit_code == 1
    assert "Need model weights to score" in result.stderr


@pytest.mark.skipif(real_gpu_reason() is None, reason="a GPU is usable here")
@pytest.mark.parametrize("command", [["time", "-model", "m.prototxt"],
                                     ["device_query"], ["train", "-solver", "s.prototxt"]])
def test_gpu_flag_without_gpu_is_one_line_error(tmp_path, command, monkeypatch):
    monkeypatch.delenv("CAFFECLI_STANDIN_GPU", raising=False)
    (tmp_path / "s.prototxt").write_text('net: "m.prototxt"\n')
    (tmp_path / "m.prototxt").write_text(TINY_NET)
    result = run_cli(command + ["-gpu", "0"], tmp_path)
    assert result.exit_code == 1
    err = [l for l in result.stderr.splitlines() if l.startswith("caffecli: error:")]
    assert len(err) == 1 and "-gpu 0" in err[0]
    assert "Traceback" not in result.output


def test_debug_shows_the_exception(tmp_path):
    result = run_cli(["--debug", "train", "-solver", "nope.prototxt"], tmp_path)
    assert result.exit_code != 0
    assert result.exception is not None and not isinstance(result.exception, SystemExit)


def test_internal_errors_are_summarized():
    line = cli_errors.one_line(ZeroDivisionError("division by zero"))
    assert "ZeroDivisionError" in line and "--debug" in line


def test_subprocess_error_exit_status(tmp_path):
    proc = run_subprocess(["test", "-model", "missing.prototxt", "-weights", "w"], tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith("caffecli: error: ")
    assert "Traceback" not in proc.stderr


# ---- time ----------------------------------------------------------------------------------
TINY_NET = """name: "tiny"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
    bias_filler { type: "gaussian" std: 1 } } }
layer { name: "loss" type: "Reduction" bottom: "ip" top: "loss" loss_weight: 1
  reduction_param { operation: SUMSQ } }
"""


@needs_golden
def test_time_log_matches_caffe(tmp_path):
    case = case_copy("cli__time_conv_net", tmp_path)
    result = run_cli(["time", "-model", "net.prototxt", "-iterations", "2"], case)
    assert result.exit_code == 0, result.output
    assert_same_kinds(result.stderr, golden_log("cli__time_conv_net"))
    assert result.stdout == ""


def test_time_layer_lines(tmp_path):
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    result = run_cli(["time", "--model=net.prototxt", "--iterations=3"], tmp_path)
    assert result.exit_code == 0, result.output
    text = result.stderr
    # Caffe's CPU Timer::MilliSeconds counts whole milliseconds (a tiny net: "0 ms.")
    assert len(re.findall(r"Iteration: \d forward-backward time: \d+ ms\.", text)) == 3
    assert re.search(r"Total Time: \d+ ms\.", text)
    for name in ("data", "ip", "loss"):
        assert re.search(r"\] {%d}%s\tforward: [\d.e+-]+ ms\." % (11 - len(name), name), text)
        assert re.search(r"\] {%d}%s\tbackward: [\d.e+-]+ ms\." % (11 - len(name), name), text)
    loss = float(re.search(r"Initial loss: (\S+)", text).group(1))
    assert loss > 0  # SUMSQ of a gaussian bias


@needs_golden
def test_time_train_test_time_case(tmp_path):
    case = case_copy("cli__train_test_time", tmp_path)
    result = run_cli(["time", "-model", "net.prototxt", "-iterations", "2"], case)
    assert result.exit_code == 0, result.output
    assert_same_kinds(result.stderr, golden_log("cli__train_test_time", "caffe_time.log"))


# ---- test ----------------------------------------------------------------------------------
def _batch_values(text):
    return [(int(i), name, float(v)) for i, name, v in
            re.findall(r"Batch (\d+), (\S+) = (\S+)", text)]


def _final_values(text):
    return {name: float(v) for name, v in
            re.findall(r"caffe\.cpp:321\] (\S+) = ([-\d.e+naif]+)", text)}


@needs_golden
@pytest.mark.parametrize("case, iterations", [("cli__test_hdf5_accuracy_loss", 2),
                                              ("cli__test_hdf5_wrap_iter3", 3)])
def test_test_matches_caffe(tmp_path, case, iterations):
    import h5py
    folder = case_copy(case, tmp_path)
    result = run_cli(["test", "-model", "net.prototxt", "-weights", "w.caffemodel",
                      "-iterations", str(iterations)], folder)
    assert result.exit_code == 0, result.output
    golden = golden_log(case)
    assert_same_kinds(result.stderr, golden)
    ours, theirs = _batch_values(result.stderr), _batch_values(golden)
    assert [(i, n) for i, n, _ in ours] == [(i, n) for i, n, _ in theirs]
    with h5py.File(os.path.join(GOLDEN, case, "case.h5"), "r") as f:
        for i, name, v in ours:
            want = float(f["batches/%d/%s" % (i, name)][()])
            assert abs(v - want) <= 1e-5 + 1e-4 * abs(want), (i, name, v, want)
    want_final = _final_values(golden)
    got_final = _final_values(result.stderr)
    assert set(got_final) == set(want_final)
    for k in want_final:
        assert got_final[k] == pytest.approx(want_final[k], rel=1e-4, abs=1e-5)
    want_loss = float(re.search(r"Loss: (\S+)", golden).group(1))
    got_loss = float(re.search(r"Loss: (\S+)", result.stderr).group(1))
    assert got_loss == pytest.approx(want_loss, rel=1e-4, abs=1e-5)


@needs_golden
def test_test_train_test_time_case_subprocess(tmp_path):
    case = case_copy("cli__train_test_time", tmp_path)
    proc = run_subprocess(["test", "-model", "net.prototxt", "-weights", "init.caffemodel",
                           "-iterations", "2"], case)
    assert proc.returncode == 0, proc.stderr[-2000:]
    golden = golden_log("cli__train_test_time", "caffe_test.log")
    assert_same_kinds(proc.stderr, golden)
    assert [v for _, _, v in _batch_values(proc.stderr)] == pytest.approx(
        [v for _, _, v in _batch_values(golden)], rel=1e-4, abs=1e-5)


def test_test_prints_every_element_of_an_output(tmp_path):
    """caffe.cpp prints each value of a multi-element output and averages element-wise."""
    import caffecli
    (tmp_path / "net.prototxt").write_text(TINY_NET.replace(
        'layer { name: "loss"', 'layer { name: "sq" type: "Power" bottom: "ip" top: "sq" }\n'
        'layer { name: "loss"'))
    net = caffecli.Net(str(tmp_path / "net.prototxt"), caffecli.TEST, log=False)
    net.save(str(tmp_path / "w.caffemodel"))
    result = run_cli(["test", "-model", "net.prototxt", "-weights", "w.caffemodel",
                      "-iterations", "2"], tmp_path)
    assert result.exit_code == 0, result.output
    batch = _batch_values(result.stderr)
    assert [(i, n) for i, n, _ in batch] == [(0, "loss")] + [(0, "sq")] * 8 + \
        [(1, "loss")] + [(1, "sq")] * 8
    finals = re.findall(r"caffe\.cpp:321\] (\S+) = (\S+)(.*)", result.stderr)
    assert [n for n, _, _ in finals] == ["loss"] + ["sq"] * 8
    assert "(* 1 = " in finals[0][2] and finals[1][2] == ""
    net.forward_pass()
    want = net.blob_by_name("sq").data.reshape(-1)
    assert [float(v) for _, v, _ in finals[1:]] == pytest.approx(want.tolist(), rel=1e-5)


# ---- train ---------------------------------------------------------------------------------
@needs_golden
def test_train_log_matches_caffe(tmp_path):
    case = case_copy("cli__train_test_interval", tmp_path)
    result = run_cli(["train", "-solver", "solver.prototxt"], case)
    assert result.exit_code == 0, result.output
    golden = golden_log("cli__train_test_interval")
    assert_same_kinds(result.stderr, golden)
    ours, theirs = parse_log(classic(result.stderr)), parse_log(classic(golden))
    for mine, caffes in zip(ours, theirs):
        assert [list(r) for r in mine] == [list(r) for r in caffes]
        assert [r["NumIters"] for r in mine] == [r["NumIters"] for r in caffes]
        assert [r["LearningRate"] for r in mine] == [r["LearningRate"] for r in caffes]
        # the weights start from the fillers, seeded by random_seed: Caffe's own numbers
        for a, b in zip(mine, caffes):
            for key in set(a) - {"NumIters", "Seconds", "LearningRate"}:
                assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-5), key


@needs_golden
def test_train_from_weights_reproduces_caffes_losses(tmp_path):
    case = case_copy("cli__train_test_time", tmp_path)
    result = run_cli(["train", "-solver", "solver.prototxt", "-weights", "init.caffemodel"],
                     case)
    assert result.exit_code == 0, result.output
    golden = golden_log("cli__train_test_time", "caffe_train.log")
    assert_same_kinds(result.stderr, golden)
    (train_o, test_o), (train_c, test_c) = parse_log(classic(result.stderr)), \
        parse_log(classic(golden))
    assert len(train_o) == len(train_c) > 0 and len(test_o) == len(test_c) > 0
    for mine, caffes in ((train_o, train_c), (test_o, test_c)):
        for a, b in zip(mine, caffes):
            assert list(a) == list(b)
            assert a["NumIters"] == b["NumIters"]
            assert a["loss"] == pytest.approx(b["loss"], rel=1e-4, abs=1e-5)
    for f in ("snap_iter_6.caffemodel", "snap_iter_6.solverstate",
              "snap_iter_12.caffemodel", "snap_iter_12.solverstate"):
        assert (case / f).exists()
    assert "Finetuning from init.caffemodel" in result.stderr


@needs_golden
def test_train_resume_from_snapshot(tmp_path):
    case = case_copy("cli__train_test_time", tmp_path)
    first = run_cli(["train", "-solver", "solver.prototxt", "-weights", "init.caffemodel"],
                    case)
    assert first.exit_code == 0, first.output
    resumed = run_cli(["train", "--solver=solver.prototxt", "--snapshot=snap_iter_6.solverstate"],
                      case)
    assert resumed.exit_code == 0, resumed.output
    lines = tagged(resumed.stderr, "caffe.cpp")
    assert [m for _, m in lines] == ["Use CPU.", "Resuming from snap_iter_6.solverstate",
                                     "Starting Optimization", "Optimization Done."]
    assert [n for n, _ in lines] == [197, 235, 239, 250]
    assert "Iteration 6" in resumed.stderr and "Iteration 0," not in resumed.stderr


SIGNAL_SOLVER = """net: "net.prototxt"
base_lr: 0.001
lr_policy: "fixed"
max_iter: 100000000
display: 1
snapshot_prefix: "sig"
snapshot_after_train: false
random_seed: 1
"""


def _train_with_signals(tmp_path, steps, extra=(), solver=SIGNAL_SOLVER):
    """Train ``solver`` in a subprocess; for each (text, signal) step wait for a log line
    containing ``text`` then send ``signal`` (if any). Return (exit status, whole log)."""
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    (tmp_path / "solver.prototxt").write_text(solver)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "caffecli", "train", "-solver",
                             "solver.prototxt"] + list(extra), cwd=tmp_path, env=env,
                            stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    log = []
    watchdog = threading.Timer(120, proc.kill)  # a lost signal must not hang the suite
    watchdog.start()
    try:
        for text, sig in steps:
            for line in proc.stderr:
                log.append(line)
                if text in line:
                    break
            if sig is not None:  # None: only wait for the line
                proc.send_signal(sig)
        log.extend(proc.stderr)  # to the end: the process exits once a signal stops it
        proc.wait(timeout=60)
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, "".join(log)


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_sigint_stops_training(tmp_path):
    rc, log = _train_with_signals(tmp_path, [("Iteration 3 ", signal.SIGINT)])
    assert rc == 0, log[-2000:]
    assert "Optimization stopped early." in log
    assert log.rstrip().endswith("Optimization Done.")
    assert not list(tmp_path.glob("sig_iter_*"))


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_sighup_default_effect_is_snapshot(tmp_path):
    rc, log = _train_with_signals(tmp_path, [("Iteration 3 ", signal.SIGHUP),
                                             ("Snapshotting solver state", signal.SIGINT)])
    assert rc == 0, log[-2000:]
    assert "Snapshotting to binary proto file sig_iter_" in log
    assert list(tmp_path.glob("sig_iter_*.caffemodel"))
    assert list(tmp_path.glob("sig_iter_*.solverstate"))
    assert "Optimization stopped early." in log


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_signal_effects_from_flags(tmp_path):
    rc, log = _train_with_signals(tmp_path, [("Iteration 3 ", signal.SIGINT),
                                             ("Snapshotting solver state", signal.SIGHUP)],
                                  ["-sigint_effect", "snapshot", "-sighup_effect", "stop"])
    assert rc == 0, log[-2000:]
    assert list(tmp_path.glob("sig_iter_*.solverstate"))
    assert "Optimization stopped early." in log


def test_signal_handler_maps_signals_to_effects():
    handler = SignalHandler("stop", "snapshot")
    try:
        assert handler.action() == "none"
        os.kill(os.getpid(), signal.SIGHUP)
        assert handler.action() == "snapshot"
        assert handler.action() == "none"
        os.kill(os.getpid(), signal.SIGINT)
        assert handler.action() == "stop"
    finally:
        handler.close()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_train_tiny_net_through_main(tmp_path, capsys):
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    (tmp_path / "solver.prototxt").write_text(SIGNAL_SOLVER.replace("100000000", "20")
                                              .replace("display: 1", "display: 5"))
    old = os.getcwd()
    os.chdir(tmp_path)
    try:
        status = main(["train", "-solver", "solver.prototxt", "-level", "2", "-stage", "a,b"])
    finally:
        os.chdir(old)
    assert status == 0
    err = capsys.readouterr().err
    assert [m for _, m in tagged(err, "caffe.cpp")] == ["Use CPU.", "Starting Optimization",
                                                        "Optimization Done."]
    train_rows, _ = parse_log(err)
    assert [r["NumIters"] for r in train_rows] == [0, 5, 10, 15]
    assert train_rows[-1]["loss"] < train_rows[0]["loss"]
    assert 'stage: "a"' in err and 'stage: "b"' in err and "level: 2" in err


def test_progress_bar_only_on_a_terminal(tmp_path):
    """Without a TTY (pipes, CI) there is no tqdm bar: every stderr line is a log line."""
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    (tmp_path / "solver.prototxt").write_text(SIGNAL_SOLVER.replace("100000000", "5"))
    proc = run_subprocess(["train", "-solver", "solver.prototxt"], tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for line in proc.stderr.splitlines():
        assert "\r" not in line and "it/s" not in line and "iter/s]" not in line


def test_log_numbers_parse_with_parse_log_regexes():
    """Our glog lines carry the classic I<mmdd> prefix parse_log.py's time parsing expects."""
    from caffecli import glog
    line = glog.format_line("I", "solver.cpp:239", "Iteration 5, lr = 0.01")
    assert _log_time(line).year == 2026
    assert RE_LEARNING_RATE.search(line).group(1) == "0.01"
    assert numpy.isclose(float(RE_ITERATION.search(line).group(1)), 5)


def test_help_and_version(tmp_path):
    result = run_cli(["train", "-help"], tmp_path)
    assert result.exit_code == 0 and "    -solver (" in result.stdout
    result = run_cli(["--version"], tmp_path)
    assert result.exit_code == 0 and "caffecli" in result.stdout


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")
def test_progress_bar_on_a_terminal_keeps_log_lines_whole(tmp_path):
    """On a TTY a tqdm bar is drawn; every log line still comes out whole after it."""
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    (tmp_path / "solver.prototxt").write_text(SIGNAL_SOLVER.replace("100000000", "300")
                                              .replace("display: 1", "display: 50"))
    import fcntl
    import struct
    import termios
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))  # 100 columns
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, "-m", "caffecli", "train", "-solver",
                             "solver.prototxt"], cwd=tmp_path, env=env, stderr=slave,
                            stdout=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    assert proc.wait(timeout=120) == 0
    raw = b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")
    assert "/300" in raw and "\r" in raw  # a bar (n/300) was drawn and redrawn
    visible = [seg.split("\r")[-1] for seg in raw.split("\n")]
    glog_lines = [l for l in visible if GLOG_LINE.match(l)]
    assert any("Iteration 300, loss = " in l for l in glog_lines)
    assert len([l for l in glog_lines if "Train net output #0" in l]) == 6
    assert not [l for l in glog_lines if "/300" in l]  # no bar text inside a log line


@needs_golden
def test_train_finetunes_from_comma_separated_weights(tmp_path):
    case = case_copy("cli__train_test_time", tmp_path)
    result = run_cli(["train", "-solver", "solver.prototxt",
                      "-weights", "init.caffemodel,snap_missing.caffemodel"], case)
    assert result.exit_code == 1  # the second file is loaded too, and it does not exist
    assert "Finetuning from init.caffemodel" in result.stderr
    assert "snap_missing.caffemodel" in result.stderr.strip().splitlines()[-1]


def test_time_and_test_honour_stage_and_level(tmp_path):
    net = TINY_NET + """layer { name: "extra" type: "Power" bottom: "ip" top: "extra"
  include { stage: "deploy" min_level: 2 } }
"""
    (tmp_path / "net.prototxt").write_text(net)
    plain = run_cli(["time", "-model", "net.prototxt", "-iterations", "1"], tmp_path)
    assert plain.exit_code == 0 and "extra\tforward" not in plain.stderr
    staged = run_cli(["time", "-model", "net.prototxt", "-iterations", "1", "-stage", "x",
                      "--stage=deploy", "-level", "2", "-phase", "TEST"], tmp_path)
    assert staged.exit_code == 0, staged.output
    assert "extra\tforward" in staged.stderr and "phase: TEST" in staged.stderr
    low = run_cli(["time", "-model", "net.prototxt", "-iterations", "1", "-stage", "deploy"],
                  tmp_path)
    assert "extra\tforward" not in low.stderr  # level 0 < min_level 2
    bad = run_cli(["time", "-model", "net.prototxt", "-phase", "VAL"], tmp_path)
    assert bad.exit_code == 1 and bad.stderr.strip() == \
        'caffecli: error: phase must be "TRAIN" or "TEST" (got "VAL")'


def test_train_logs_caffes_rule_sharing_and_weights_lines(tmp_path):
    """caffe.cpp adds -weights as one solver entry; each test shares the train net's layers
    anew (net.cpp:678 names each one the test net lacks); rule lines carry their own tags."""
    net = TINY_NET + ('layer { name: "train_only" type: "Power" bottom: "ip" top: "p" '
                      'include { phase: TRAIN } }\n'
                      'layer { name: "staged" type: "Power" bottom: "ip" top: "q" '
                      'include { stage: "deploy" } }\n')
    (tmp_path / "net.prototxt").write_text(net)
    (tmp_path / "solver.prototxt").write_text(
        SIGNAL_SOLVER.replace("100000000", "4").replace("display: 1", "display: 2")
        .replace("after_train: false", "after_train: true") + "test_iter: 1\ntest_interval: 2\n")
    first = run_cli(["train", "-solver", "solver.prototxt"], tmp_path)
    assert first.exit_code == 0, first.output
    result = run_cli(["train", "-solver", "solver.prototxt", "-weights", "sig_iter_4.caffemodel"
                      ",sig_iter_4.caffemodel"], tmp_path)
    assert result.exit_code == 0, result.output
    err = result.stderr
    assert 'weights: "sig_iter_4.caffemodel,sig_iter_4.caffemodel"' in err
    assert err.count("Finetuning from sig_iter_4.caffemodel") == 4   # train and test net
    tests = [i for i, line in enumerate(err.splitlines()) if "Testing net (#0)" in line]
    assert len(tests) == 3   # iterations 0, 2 and 4
    shared = tagged(err, "net.cpp")
    assert [m for n, m in shared if n == 678] == [   # the split of ip feeding train_only too
        "Ignoring source layer ip_ip_0_split", "Ignoring source layer train_only"] * 3
    assert (296, "The NetState phase (1) differed from the phase (0) specified by a rule in "
            "layer train_only") in shared
    assert (332, "The NetState did not contain stage 'deploy' specified by a rule in layer "
            "staged") in shared


def test_test_builds_the_test_phase_whatever_phase_says(tmp_path):
    net = TINY_NET + ('layer { name: "train_only" type: "Power" bottom: "ip" top: "p" '
                      'include { phase: TRAIN } }\n')
    (tmp_path / "net.prototxt").write_text(net)
    (tmp_path / "solver.prototxt").write_text(SIGNAL_SOLVER.replace("100000000", "1")
                                              .replace("after_train: false", "after_train: true"))
    assert run_cli(["train", "-solver", "solver.prototxt"], tmp_path).exit_code == 0
    result = run_cli(["test", "-model", "net.prototxt", "-weights", "sig_iter_1.caffemodel",
                      "-iterations", "1", "-phase", "TRAIN"], tmp_path)
    assert result.exit_code == 0, result.output
    assert "phase: TEST" in result.stderr and "Creating Layer train_only" not in result.stderr


def test_device_query_without_gpu_flag_says_querying_and_succeeds(tmp_path, monkeypatch):
    """Caffe's device_query with no -gpu logs "Querying GPUs " and queries nothing."""
    monkeypatch.delenv("CAFFECLI_STANDIN_GPU", raising=False)
    result = run_cli(["device_query"], tmp_path)
    assert result.exit_code == 0, result.output
    assert [m for _, m in tagged(result.stderr, "caffe.cpp")] == ["Querying GPUs "]
    assert "Device id:" not in result.stderr


SEEDED_CONV_NET = """name: "seeded"
layer { name: "data" type: "DummyData" top: "data" top: "label"
  dummy_data_param { shape { dim: 16 dim: 1 dim: 28 dim: 28 } shape { dim: 16 }
    data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 3 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 20 kernel_size: 5 weight_filler { type: "xavier" }
    bias_filler { type: "constant" value: 0.1 } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 50 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "relu" type: "ReLU" bottom: "conv2" top: "conv2" }
layer { name: "ip" type: "InnerProduct" bottom: "conv2" top: "ip"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


@pytest.mark.parametrize("threads", ["1", "2"])
def test_seeded_training_repeats_byte_for_byte(tmp_path, threads):
    """With random_seed set, two runs on the same thread count write the same snapshot bytes
    (no thread split reorders a sum); another seed (one thread) starts and ends elsewhere."""
    (tmp_path / "net.prototxt").write_text(SEEDED_CONV_NET)
    snapshots = []
    for seed in (5, 5, 6) if threads == "1" else (5, 5):   # another seed: once is enough
        (tmp_path / "solver.prototxt").write_text(
            'net: "net.prototxt"\nbase_lr: 0.01\nmomentum: 0.9\nlr_policy: "fixed"\n'
            'max_iter: 6\nsnapshot_prefix: "s"\nrandom_seed: %d\n' % seed)
        proc = run_subprocess(["train", "-solver", "solver.prototxt"], tmp_path,
                              extra_env={"OMP_NUM_THREADS": threads})
        assert proc.returncode == 0, proc.stderr[-2000:]
        snapshots.append((tmp_path / "s_iter_6.caffemodel").read_bytes())
        (tmp_path / "s_iter_6.caffemodel").unlink()
    assert len(snapshots[0]) > 4 * 57000   # the weights are in it (57,580 parameters)
    assert snapshots[0] == snapshots[1]
    assert snapshots[0] not in snapshots[2:]
