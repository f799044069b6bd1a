"""The command line as Caffe's gflags shows it: usage with every flag and its default, any flag
accepted by any command (unused ones warned about), usage errors as one line and exit 1, the
third Ctrl-C; and two habits of the files and paths users hand over."""
import os
import pathlib
import re
import signal
import stat

import numpy
import pytest

import caffecli
from caffecli.cli import gflags

from bad_input_helpers import DEPLOY, assert_clean_end, run_command
from data_helpers import write_datum_db
from test_cli import SIGNAL_SOLVER, _train_with_signals, run_subprocess


def test_no_arguments_prints_caffes_usage_and_exits_0(tmp_path):
    proc = run_subprocess([], tmp_path)
    assert proc.returncode == 0 and proc.stderr == ""
    out = proc.stdout
    assert out.startswith("caffecli: command line brew\nusage: caffecli <command> <args>\n")
    for command in ("train", "test", "device_query", "time", "layers", "convert_imageset"):
        assert re.search(r"^  %s +\S" % command, out, re.M), command
    assert "\n  Flags from tools/caffe.cpp:\n" in out
    for flag in gflags.FLAGS:
        default = '"%s"' % flag.default if flag.type == "string" else \
            str(flag.default).lower()
        described = re.search(r"^    -%s \(.*?\) type: %s default: %s$"
                              % (flag.name, flag.type, re.escape(default)),
                              out.replace("\n      ", " "), re.M | re.S)
        assert described, flag.name


@pytest.mark.parametrize("args, needle", [
    (["time", "-bogus", "1"], "unknown command line flag 'bogus'"),
    (["--nosuch=1", "train"], "unknown command line flag 'nosuch'"),
    (["convert_imageset", "-nosuch"], "unknown command line flag 'nosuch'"),
    (["explode"], "unknown command 'explode'"),
    (["time", "-model", "m", "-iterations", "abc"], "illegal value 'abc' specified for int32"),
    (["time", "-model", "m", "-iterations", "1.5"], "illegal value '1.5'"),
    (["time", "-model", "m", "-iterations="], "illegal value ''"),
    (["time", "-model", "m", "-level", "abc"], "int32 flag 'level'"),
    (["time", "-model", "m", "-iterations", "99999999999"], "illegal value '99999999999'"),
    (["train", "-solver"], "flag '-solver' is missing its argument"),
    (["time", "-model", "m", "extra"], "unexpected argument 'extra'"),
    (["time", "-logtostderr=maybe"], "bool flag 'logtostderr'"),
])
def test_usage_errors_are_one_line_exit_1(tmp_path, args, needle):
    status, out, err = run_command(args, tmp_path)
    assert_clean_end(status, err, [needle])
    assert out == "" and len(err.splitlines()) == 1


