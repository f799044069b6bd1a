"""File names as the Python API takes them: str, bytes (Python 2-era scripts) or os.PathLike."""
import os

from ..errors import CaffeError

PATH_TYPES = (str, bytes, os.PathLike)


def is_path(value):
    """True for anything ``as_path`` accepts."""
    return isinstance(value, PATH_TYPES)


def as_path(value):
    """``value`` as a str path (bytes decoded as the file system does, undecodable bytes kept
    by surrogateescape); anything else is a CaffeError naming its type."""
    if not is_path(value):
        raise CaffeError("expected a file path (str, bytes or os.PathLike), got %s"
                         % type(value).__name__)
    return os.fsdecode(os.fspath(value))
