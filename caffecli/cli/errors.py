"""Turning failures into one line and exit status 1, as a command-line tool should.

CaffeError and file errors are the user's to fix: their message is printed as is. Anything else
is a bug in caffecli: a one-line summary, with ``--debug`` for the traceback.
"""
import sys

import click

from ..errors import CaffeError

PROG = "caffecli"


def one_line(exc):
    """The message to print for ``exc`` (first line only; paths and reasons included)."""
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
    lines = [l for l in text.splitlines() if l.strip()] or [type(exc).__name__]
    return lines[0]


def report(exc):
    """Print ``exc`` as ``caffecli: error: <message>`` on stderr; return the exit status."""
    click.echo("%s: error: %s" % (PROG, one_line(exc)), err=True)
    return 1


def run_guarded(func, debug):
    """Call ``func()``; unless ``debug``, failures become one line and exit status 1."""
    try:
        return func()
    except (click.exceptions.Exit, click.ClickException, click.Abort, SystemExit):
        raise
    except KeyboardInterrupt:
        if debug:
            raise
        click.echo("%s: interrupted" % PROG, err=True)
        sys.exit(130)
    except Exception as exc:  # noqa: BLE001 - the whole point is to catch everything
        if debug:
            raise
        sys.exit(report(exc))