def test_usage_errors_through_a_real_process(tmp_path):
    proc = run_subprocess(["time", "-iterations", "abc"], tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr == ("caffecli: error: illegal value 'abc' specified for int32 flag "
                           "'iterations'\n")


def test_flags_a_command_does_not_use_are_warned_about_and_ignored(tmp_path):
    (tmp_path / "net.prototxt").write_text(DEPLOY)
    status, _, err = run_command(["time", "-model", "net.prototxt", "-iterations", "1",
                                  "-weights", "nothing.caffemodel", "-sighup_effect", "stop",
                                  "-v", "0"], tmp_path)
    assert status == 0, err[-2000:]
    warnings = [line for line in err.splitlines() if line.startswith("W")]
    assert len(warnings) == 2   # -v is glog's: every command uses it
    assert "-weights is not used by 'time'" in warnings[0]
    assert "-sighup_effect is not used by 'time'" in warnings[1]
    assert "Average Forward pass" in err


def test_version_and_help(tmp_path):
    status, out, _ = run_command(["--version"], tmp_path)
    assert status == 0 and out == "caffecli version %s\n" % caffecli.__version__
    status, out, _ = run_command(["-helpfull"], tmp_path)
    assert status == 0 and "    -solver (" in out


@pytest.mark.skipif(not hasattr(signal, "SIGHUP"), reason="POSIX signals")
def test_third_ctrl_c_ends_training_saying_what_was_lost(tmp_path):
    # each press once the last was counted: Python runs one handler for presses that arrive
    # before it runs, and the log is read far behind the training
    steps = [("Iteration 3 ", signal.SIGINT), ("2 more end the run", signal.SIGINT),
             ("1 more ends the run", signal.SIGINT)]
    rc, log = _train_with_signals(tmp_path, steps, ["-sigint_effect", "none"],
                                  solver=SIGNAL_SOLVER)
    assert rc == 130, log[-2000:]
    said = [line.split("] ", 1)[1] for line in log.splitlines() if "train.py:0]" in line]
    assert said == ["Ctrl-C: ignored (-sigint_effect none); %s at once, without a snapshot"
                    % more for more in ("2 more end the run", "1 more ends the run")]
    last = log.rstrip().splitlines()[-1]
    assert re.match(r"caffecli: interrupted: Ctrl-C 3 times: stopped at iteration \d+ without "
                    r"a snapshot; the iterations since the last snapshot are lost$", last), last
    assert not list(tmp_path.glob("sig_iter_*"))


# ---- files users keep; paths users give ----------------------------------------------------
def test_saved_files_get_the_permissions_open_would_give(tmp_path):
    from test_cli import TINY_NET
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    (tmp_path / "solver.prototxt").write_text(
        SIGNAL_SOLVER.replace("100000000", "2").replace("snapshot_after_train: false\n", ""))
    old = os.umask(0o027)
    try:
        status, _, err = run_command(["train", "-solver", "solver.prototxt"], tmp_path)
        net = caffecli.Net(str(tmp_path / "net.prototxt"), caffecli.TEST)
        net.save(str(tmp_path / "saved.caffemodel.h5"))
        write_datum_db(str(tmp_path / "db"), numpy.zeros((2, 1, 2, 2)))
        mean_status, _, _ = run_command(["compute_image_mean", "db", "mean.binaryproto"],
                                        tmp_path)
    finally:
        os.umask(old)
    assert status == mean_status == 0, err[-2000:]
    kept = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("sig_", "saved")))
    assert kept == ["saved.caffemodel.h5", "sig_iter_2.caffemodel", "sig_iter_2.solverstate",
                    "sig_iter_2.solverstate.caffecli"]
    for name in kept + ["mean.binaryproto", "db/data.mdb"]:
        assert stat.S_IMODE((tmp_path / name).stat().st_mode) == 0o640, name


@pytest.mark.parametrize("kind", [str, os.fsencode, pathlib.Path])
def test_python_api_takes_str_bytes_and_pathlike(tmp_path, kind):
    (tmp_path / "net.prototxt").write_text(DEPLOY)
    (tmp_path / "solver.prototxt").write_text('net: "%s"\nbase_lr: 0.1\nlr_policy: "fixed"\n'
                                              'solver_mode: CPU\n' % (tmp_path / "net.prototxt"))
    net = caffecli.Net(kind(str(tmp_path / "net.prototxt")), caffecli.TEST)
    net.save(kind(str(tmp_path / "w.caffemodel")))
    again = caffecli.Net(kind(str(tmp_path / "net.prototxt")),
                         kind(str(tmp_path / "w.caffemodel")), caffecli.TEST)
    again.copy_from(kind(str(tmp_path / "w.caffemodel")))
    assert (again.params["ip"][0].data == net.params["ip"][0].data).all()
    solver = caffecli.get_solver(kind(str(tmp_path / "solver.prototxt")))
    assert solver.net.params["ip"][0].data.shape == (3, 16)


def test_python_api_names_a_wrong_path_type(tmp_path):
    (tmp_path / "net.prototxt").write_text(DEPLOY)
    net = caffecli.Net(str(tmp_path / "net.prototxt"), caffecli.TEST)
    with pytest.raises(caffecli.errors.CaffeError, match="str, bytes or os.PathLike.*got int"):
        net.save(3)


def _last_line_of_python(code):
    """The last line a fresh interpreter running ``code`` prints (nothing imported before)."""
    import subprocess
    import sys
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    return out.strip().splitlines()[-1]


def test_usage_loads_neither_the_engine_nor_the_tools():
    """`caffecli --help` starts fast: numpy, the layers and the tools load only when used."""
    assert _last_line_of_python(
        "import sys; from caffecli.cli.main import run; run(['--help']); "
        "print(sorted(m for m in ('numpy', 'caffecli.net', 'caffecli.tools.classify', "
        "'caffecli.pycaffe') if m in sys.modules))") == "[]"


def test_pycaffe_names_load_on_first_use():
    assert _last_line_of_python(
        "import caffecli, sys; assert 'caffecli.pycaffe' not in sys.modules; "
        "net_class = caffecli.Net; from caffecli import *; "
        "print(net_class is Net, TRAIN, 'Net' in dir(caffecli))") == "True 0 True"
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        caffecli.no_such_name
