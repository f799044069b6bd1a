"""Per-channel sums into a vector: the bias gradients (Caffe's gemv with a vector of ones into
the diff) and Scale's gradient. On the device one deterministic kernel where the array code
took a sum, an add and a copy; on the host Caffe's own gemv calls, in OpenBLAS's order
(kernels/caffe_gemv.py), compiled where numba is (kernels/caffe_gemv_jit.py)."""
from . import caffe_gemv, caffe_gemv_jit, device, jit


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


def gemv_rows(xp, x, out, moved=None):
    """out (channels,) += the sum of x (outer, channels, inner) over its outer and inner axes,
    as Caffe's gemv(CblasNoTrans) of each outer item's (channels, inner) rows into the diff
    (beta 1), item after item: Convolution's, Deconvolution's and Bias's gradients. With
    ``moved`` (host; channels, outer, inner): x's rows copied there too, in the same pass."""
    if moved is None and channel_sums(xp, x, out):
        return
    if jit.usable(x, out, *(() if moved is None else (moved,))):
        caffe_gemv_jit.add_image_rows(x, out, moved)
        return
    if moved is not None:
        moved[...] = x.transpose(1, 0, 2)
    if xp is not caffe_gemv.numpy:
        out += x.sum(axis=(0, 2))
        return
    for o in range(x.shape[0]):
        out[...] = caffe_gemv.row_totals(x[o], 1, out)


def gemv_columns(xp, t, out):
    """out (channels,) += the sum of t (items, channels) over its items, as Caffe's
    gemv(CblasTrans) into the diff (beta 1): InnerProduct's and Embed's bias gradients."""
    if channel_sums(xp, t.reshape(t.shape + (1,)), out):
        return
    if jit.usable(t, out):
        caffe_gemv_jit.add_item_totals(t, out)
    elif xp is caffe_gemv.numpy:
        out[...] = caffe_gemv.item_totals(t, out)
    else:
        out += t.sum(axis=0)
