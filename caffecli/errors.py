"""The one exception type users see: a single actionable line, turned into exit 1 by the CLI."""


class CaffeError(RuntimeError):
    """A user-facing error. Its message is one line naming the file, layer or blob at fault."""



def first_line(exc):
    """The first line of ``exc``'s message, or its type's name when it has none (h5py's and
    lmdb's messages run over several lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
