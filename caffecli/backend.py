"""The device seam: host arrays are numpy, device arrays come from cupy, or from the stand-in
device module (caffecli.standin) when ``CAFFECLI_STANDIN_GPU`` is set.

Nothing here knows the run's mode; the array module of any computation follows from its data
(``array_module``), and SyncedMemory asks ``device_module()`` where device copies live.
"""
import os

import numpy

_loaded = {}


def _standin_wanted():
    return os.environ.get("CAFFECLI_STANDIN_GPU", "") not in ("", "0")


def device_module():
    """cupy, the stand-in module, or None when neither can be used."""
    key = "standin" if _standin_wanted() else "cupy"
    if key not in _loaded:
        if key == "standin":
            from . import standin
            _loaded[key] = standin
        else:
            try:
                import cupy
                _loaded[key] = cupy
            except Exception:  # ImportError, or a broken CUDA install
                _loaded[key] = None
    return _loaded[key]


def is_standin():
    """Whether the device is the stand-in (numpy behind cupy's interface)."""
    return _standin_wanted()


def unavailable_reason(device=0):
    """None when device ``device`` can be used, else one line saying why not."""
    xp = device_module()
    if xp is None:
        return "GPU mode needs cupy, which is not installed (pip install 'caffecli[gpu]')"
    try:
        n = xp.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDARuntimeError without a driver
        return "no usable CUDA GPU: %s" % str(exc).splitlines()[0]
    if n == 0:
        return "no CUDA GPU found"
    if not 0 <= device < n:
        return "GPU %d does not exist (this machine has %d)" % (device, n)
    return None


def device_count():
    xp = device_module()
    return xp.cuda.runtime.getDeviceCount() if xp is not None else 0


def device_properties(device):
    """cudaGetDeviceProperties as a dict (names as bytes or str)."""
    return device_module().cuda.runtime.getDeviceProperties(device)


def use_device(device):
    """Make ``device`` current for the calling thread (cupy's current device is per thread)."""
    device_module().cuda.Device(int(device)).use()


def synchronize():
    """Wait for the current device's queued work (timings must not stop before kernels do)."""
    xp = _loaded.get("standin" if _standin_wanted() else "cupy")
    if xp is not None:
        xp.cuda.Device().synchronize()


def is_device_array(array):
    return not isinstance(array, numpy.ndarray) and hasattr(array, "__cuda_array_interface__") \
        or type(array).__module__.startswith(("cupy", "caffecli.standin"))


def array_module(*arrays):
    """The module that computes on ``arrays``: numpy for host arrays, else the device module."""
    for a in arrays:
        if is_device_array(a):
            return device_module()
    return numpy


def to_host(array):
    """``array`` as a numpy array (a copy when it lives on the device)."""
    if isinstance(array, numpy.ndarray):
        return array
    if is_device_array(array):
        return device_module().asnumpy(array)
    return numpy.asarray(array)
