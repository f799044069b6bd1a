"""The one exception type users see: a single actionable line, turned into exit 1 by the CLI."""


class CaffeError(RuntimeError):
    """A user-facing error. Its message is one line naming the file, layer or blob at fault."""


_AS_RAISED = {}


def as_raised(cause, message):
    """A CaffeError with ``message`` that is also of ``cause``'s type where Python allows the
    mix (a Python layer's ValueError stays catchable as ValueError, as pycaffe re-raises
    the user's exception), else a plain CaffeError."""
    kind = type(cause)
    mixed = _AS_RAISED.get(kind)
    if mixed is None:
        try:
            mixed = type("CaffeError_" + kind.__name__, (CaffeError, kind),
                         {"__str__": BaseException.__str__})   # KeyError's would quote it
        except TypeError:           # incompatible layouts (OSError and kin): a plain one
            mixed = CaffeError
        _AS_RAISED[kind] = mixed
    try:
        return mixed(message)
    except TypeError:               # a type whose constructor wants more than a message
        return CaffeError(message)



def first_line(exc):
    """The first line of ``exc``'s message, or its type's name when it has none (h5py's and
    lmdb's messages run over several lines)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
