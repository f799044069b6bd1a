"""The device seam: host arrays are numpy, device arrays come from cupy, or from the stand-in
device module (caffecli.standin) when ``CAFFECLI_STANDIN_GPU`` is set.

Nothing here knows the run's mode; the array module of any computation follows from its data
(``array_module``), and SyncedMemory asks ``device_module()`` where device copies live.
"""
import os
import threading

import numpy

_loaded = {}
_uploads = threading.local()   # .streams: this thread's upload stream per device


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


def _cuda_version(code):
    """cudaRuntimeGetVersion's 13000 -> "13.0" (0: unknown)."""
    return "%d.%d" % (code // 1000, code % 1000 // 10) if code else "unknown"


def cudnn_version():
    """The cuDNN library behind NVIDIA's Python frontend (the [gpu] extra's
    nvidia-cudnn-frontend), as "9.10.2 (frontend 1.12.0)", or a line saying why there is none."""
    if is_standin():
        return "none on the stand-in device"
    try:
        import cudnn                    # optional and heavy: loads the CUDA libraries
        code = int(cudnn.backend_version())
    except Exception as exc:            # ImportError, or a frontend without its library
        return "not found (%s; pip install nvidia-cudnn-frontend)" % (
            str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    base = 10000 if code >= 90000 else 1000        # cuDNN 9 numbers versions 9xxyy
    return "%d.%d.%d (frontend %s)" % (code // base, code % base // 100, code % 100,
                                       getattr(cudnn, "__version__", "?"))


def software_versions():
    """What the device runs on, for device_query: the device module, CUDA and cuDNN."""
    xp = device_module()
    runtime = xp.cuda.runtime
    return [("cupy", "%s" % xp.__version__),
            ("CUDA runtime", _cuda_version(runtime.runtimeGetVersion())),
            ("CUDA driver", _cuda_version(runtime.driverGetVersion())),
            ("cuDNN", cudnn_version())]


def use_device(device):
    """Make ``device`` current for the calling thread (cupy's current device is per thread)."""
    device_module().cuda.Device(int(device)).use()


def synchronize():
    """Wait for the current device's queued work (timings must not stop before kernels do)."""
    xp = _loaded.get("standin" if _standin_wanted() else "cupy")
    if xp is not None:
        xp.cuda.Device().synchronize()


def current_device():
    """The calling thread's current device id (cupy's current device is per thread)."""
    return device_module().cuda.Device().id


def upload(arrays, device):
    """Host ``arrays`` copied to ``device`` on the calling thread's own stream, from pinned
    memory, done when this returns: a prefetch thread's copy of the next batch, overlapping the
    net's compute (Caffe's prefetch thread pushes its batches to the GPU the same way)."""
    xp = device_module()
    xp.cuda.Device(device).use()
    mine = _uploads.__dict__
    stream = mine.setdefault("streams", {}).get(device)
    if stream is None:
        stream = mine["streams"][device] = xp.cuda.Stream(non_blocking=True)
    out = []
    with stream:
        for i, a in enumerate(arrays):
            staged = _pinned(xp, mine.setdefault("pinned", {}), (device, i), a)
            staged[...] = a
            moved = xp.empty(a.shape, a.dtype)
            moved.set(staged, stream=stream)
            out.append(moved)
    stream.synchronize()   # the pinned buffers are free again for the next batch
    return out


def _pinned(xp, buffers, key, like):
    """A page-locked host array shaped as ``like``, kept per thread and grown as needed."""
    mem = buffers.get(key)
    if mem is None or memoryview(mem).nbytes < like.nbytes:
        mem = buffers[key] = xp.cuda.alloc_pinned_memory(max(like.nbytes, 1))
    return numpy.frombuffer(mem, like.dtype, like.size).reshape(like.shape)


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
