"""Optional dependencies (setup.cfg extras): import one, or fail with one line naming the extra."""
import importlib

from ..errors import CaffeError


class MissingExtra(CaffeError, ImportError):
    """An optional dependency is not installed; the message says which extra brings it."""


def require(module, extra, what):
    """Import ``module`` for ``what`` (e.g. 'drawing nets'), or raise MissingExtra naming
    ``pip install 'caffecli[<extra>]'``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtra("%s needs the %s package: pip install 'caffecli[%s]'"
                           % (what, module.split(".")[0], extra)) from None
