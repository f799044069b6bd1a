"""glog's log files: ``<dir>/<program>.<host>.<user>.log.<SEVERITY>.<yyyymmdd-hhmmss>.<pid>``
with glog's three header lines, and the ``<program>.<SEVERITY>`` link to the newest one.

A line of severity s goes to the files of s and of every lower severity (the INFO file holds
everything logged). A file is created when its first line comes; the folder is GLOG_log_dir,
else $TEST_TMPDIR, $TMPDIR, $TMP or /tmp, as glog chooses. When no file can be created glog
says so on stderr once and goes on logging to stderr only.
"""
import datetime
import getpass
import os
import socket

NAMES = ("INFO", "WARNING", "ERROR", "FATAL")
HEADER = ("Log file created at: %Y/%m/%d %H:%M:%S\nRunning on machine: {host}\n"
          "Log line format: [IWEF]mmdd hh:mm:ss.uuuuuu threadid file:line] msg\n")
_files = {}        # severity level -> open file
_failed = set()    # GLOG_log_dir values no file could be created under (said once)


def log_dirs(log_dir):
    """The folders glog tries, in order: GLOG_log_dir alone when it is set."""
    if log_dir:
        return [log_dir]
    env = [os.environ.get(v) for v in ("TEST_TMPDIR", "TMPDIR", "TMP")]
    return [d for d in env if d and os.path.isdir(d)] + ["/tmp"]


def _user():
    try:
        return os.environ.get("USER") or getpass.getuser()
    except (KeyError, OSError):
        return "invalid-user"


def file_name(program, level, now=None, pid=None):
    """glog's base name of the ``level`` file created at ``now`` by process ``pid``."""
    now = now or datetime.datetime.now()
    return "%s.%s.%s.log.%s.%s.%d" % (program, socket.gethostname() or "(unknown)", _user(),
                                      NAMES[level], now.strftime("%Y%m%d-%H%M%S"),
                                      os.getpid() if pid is None else pid)


def _open(level, program, log_dir):
    """Create the file of ``level`` (and repoint its link); None when no folder takes it."""
    now = datetime.datetime.now()
    name = file_name(program, level, now)
    for folder in log_dirs(log_dir):
        path = os.path.join(folder, name)
        try:
            f = open(path, "a", encoding="utf-8", errors="replace")
        except OSError:
            continue
        f.write(now.strftime(HEADER).format(host=socket.gethostname()))
        link = os.path.join(folder, "%s.%s" % (program, NAMES[level]))
        try:
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink(name, link)
        except OSError:
            pass   # glog ignores a link it cannot make, too
        return f
    return None


def write(level, text, program, log_dir):
    """Append ``text`` to the files of ``level`` and below; a one-line complaint (to print on
    stderr) the first time no file can be created, else None."""
    for lv in range(level, -1, -1):
        if log_dir in _failed:
            return None
        f = _files.get(lv)
        if f is None:
            f = _files[lv] = _open(lv, program, log_dir)
            if f is None:
                del _files[lv]
                _failed.add(log_dir)
                return ("Could not create log file in %s: logging to stderr only"
                        % " or ".join(log_dirs(log_dir)))
        f.write(text + "\n")
        f.flush()
    return None


def close_all():
    """Close every open log file (a later line creates new ones)."""
    for f in _files.values():
        f.close()
    _files.clear()
    _failed.clear()
