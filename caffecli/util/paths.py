"""File names as users pass them: str, bytes (Python 2-era scripts) or os.PathLike."""
import os


def is_path(value):
    return isinstance(value, (str, bytes, os.PathLike))


def as_path(value):
    """``value`` as a str path (bytes decoded with the file system encoding)."""
    return os.fsdecode(os.fspath(value))
