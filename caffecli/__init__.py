"""caffecli: BVLC Caffe's command-line tool and pycaffe API in Python (numpy / cupy).

``import caffecli as caffe`` gives pycaffe's surface (caffecli.pycaffe): Net, TRAIN/TEST,
get_solver, set_mode_*, ..., loaded when first used.
"""
import importlib
import importlib.util
import os as _os
import sys as _sys

__version__ = "0.1.0"

from . import launcher as _launcher

# before numpy loads its BLAS: ranks on one machine share the cores (the count set, or None)
SHARED_THREADS = _launcher.share_cpus()
# BLAS threads spin ~0.1 s after each product before they sleep, taking the cores from the
# threads of the non-GEMM work that follows (kernels/threads.py); 2^16 cycles instead. numpy's
# BLAS reads both only if it loads after these lines, else kernels/gemm.py has it read them.
NUMPY_BLAS_QUIET = "numpy" not in _sys.modules or "OPENBLAS_THREAD_TIMEOUT" in _os.environ
_os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "16")


def __getattr__(name):
    """pycaffe's names (and ``from caffecli import *``), imported on first use so that the
    command line starts without loading the engine (PEP 562)."""
    if (name.startswith("__") and name != "__all__") or \
            importlib.util.find_spec(__name__ + "." + name) is not None:
        raise AttributeError(name)      # a submodule: ``from caffecli import glog`` imports it
    pycaffe = importlib.import_module(".pycaffe", __name__)
    if name == "__all__":
        return pycaffe.__all__
    try:
        value = getattr(pycaffe, name)
    except AttributeError:
        raise AttributeError("module 'caffecli' has no attribute %r" % name) from None
    globals()[name] = value             # found once: later reads skip this function
    return value


def __dir__():
    return sorted(set(globals()) | set(__getattr__("__all__")))
