"""The pycaffe facade: what ``import caffe`` (and ``import caffecli as caffe``) gives."""
from ..api import *  # noqa: F401,F403  (until the facade's own surface lands here)
from ..api import __all__  # noqa: F401
