"""The one exception type users see: a single actionable line, turned into exit 1 by the CLI."""


class CaffeError(Exception):
    """A user-facing error. Its message is one line naming the file, layer or blob at fault."""


def check(condition, message):
    """Raise CaffeError(message) unless condition holds (Caffe's CHECK, without the abort)."""
    if not condition:
        raise CaffeError(message() if callable(message) else message)
