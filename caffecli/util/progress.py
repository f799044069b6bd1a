"""Progress bars for long runs: a tqdm bar on stderr when it is a terminal, else a no-op, so
logs and pipes see only glog's lines."""
import sys

from .lazy import tqdm


def stderr_is_terminal():
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):        # replaced or closed stderr
        return False


def progress(total, desc=None, initial=0, unit="it"):
    """A bar with tqdm's update/close/n (and a context manager); a no-op one off a terminal."""
    if not stderr_is_terminal():
        return _NoBar()
    return tqdm.tqdm(total=total, initial=initial, desc=desc, unit=unit, dynamic_ncols=True,
                leave=False, file=sys.stderr)


class _NoBar:
    n = 0

    def update(self, n=1):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
