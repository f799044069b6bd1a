"""The numpy/cupy seam: which array module layers compute with, and host/device copies.

Layers call ``xp()`` (or ``get_array_module(arr)``) and never import numpy or cupy for math
directly, so every layer is written once and runs on either device.
"""
import numpy

from .errors import CaffeError

_state = {"mode": "CPU", "device": 0}
_cupy = None


def _import_cupy():
    """Import cupy once; return None when it is missing."""
    global _cupy
    if _cupy is None:
        try:
            import cupy  # noqa: F401
            _cupy = cupy
        except Exception:  # ImportError or a broken CUDA install
            _cupy = False
    return _cupy or None


def gpu_unavailable_reason(device=0):
    """Return None when GPU ``device`` can be used, else one line saying why not."""
    cupy = _import_cupy()
    if cupy is None:
        return "GPU mode needs cupy, which is not installed (pip install 'caffecli[gpu]')"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver
        return "no usable CUDA GPU: %s" % str(exc).splitlines()[0]
    if n == 0:
        return "no CUDA GPU found"
    if not 0 <= device < n:
        return "GPU %d does not exist (this machine has %d)" % (device, n)
    return None


def set_mode_cpu():
    _state["mode"] = "CPU"


def set_mode_gpu():
    reason = gpu_unavailable_reason(_state["device"])
    if reason:
        raise CaffeError(reason)
    _state["mode"] = "GPU"
    _cupy.cuda.Device(_state["device"]).use()


def set_device(device):
    _state["device"] = int(device)
    if _state["mode"] == "GPU":
        _cupy.cuda.Device(int(device)).use()


def use_device_here(device):
    """Make GPU ``device`` current for this thread only (a data-parallel rank's thread);
    nothing to do on the CPU."""
    if _state["mode"] == "GPU":
        _cupy.cuda.Device(int(device)).use()


def mode():
    return _state["mode"]


def device():
    return _state["device"]


def xp():
    """The array module of the active mode: numpy on the CPU, cupy on the GPU."""
    return _cupy if _state["mode"] == "GPU" else numpy


def get_array_module(*arrays):
    """The array module that owns ``arrays`` (cupy if any is a cupy array)."""
    if _cupy:
        return _cupy.get_array_module(*arrays)
    return numpy


def to_host(array):
    """A numpy view or copy of ``array``, wherever it lives."""
    if isinstance(array, numpy.ndarray):
        return array
    if _cupy and isinstance(array, _cupy.ndarray):
        return _cupy.asnumpy(array)
    return numpy.asarray(array)


def to_device(array, dtype=None):
    """``array`` as an array of the active mode (no copy when it already is one)."""
    return xp().asarray(array, dtype=dtype)


def is_gpu():
    return _state["mode"] == "GPU"
