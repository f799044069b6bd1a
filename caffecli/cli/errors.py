"""Turning failures into one line and exit status 1, as a command-line tool should.

CaffeError and file errors are the user's to fix: their message is printed as is. Anything else
is a bug in caffecli: a one-line summary, with ``--debug`` for the traceback. The error is the
last line printed: background data threads are stopped and the log closed before it.
"""
import sys

from .. import glog
from ..data import prefetch
from ..errors import CaffeError

PROG = "caffecli"


class Interrupted(KeyboardInterrupt):
    """Ctrl-C that ends the command at once; its message says what was lost."""


def one_line(exc):
    """The message to print for ``exc``: one line (a newline in a path shows as \\n)."""
    if isinstance(exc, CaffeError):
        text = str(exc)
    elif isinstance(exc, OSError) and exc.filename is not None:
        text = "%s: %s" % (exc.filename, exc.strerror or exc)
    elif isinstance(exc, MemoryError):
        text = "out of memory"
    elif isinstance(exc, (OSError, ValueError, KeyError)):
        text = "%s: %s" % (type(exc).__name__, exc)
    else:
        text = "internal error: %s: %s (rerun with --debug for the traceback)" % (
            type(exc).__name__, exc)
    text = text.strip() or type(exc).__name__
    return text.replace("\r", "\\r").replace("\n", "\\n")


def _last_words(text):
    """Stop whatever could still log, then print ``text`` on stderr."""
    prefetch.stop_all()
    glog.silence()
    sys.stderr.write("%s: %s\n" % (PROG, text))
    sys.stderr.flush()


def report(exc):
    """Print ``exc`` as ``caffecli: error: <message>`` on stderr; return the exit status."""
    _last_words("error: " + one_line(exc))
    return 1


def run_guarded(func, debug):
    """Call ``func()``; unless ``debug``, failures become one line and exit status 1."""
    try:
        return func()
    except SystemExit:
        raise
    except KeyboardInterrupt as exc:
        if debug:
            raise
        _last_words("interrupted" + (": %s" % exc if str(exc) else ""))
        return 130
    except Exception as exc:  # noqa: BLE001 - the whole point is to catch everything
        if debug:
            raise
        return report(exc)
