"""glog's behaviour as Caffe's binary and pycaffe show it: the GLOG_* variables, glog's log files
(names, header, links, severity files), pycaffe's init_log/log, and logs parse_log.py reads."""
import io
import os
import re
import subprocess
import sys

import pytest

from caffecli import glog, logfiles

from test_cli import GLOG_LINE, ROOT, SIGNAL_SOLVER, TINY_NET, _log_time, parse_log

FILE_NAME = re.compile(r"^caffecli\.[^.]+.*\.[^.]+\.log\.(INFO|WARNING|ERROR)\.\d{8}-\d{6}\.\d+$")
HEADER = [re.compile(r"^Log file created at: \d{4}/\d\d/\d\d \d\d:\d\d:\d\d$"),
          re.compile(r"^Running on machine: \S+$"),
          re.compile(r"^Log line format: \[IWEF\]mmdd hh:mm:ss\.uuuuuu threadid file:line\] msg$")]


def run(args, cwd, **env):
    full = dict(os.environ, PYTHONPATH=ROOT, **env)
    for name in [k for k, v in env.items() if v is None]:
        del full[name]
    return subprocess.run([sys.executable] + args, cwd=cwd, env=full, capture_output=True,
                          text=True, timeout=300)


def train_files(tmp_path, **env):
    """Train the tiny net for 10 iterations with glog's files in tmp_path/logs."""
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    (tmp_path / "solver.prototxt").write_text(SIGNAL_SOLVER.replace("100000000", "10")
                                              .replace("display: 1", "display: 5"))
    (tmp_path / "logs").mkdir()
    env.setdefault("GLOG_log_dir", str(tmp_path / "logs"))
    proc = run(["-m", "caffecli", "train", "-solver", "solver.prototxt", "-model", "x"],
               tmp_path, **env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc, tmp_path / "logs"


def body(path):
    lines = path.read_text().splitlines()
    for regex, line in zip(HEADER, lines):
        assert regex.match(line), line
    return lines[len(HEADER):]


def test_command_writes_glogs_files_links_and_stderr(tmp_path):
    proc, logs = train_files(tmp_path)
    names = sorted(p.name for p in logs.iterdir())
    assert names[:2] == ["caffecli.INFO", "caffecli.WARNING"] and len(names) == 4
    for severity in ("INFO", "WARNING"):
        link = logs / ("caffecli." + severity)
        target = os.readlink(link)
        assert "/" not in target and FILE_NAME.match(target), target
        assert target.split(".log.")[1].startswith(severity)
    info, warning = body(logs / "caffecli.INFO"), body(logs / "caffecli.WARNING")
    # alsologtostderr, as caffe.cpp sets it: stderr holds the same lines as the INFO file
    assert proc.stderr.splitlines() == info
    # the unused -model flag's warning: in the WARNING file (and INFO), alone there
    assert len(warning) == 1 and warning[0].startswith("W") and "-model" in warning[0]
    assert warning[0] in info


def test_log_file_parses_as_parse_log_reads_it(tmp_path):
    _, logs = train_files(tmp_path)
    text = "\n".join(body(logs / "caffecli.INFO"))
    train_rows, _ = parse_log(text)
    assert [r["NumIters"] for r in train_rows] == [0, 5]   # 10: the final line has no outputs
    assert all("loss" in r and r["LearningRate"] == 0.001 for r in train_rows)
    # from the first Iteration line on, parse_log.py reads a date from every line
    lines = text.splitlines()
    first = next(i for i, line in enumerate(lines) if "Iteration" in line)
    assert all(GLOG_LINE.match(line) and _log_time(line) for line in lines[first:])


def test_minloglevel_filters_files_and_stderr(tmp_path):
    proc, logs = train_files(tmp_path, GLOG_minloglevel="1")
    errors = proc.stderr.splitlines()
    assert errors and all(line.startswith("W") for line in errors)
    info = body(logs / "caffecli.INFO")
    assert info and not any(line.startswith("I") for line in info)


def test_logtostderr_writes_no_file(tmp_path):
    proc, logs = train_files(tmp_path, GLOG_logtostderr="1")
    assert list(logs.iterdir()) == []
    assert "Optimization Done." in proc.stderr


def test_log_dir_flag_and_default_folder(tmp_path):
    (tmp_path / "tmp").mkdir()
    proc = run(["-m", "caffecli", "layers", "-log_dir", str(tmp_path / "flag")], tmp_path,
               GLOG_log_dir=None, TMPDIR=str(tmp_path / "tmp"))
    assert proc.returncode == 0
    assert not (tmp_path / "flag").exists()   # layers logs nothing: no file is created
    proc = run(["-m", "caffecli", "time", "-model", "net.prototxt", "-iterations", "1"],
               tmp_path, GLOG_log_dir=None, TMPDIR=str(tmp_path / "tmp"))
    assert proc.returncode == 1 and "net.prototxt" in proc.stderr
    assert "caffecli.INFO" in [p.name for p in (tmp_path / "tmp").iterdir()]   # $TMPDIR
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    (tmp_path / "flag").mkdir()   # glog creates no folder
    proc = run(["-m", "caffecli", "time", "-model", "net.prototxt", "-iterations", "1",
                "-log_dir", "flag"], tmp_path, GLOG_log_dir=None)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Average Forward pass" in (tmp_path / "flag" / "caffecli.INFO").read_text()


def test_unwritable_log_dir_says_so_once_and_logs_on(tmp_path):
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    proc = run(["-m", "caffecli", "time", "-model", "net.prototxt", "-iterations", "1"],
               tmp_path, GLOG_log_dir=str(tmp_path / "missing"))
    assert proc.returncode == 0
    assert proc.stderr.count("Could not create log file in") == 1
    assert "Average Forward pass" in proc.stderr


def test_python_api_quiet_under_minloglevel_2(tmp_path):
    (tmp_path / "net.prototxt").write_text(TINY_NET)
    code = ("import caffecli; n = caffecli.Net('net.prototxt', caffecli.TEST); "
            "print(n.forward()['loss'] is not None)")
    loud = run(["-c", code], tmp_path)
    quiet = run(["-c", code], tmp_path, GLOG_minloglevel="2")
    assert loud.returncode == quiet.returncode == 0
    assert "Initializing net from parameters" in loud.stderr
    assert quiet.stderr == "" and quiet.stdout.strip() == "True"
    assert list((tmp_path).glob("caffecli.*")) == []   # no glog init in a library: no files


@pytest.fixture
def fresh_glog(monkeypatch, tmp_path):
    """glog as a new process would set it up from the environment; restored afterwards."""
    saved = glog.snapshot_config()
    monkeypatch.setenv("GLOG_log_dir", str(tmp_path))
    for name in ("GLOG_minloglevel", "GLOG_logtostderr", "GLOG_alsologtostderr", "GLOG_v",
                 "GLOG_log_year_in_prefix"):
        monkeypatch.delenv(name, raising=False)
    glog.configure()
    stream = io.StringIO()
    glog.set_stream(stream)
    yield stream
    glog.restore_config(saved)


def test_pycaffe_init_log_sends_info_to_files(fresh_glog, tmp_path):
    import caffecli
    caffecli.log("before init")
    assert "_caffe.cpp:68] before init" in fresh_glog.getvalue()
    assert not list(tmp_path.iterdir())
    caffecli.init_log()
    caffecli.log("to the file")
    glog.error("io.cannot_open_image", "an error")
    assert "to the file" not in fresh_glog.getvalue()     # INFO: files only
    assert "an error" in fresh_glog.getvalue()            # ERROR: stderrthreshold 2
    info = body(tmp_path / "caffecli.INFO")
    assert info[0].endswith("_caffe.cpp:68] to the file") and info[1].endswith("] an error")
    assert body(tmp_path / "caffecli.ERROR")[0].endswith("] an error")
    assert body(tmp_path / "caffecli.WARNING") == body(tmp_path / "caffecli.ERROR")


def test_pycaffe_init_log_level_and_stderr(fresh_glog, tmp_path):
    import caffecli
    caffecli.init_log(1, True)
    caffecli.log("hidden")
    glog.warning("convert_imageset.unknown_encoding", "shown")
    assert "hidden" not in fresh_glog.getvalue() and "shown" in fresh_glog.getvalue()
    assert not list(tmp_path.iterdir())                   # logtostderr: no files


def test_verbose_lines_follow_glog_v(fresh_glog, monkeypatch):
    glog.vlog(1, "snapshot.sidecar_saved", "quiet")
    monkeypatch.setenv("GLOG_v", "1")
    glog.configure()
    glog.vlog(1, "snapshot.sidecar_saved", "verbose one")
    glog.vlog(2, "snapshot.sidecar_saved", "verbose two")
    out = fresh_glog.getvalue()
    assert "quiet" not in out and "verbose one" in out and "verbose two" not in out


@pytest.mark.parametrize("value, expected", [("1", True), ("true", True), ("", True),
                                             ("0", False), ("false", False), ("no", False)])
def test_environment_booleans_read_as_glog_does(monkeypatch, value, expected, fresh_glog):
    monkeypatch.setenv("GLOG_logtostderr", value)
    glog.configure()
    assert glog.snapshot_config()["logtostderr"] is expected


def test_the_year_in_the_prefix_as_glog_0_6_prints_it_on_request(fresh_glog, monkeypatch):
    """The classic prefix by default (BVLC's parse_log.py reads its month from characters
    1-2); GLOG_log_year_in_prefix=1 prints the year first, as Caffe on glog 0.6+ does."""
    import datetime
    when = datetime.datetime(2026, 3, 4, 5, 6, 7, 89)
    assert re.match(r"I0304 05:06:07\.000089 +\d+ net\.cpp:53\] x$",
                    glog.format_line("I", "net.cpp:53", "x", when))
    monkeypatch.setenv("GLOG_log_year_in_prefix", "1")
    glog.configure()
    assert re.match(r"I20260304 05:06:07\.000089 +\d+ net\.cpp:53\] x$",
                    glog.format_line("I", "net.cpp:53", "x", when))
    glog.info("_caffe.log", "dated")
    assert re.match(r"I\d{8} ", fresh_glog.getvalue())


def test_file_name_has_glogs_fields():
    import datetime
    name = logfiles.file_name("caffecli", 1, datetime.datetime(2026, 1, 2, 3, 4, 5), pid=42)
    assert FILE_NAME.match(name) and name.endswith(".log.WARNING.20260102-030405.42")


def test_every_line_caffecli_logs_names_a_source_in_the_table():
    """Log calls name their line; each name must be in glog_sources (glog prints its tag)."""
    import os
    import re
    from caffecli.glog_sources import SOURCES
    root = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "caffecli")
    call = re.compile(r'(?:glog\.(?:info|warning|error)\(|glog\.vlog\(\d+, |_info\(|say\(|'
                      r'log_where = |_log_outputs\([\w.]+, )"([^"]+)"')
    names = set()
    for folder, _, files in os.walk(root):
        for f in files:
            if f.endswith(".py"):
                with open(os.path.join(folder, f)) as src:
                    names.update(call.findall(src.read()))
    assert len(names) > 150
    assert sorted(n for n in names if n not in SOURCES and "%" not in n) == []
    for command in ("test", "time"):                      # names formatted at the call
        assert "caffe.%s_use_cpu" % command in SOURCES and "caffe.%s_use_gpu" % command in SOURCES
    assert "db_lmdb.opened" in SOURCES and "db_leveldb.opened" in SOURCES
    from caffecli.cli.device_query import _FIELDS
    assert all(line in SOURCES for _, _, line in _FIELDS)
    from caffecli.proto.upgrade_v0 import V0_FIELDS
    assert all("upgrade_proto.v0_unknown_%s" % field in SOURCES
               for field, routes in V0_FIELDS if routes is not None)
    assert all(re.fullmatch(r"[\w./]+\.(cpp|hpp|py)(:\d+)?", tag) for tag in SOURCES.values())


