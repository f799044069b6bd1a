"""The one exception type users see: a single actionable line, turned into exit 1 by the CLI."""


class CaffeError(RuntimeError):
    """A user-facing error. Its message is one line naming the file, layer or blob at fault."""

