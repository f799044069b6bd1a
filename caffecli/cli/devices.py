"""``-gpu`` parsing and CPU/GPU mode selection shared by the subcommands (caffe.cpp's get_gpus)."""
from .. import backend, context, glog
from ..errors import CaffeError


def device_name(device):
    """The CUDA device's name, or "" when it cannot be read."""
    try:
        name = backend.device_properties(device)["name"]
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:  # name is cosmetic; never fail on it
        return ""


def parse_gpus(flag):
    """``""`` -> [], ``"all"`` -> every device, ``"0,2"`` -> [0, 2]; unusable GPUs -> CaffeError."""
    flag = (flag or "").strip()
    if not flag:
        return []
    if flag == "all":
        reason = backend.unavailable_reason(0)
        if reason:
            raise CaffeError("-gpu all: " + reason)
        return list(range(backend.device_count()))
    try:
        gpus = [int(s) for s in flag.split(",")]
    except ValueError:
        raise CaffeError("-gpu takes device ids separated by ',' or 'all', got '%s'" % flag) \
            from None
    for g in gpus:
        reason = backend.unavailable_reason(g)
        if reason:
            raise CaffeError("-gpu %s: %s" % (flag, reason))
    return gpus


def use_single_device(gpus, command):
    """Set CPU or GPU mode for test/time, logging as caffe.cpp does at those lines."""
    if gpus:
        glog.info("caffe.%s_use_gpu" % command, "Use GPU with device ID %d" % gpus[0])
        context.set_device(gpus[0])
        context.set_mode_gpu()
    else:
        glog.info("caffe.%s_use_cpu" % command, "Use CPU.")
        context.set_mode_cpu()


def synchronize():
    """Wait for queued GPU work (timings must not stop before the kernels do)."""
    if context.is_gpu():
        backend.synchronize()