def test_numbers_print_as_iostream_does_nan_sign_included():
    import numpy
    with numpy.errstate(invalid="ignore"):
        x86_nan = numpy.float32(numpy.inf) - numpy.float32(numpy.inf)   # sign bit set
    assert [glog.fmt(v) for v in (0.1, 1e-05, 123456789.0, float("inf"))] == \
        ["0.1", "1e-05", "1.23457e+08", "inf"]
    assert glog.fmt(x86_nan) == "-nan" and glog.fmt(float("nan")) == "nan"


def test_hdf5_datatype_class_lines_once_per_class(tmp_path, capsys):
    """hdf5.cpp's LOG_FIRST_N: one "Datatype class" line per class in a process."""
    import h5py
    import numpy
    from caffecli.layers._hdf5 import load_hdf5_file
    from caffecli.util import hdf5_class
    with h5py.File(tmp_path / "d.h5", "w") as f:
        f["data"], f["label"] = numpy.zeros((2, 3), numpy.float32), numpy.arange(2)
    hdf5_class.forget()
    glog.set_stream(None)
    for _ in range(2):
        load_hdf5_file(str(tmp_path / "d.h5"), ["data", "label"], numpy.float32)
    err = capsys.readouterr().err
    assert [line.split("] ")[1] for line in err.splitlines() if "hdf5.cpp" in line] == \
        ["Datatype class: H5T_FLOAT", "Datatype class: H5T_INTEGER"]
    assert "hdf5.cpp:33]" in err and "hdf5.cpp:36]" in err


