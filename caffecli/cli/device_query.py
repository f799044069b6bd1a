"""``caffecli device_query``: print a CUDA device's properties (Caffe::DeviceQuery's lines),
after the versions of cupy, CUDA and cuDNN found and whether the cuDNN engines are on
(caffecli's own lines)."""
from .. import backend, engines, glog
from .devices import parse_gpus

_FIELDS = [
    ("Major revision number:         ", "major"),
    ("Minor revision number:         ", "minor"),
    ("Name:                          ", "name"),
    ("Total global memory:           ", "totalGlobalMem"),
    ("Total shared memory per block: ", "sharedMemPerBlock"),
    ("Total registers per block:     ", "regsPerBlock"),
    ("Warp size:                     ", "warpSize"),
    ("Maximum memory pitch:          ", "memPitch"),
    ("Maximum threads per block:     ", "maxThreadsPerBlock"),
    ("Maximum dimension of block:    ", "maxThreadsDim"),
    ("Maximum dimension of grid:     ", "maxGridSize"),
    ("Clock rate:                    ", "clockRate"),
    ("Total constant memory:         ", "totalConstMem"),
    ("Texture alignment:             ", "textureAlignment"),
    ("Concurrent copy and execution: ", "deviceOverlap"),
    ("Number of multiprocessors:     ", "multiProcessorCount"),
    ("Kernel execution timeout:      ", "kernelExecTimeoutEnabled"),
]
_YES_NO = {"deviceOverlap", "kernelExecTimeoutEnabled"}


def _show(value, key):
    if isinstance(value, bytes):
        value = value.decode(errors="replace")
    if isinstance(value, (tuple, list)):
        return ", ".join(str(v) for v in value)
    if key in _YES_NO:
        return "Yes" if value else "No"
    return str(value)


def run_device_query(gpu):
    """Log each requested device's properties; unusable GPUs raise CaffeError. With no -gpu,
    as Caffe: the "Querying GPUs" line and no device (here after the versions found)."""
    glog.info("caffe.querying_gpus", "Querying GPUs " + gpu)
    devices = parse_gpus(gpu) if gpu else []
    if not devices and backend.device_module() is None:
        return 0   # no device module: nothing more to say (Caffe's CPU build says no more)
    for name, version in backend.software_versions():
        glog.info("device_query.version", "%-31s%s" % (name + ":", version))
    glog.info("device_query.version", "%-31s%s" % ("cuDNN engines:", engines.cudnn_missing()
                                                   or "on (Convolution, Deconvolution)"))
    for device in devices:
        props = backend.device_properties(device)
        glog.info("common.device_id", "Device id:                     %d" % device)
        for label, key in _FIELDS:
            glog.info("common.device_property", label + _show(props.get(key, "?"), key))
    return 0
