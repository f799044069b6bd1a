"""``caffecli device_query``: print a CUDA device's properties (Caffe::DeviceQuery's lines),
after the versions of cupy, CUDA and cuDNN found and whether the cuDNN engines and CUDA
graphs are on (caffecli's own lines)."""
from .. import backend, engines, glog, replay
from .devices import parse_gpus

# (label, cudaDeviceProp field, its line in Caffe's common.cpp DeviceQuery)
_FIELDS = [
    ("Major revision number:         ", "major", "common.device_major"),
    ("Minor revision number:         ", "minor", "common.device_minor"),
    ("Name:                          ", "name", "common.device_name"),
    ("Total global memory:           ", "totalGlobalMem", "common.device_global_memory"),
    ("Total shared memory per block: ", "sharedMemPerBlock", "common.device_shared_memory"),
    ("Total registers per block:     ", "regsPerBlock", "common.device_registers"),
    ("Warp size:                     ", "warpSize", "common.device_warp_size"),
    ("Maximum memory pitch:          ", "memPitch", "common.device_memory_pitch"),
    ("Maximum threads per block:     ", "maxThreadsPerBlock", "common.device_threads_per_block"),
    ("Maximum dimension of block:    ", "maxThreadsDim", "common.device_block_dims"),
    ("Maximum dimension of grid:     ", "maxGridSize", "common.device_grid_dims"),
    ("Clock rate:                    ", "clockRate", "common.device_clock_rate"),
    ("Total constant memory:         ", "totalConstMem", "common.device_constant_memory"),
    ("Texture alignment:             ", "textureAlignment", "common.device_texture_alignment"),
    ("Concurrent copy and execution: ", "deviceOverlap", "common.device_copy_and_execution"),
    ("Number of multiprocessors:     ", "multiProcessorCount", "common.device_multiprocessors"),
    ("Kernel execution timeout:      ", "kernelExecTimeoutEnabled", "common.device_timeout"),
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
    glog.info("device_query.version", "%-31s%s" % ("CUDA graphs:", "on (CAFFECLI_CUDA_GRAPHS=0 "
                                                   "turns them off)" if replay.enabled() else
                                                   "off (CAFFECLI_CUDA_GRAPHS=0)"))
    for device in devices:
        props = backend.device_properties(device)
        glog.info("common.device_id", "Device id:                     %d" % device)
        for label, key, line in _FIELDS:
            glog.info(line, label + _show(props.get(key, "?"), key))
    return 0