def _messages(err, source=None):
    return [line.split("] ", 1)[1] for line in err.splitlines()
            if "] " in line and (source is None or " %s:" % source in line)]


def test_layer_set_up_lines_as_caffe_prints_them(capsys):
    """Layers made through Caffe's layer factory inside another (Scale's bias, InfogainLoss's
    softmax) log 'Creating layer' again; a layer whose blobs are given skips its fillers and
    says so (inner_product_layer.cpp:24 etc.)."""
    from caffecli import Net, TRAIN
    from caffecli.proto import caffe_pb2
    from caffecli.proto.io import parse_text
    text = '''
layer { name: "in" type: "Input" top: "x" top: "label" top: "H"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 }
                      shape { dim: 1 dim: 1 dim: 3 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 3 }
        blobs { shape { dim: 3 dim: 3 } data: [1, 0, 0, 0, 1, 0, 0, 0, 1] }
        blobs { shape { dim: 3 } data: [0, 0, 0] } }
layer { name: "sc" type: "Scale" bottom: "y" top: "y" scale_param { bias_term: true } }
layer { name: "ig" type: "InfogainLoss" bottom: "y" bottom: "label" bottom: "H" top: "loss" }
'''
    glog.set_stream(None)
    Net(parse_text(text, caffe_pb2.NetParameter()), TRAIN)
    msgs = _messages(capsys.readouterr().err)
    for name in ("sc", "ig"):
        first = msgs.index("Creating Layer " + name)
        setting = msgs.index("Setting up " + name)
        assert "Creating layer " + name in msgs[first:setting]
    ip = msgs.index("Creating Layer ip")
    assert msgs[ip:msgs.index("Setting up ip")].count("Skipping parameter initialization") == 1
    assert msgs.count("Skipping parameter initialization") == 1


