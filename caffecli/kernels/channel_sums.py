"""Per-channel sums into a vector on the device: the bias gradients (Caffe's gemv with a vector
of ones) and Scale's gradient, one deterministic kernel where the array code took a sum, an
add and a copy."""
from . import device


def channel_sums(xp, x, out, times=None, accumulate=True):
    """out (+)= (x [* times]).sum(axis=(0, 2)) for x (outer, channels, inner) by one device
    kernel; False where it cannot run (host arrays, kernels off): the caller's array code."""
    arrays = (x, out) if times is None else (x, out, times)
    if not (device.usable(xp, *arrays) and out.flags.c_contiguous
            and all(a.dtype == x.dtype for a in arrays)):
        return False
    outer, channels, inner = x.shape
    x = xp.ascontiguousarray(x)
    device.launch_blocks(xp, "reduce", "channel_sums", channels, x.dtype, x,
                         x if times is None else xp.ascontiguousarray(times),
                         *device.ints(times is not None, outer, inner, accumulate), out)
    return True
