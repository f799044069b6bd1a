"""glog-style log lines, as Caffe prints them, so BVLC's tools/extra/parse_log.py reads our logs.

Format: ``I1122 09:00:00.123456  4242 solver.cpp:218] message`` on stderr. The source tag
(``solver.cpp:218``) names the Caffe source line that prints the same message, so users can
grep logs with the same patterns they always used.
"""
import datetime
import os
import sys
import threading

_config = {"stream": None, "min_level": 0, "quiet": False}
_LEVELS = {"I": 0, "W": 1, "E": 2, "F": 3}


def set_stream(stream):
    """Send log lines to ``stream`` (default: sys.stderr at the time of each call)."""
    _config["stream"] = stream


def set_min_level(level):
    """Drop lines below ``level`` (0 INFO, 1 WARNING, 2 ERROR), like GLOG_minloglevel."""
    _config["min_level"] = int(level)


def min_level():
    return _config["min_level"]


def _thread_id():
    return threading.get_native_id() if hasattr(threading, "get_native_id") else os.getpid()


def format_line(severity, where, message, now=None):
    now = now or datetime.datetime.now()
    return "%s%02d%02d %02d:%02d:%02d.%06d %5d %s] %s" % (
        severity, now.month, now.day, now.hour, now.minute, now.second,
        now.microsecond, _thread_id(), where, message)


def log(severity, where, message):
    if _LEVELS[severity] < _config["min_level"]:
        return
    stream = _config["stream"] or sys.stderr
    text = format_line(severity, where, message)
    try:
        from tqdm import tqdm
        tqdm.write(text, file=stream)
    except ImportError:
        stream.write(text + "\n")


def info(where, message):
    log("I", where, message)


def warning(where, message):
    log("W", where, message)


def error(where, message):
    log("E", where, message)


def fmt(value):
    """A number as C++'s default ostream prints a float (6 significant digits, %g-like)."""
    value = float(value)
    if value != value:
        return "nan" if str(value)[0] != "-" else "-nan"
    if value in (float("inf"), float("-inf")):
        return "inf" if value > 0 else "-inf"
    return "%g" % value