def test_data_layer_opens_its_database_when_made(tmp_path, capsys):
    """Caffe's DataLayer opens the database in its constructor: 'Opened lmdb' comes before
    the net names the layer's tops; a raw record under force_color says, per record, that
    it applies to encoded ones only (data_transformer.cpp:152)."""
    import numpy
    from caffecli import Net, TEST
    from caffecli.proto import caffe_pb2
    from caffecli.proto.io import parse_text
    from data_helpers import close_net, write_datum_db
    path = write_datum_db(str(tmp_path / "db"), [numpy.zeros((1, 2, 2))] * 2)
    glog.set_stream(None)
    capsys.readouterr()
    net = Net(parse_text('layer { name: "d" type: "Data" top: "data" top: "label" '
                         'transform_param { force_color: true } data_param { source: "%s" '
                         'backend: LMDB batch_size: 2 } }' % path, caffe_pb2.NetParameter()),
              TEST)
    net.forward_pass()
    close_net(net)
    msgs = _messages(capsys.readouterr().err)
    opened = msgs.index("Opened lmdb " + path)
    assert msgs[opened - 1] == "Creating layer d" and msgs[opened + 1] == "Creating Layer d"
    assert msgs.count("force_color and force_gray only for encoded datum") >= 2


def test_a_quiet_net_says_nothing_for_inner_layers(capsys):
    """Net(log=False) is quiet through and through: no 'Creating layer' for Scale's inner Bias,
    the loss layers' softmax, or a recurrent layer's unrolled net."""
    from caffecli import Net, TRAIN
    from caffecli.proto import caffe_pb2
    from caffecli.proto.io import parse_text
    text = '''
layer { name: "in" type: "Input" top: "x" top: "label" top: "H" top: "c"
        input_param { shape { dim: 2 dim: 3 } shape { dim: 2 }
                      shape { dim: 1 dim: 1 dim: 3 dim: 3 } shape { dim: 2 dim: 3 } } }
layer { name: "sc" type: "Scale" bottom: "x" top: "y" scale_param { bias_term: true } }
layer { name: "ig" type: "InfogainLoss" bottom: "y" bottom: "label" bottom: "H" top: "l1" }
layer { name: "sm" type: "SoftmaxWithLoss" bottom: "y" bottom: "label" top: "l2" }
layer { name: "r" type: "RNN" bottom: "x" bottom: "c" top: "o" recurrent_param { num_output: 2 } }
'''
    glog.set_stream(None)
    capsys.readouterr()
    Net(parse_text(text, caffe_pb2.NetParameter()), TRAIN, log=False)
    assert "Creating" not in capsys.readouterr().err


def test_a_record_longer_than_glogs_buffer_is_cut_as_glog_cuts_it():
    """glog keeps 29998 bytes of a record (prefix included), then the newline: a big net's
    'Initializing net from parameters' dump ends mid-word in Caffe's log."""
    buf = io.StringIO()
    glog.set_stream(buf)
    try:
        glog.info("net.init", "x" * 40000)
        glog.info("net.init", "short")
        long_line, short_line = buf.getvalue().split("\n")[:2]
    finally:
        glog.set_stream(None)
    assert len(long_line) == glog.MAX_RECORD and long_line.endswith("x" * 100)
    assert short_line.endswith("net.cpp:53] short")
    # a cut right after a newline ends the record there: no empty line follows
    prefix = len(glog.format_line("I", "net.cpp:53", ""))
    text = glog._clip(glog.format_line("I", "net.cpp:53",
                                       "a" * (glog.MAX_RECORD - prefix - 1) + "\nbbbb"))
    assert text.endswith("a") and len(text) == glog.MAX_RECORD - 1
