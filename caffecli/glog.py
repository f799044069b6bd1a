"""glog-style log lines, as Caffe prints them, so BVLC's tools/extra/parse_log.py reads our logs.

Format: ``I1122 09:00:00.123456  4242 solver.cpp:218] message``, the classic glog prefix that
parse_log.py parses; ``GLOG_log_year_in_prefix=1`` prints the year too (``I20261122 ...``), as
Caffe linked against glog 0.6 or later does by default. The source tag
(``solver.cpp:218``) names the Caffe source line that prints the same message, so users can
grep logs with the same patterns they always used.

Where lines go follows glog as Caffe's binary and pycaffe use it: before ``start()`` or
``init_log()`` (a library that never initialised glog) every line goes to stderr; the
``caffecli`` command starts logging with alsologtostderr (stderr and glog's files), pycaffe's
``init_log()`` without it (files, and stderr from GLOG_stderrthreshold up). The GLOG_*
variables are read as glog reads them; see ``logfiles`` for the files.
"""
import datetime
import math
import os
import re
import sys
import threading

from . import logfiles
from .glog_sources import SOURCES

SEVERITIES = "IWEF"
_lock = threading.RLock()
_config = {}


def _env_int(name, default):
    """glog's EnvToInt: the value's leading integer (0 when it has none), the default when
    unset."""
    value = os.environ.get(name)
    if value is None:
        return default
    m = re.match(r"\s*[+-]?\d+", value)
    return int(m.group()) if m else 0


def _env_bool(name):
    """glog's EnvToBool: true when the value is empty or starts with t, T, y, Y or 1."""
    value = os.environ.get(name)
    return value is not None and value[:1] in ("", "t", "T", "y", "Y", "1")


def configure():
    """(Re)read GLOG_minloglevel, GLOG_v, GLOG_stderrthreshold, GLOG_logtostderr,
    GLOG_alsologtostderr, GLOG_log_dir and GLOG_log_year_in_prefix; logging is back to "not
    started" (stderr only)."""
    with _lock:
        logfiles.close_all()
        _config.update(stream=_config.get("stream"), started=False, silenced=False,
                       program=_config.get("program", "caffecli"),
                       min_level=_env_int("GLOG_minloglevel", 0), verbose=_env_int("GLOG_v", 0),
                       stderr_threshold=_env_int("GLOG_stderrthreshold", 2),
                       logtostderr=_env_bool("GLOG_logtostderr"),
                       alsologtostderr=_env_bool("GLOG_alsologtostderr"),
                       log_dir=os.environ.get("GLOG_log_dir", ""),
                       year_in_prefix=_env_bool("GLOG_log_year_in_prefix"))


def set_flags(**flags):
    """Set glog flags by name (min_level, verbose, stderr_threshold, logtostderr,
    alsologtostderr, log_dir), as the command line's -minloglevel, -v, ... do."""
    unknown = set(flags) - set(_config)
    if unknown:
        raise KeyError("unknown glog flag(s): %s" % ", ".join(sorted(unknown)))
    with _lock:
        _config.update(flags)


def start(program="caffecli", alsologtostderr=False):
    """InitGoogleLogging: from now on lines also go to glog's files (unless logtostderr)."""
    with _lock:
        _config["started"] = True
        _config["program"] = program
        if alsologtostderr:
            _config["alsologtostderr"] = True


def snapshot_config():
    """The whole logging configuration, for ``restore_config`` (in-process command runs)."""
    with _lock:
        return dict(_config)


def restore_config(saved):
    """Close the log files and go back to a configuration from ``snapshot_config``."""
    with _lock:
        logfiles.close_all()
        _config.clear()
        _config.update(saved)


def silence():
    """Drop every later line (after a fatal error, background threads must not log on)."""
    with _lock:
        _config["silenced"] = True


def set_stream(stream):
    """Send stderr's lines to ``stream`` (default: sys.stderr at the time of each call)."""
    _config["stream"] = stream


def set_min_level(level):
    """Drop lines below ``level`` (0 INFO, 1 WARNING, 2 ERROR), like GLOG_minloglevel."""
    _config["min_level"] = int(level)


def init_log(level=None, stderr=None):
    """pycaffe's caffe.init_log(): ``init_log()``, ``init_log(level)`` sets minloglevel,
    ``init_log(level, stderr)`` also logtostderr; then logging starts (glog's files)."""
    with _lock:
        if level is not None:
            _config["min_level"] = int(level)
        if stderr is not None:
            _config["logtostderr"] = bool(stderr)
        start(_config["program"])


def log(message):
    """pycaffe's caffe.log(): one INFO line, from _caffe.cpp's Log()."""
    info("_caffe.log", message)


def min_level():
    """The lowest severity index (0=INFO .. 3=FATAL) printed now."""
    return _config["min_level"]


def _thread_id():
    return threading.get_native_id() if hasattr(threading, "get_native_id") else os.getpid()


def format_line(severity, where, message, now=None):
    now = now or datetime.datetime.now()
    year = "%04d" % now.year if _config.get("year_in_prefix") else ""
    return "%s%s%02d%02d %02d:%02d:%02d.%06d %5d %s] %s" % (
        severity, year, now.month, now.day, now.hour, now.minute, now.second,
        now.microsecond, _thread_id(), where, message)


def _to_stderr(level):
    c = _config
    if not c["started"] or c["logtostderr"] or c["alsologtostderr"]:
        return True
    return level >= c["stderr_threshold"]


def _write_stderr(text):
    stream = _config["stream"] or sys.stderr
    tqdm = sys.modules.get("tqdm")      # a progress bar may be open: print above it
    if tqdm is not None:
        tqdm.tqdm.write(text, file=stream)
    else:
        stream.write(text + "\n")


# glog writes a record (prefix and message) into a 30000-byte buffer that keeps two bytes for
# the newline and terminator: a longer record (a big net's parameter dump) is cut there.
MAX_RECORD = 29998


def _clip(text):
    """The record as glog prints it: cut at MAX_RECORD bytes (a cut that ends a line ends the
    record: glog adds no newline after one)."""
    raw = text.encode("utf-8")
    if len(raw) <= MAX_RECORD:
        return text
    cut = raw[:MAX_RECORD].decode("utf-8", errors="ignore")
    return cut[:-1] if cut.endswith("\n") else cut


def emit(severity, line, message):
    """One line of ``severity`` (I, W, E, F) to stderr and/or files; ``line`` names it in
    glog_sources.SOURCES, which gives the ``file:line`` tag glog prints."""
    level = SEVERITIES.index(severity)
    c = _config
    if level < c["min_level"] or c["silenced"]:
        return
    text = _clip(format_line(severity, SOURCES[line], message))
    with _lock:
        if _to_stderr(level):
            _write_stderr(text)
        if c["started"] and not c["logtostderr"]:
            failure = logfiles.write(level, text, c["program"], c["log_dir"])
            if failure:
                _write_stderr(failure)


def info(line, message):
    emit("I", line, message)


def warning(line, message):
    emit("W", line, message)


def error(line, message):
    emit("E", line, message)


def vlog(verbosity, line, message):
    """glog's VLOG(n): an INFO line shown only when GLOG_v (or -v) is at least ``verbosity``."""
    if _config["verbose"] >= verbosity:
        emit("I", line, message)


def fmt(value):
    """A number as C++'s default ostream prints a float (6 significant digits, %g-like)."""
    value = float(value)
    if value != value:   # x86's invalid operations make a NaN with its sign set: "-nan"
        return "-nan" if math.copysign(1.0, value) < 0 else "nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return "%g" % value


configure()
