"""Scale: bottom[0] times a blob broadcast over its axes, plus an optional bias (Caffe's
scale_layer); on the host, one compiled pass each way (kernels/channel_jit.py)."""
import copy

import numpy

from ..blob import Blob
from ..fillers import fill
from ..kernels import caffe_gemv, channel_jit, device, jit
from ..kernels.channel_sums import channel_sums
from ..kernels.threads import for_parts
from ..layer import Layer
from ..proto import caffe_pb2
from ..registry import create_layer, register_layer
from ._broadcast import broadcast_dims, factor_shape, has_learned_factor


@register_layer("Scale")
class ScaleLayer(Layer):
    """top = bottom[0] * scale (learned, default 1, or bottom[1]), plus an optional bias."""

    skip_init_line = "scale.skipping_init"
    has_given_blobs = has_learned_factor   # a second bottom is the factor

    min_bottom_blobs = 1
    max_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.scale_param
        if len(bottom) == 1 and not self.blobs:
            shape = factor_shape(self, bottom, p.axis, p.num_axes, "scale")
            filler = p.filler if p.HasField("filler") else \
                caffe_pb2.FillerParameter(type="constant", value=1)
            self.blobs = [fill(Blob(shape, dtype=bottom[0].dtype), filler)]
        self.bias_layer = None
        if p.bias_term:
            # A Bias layer applied in place to the top, as Caffe builds it.
            bp = copy.deepcopy(self.layer_param)
            bp.type = "Bias"
            bp.bias_param.axis = p.axis
            bp.bias_param.num_axes = bottom[1].num_axes if len(bottom) > 1 else p.num_axes
            bp.bias_param.filler.CopyFrom(p.bias_filler)
            self.bias_layer = create_layer(bp, self.net_dtype, log=self.net_log)
            self.bias_layer.SetUp([bottom[0].blob], [t.blob for t in top])
            if len(self.blobs) + len(bottom) < 3:
                self.bias_param_id = len(self.blobs)
                self.blobs.append(self.bias_layer.blobs[0])
            else:  # the bias came with the layer's blobs
                self.bias_param_id = len(self.blobs) - 1
                self.bias_layer.blobs[0] = self.blobs[self.bias_param_id]
        self.param_propagate_down = [True] * len(self.blobs)

    def reshape(self, bottom, top):
        scale = bottom[1] if len(bottom) > 1 else self.weights[0]
        self.dims = broadcast_dims(self, bottom, scale, self.layer_param.scale_param.axis,
                                    "scale")
        if top[0] is not bottom[0]:
            top[0].reshape_like(bottom[0])
        if self.bias_layer is not None:
            self.bias_layer.Reshape([top[0].blob], [top[0].blob])

    def forward(self, bottom, top):
        scale = (bottom[1] if len(bottom) > 1 else self.weights[0]).data
        outer, dim, inner = self.dims
        x = bottom[0].data.reshape(outer, dim, inner)
        y = top[0].data.reshape(outer, dim, inner)
        in_place = top[0] is bottom[0]
        if in_place:  # keep the input for the scale gradient
            self.bottom_copy = self.scratch("bottom_copy", x.shape, x.dtype)
        bias = None if self.bias_layer is None else self.weights[self.bias_param_id].data
        if jit.usable(x, y, scale, *([] if bias is None else [bias])):
            s, b = scale.reshape(-1), None if bias is None else bias.reshape(-1)
            for_parts(self.xp, lambda c0, c1: channel_jit.scale(
                x, s, b, c0, c1, None if in_place else y,
                self.bottom_copy if in_place else None), dim, x.size, jit.PASS_MIN_PART)
            return
        if in_place:
            self.bottom_copy[...] = x
        self.xp.multiply(x, scale.reshape(1, dim, 1), out=y)
        if self.bias_layer is not None:
            self.bias_layer.Forward([top[0].blob], [top[0].blob])

    def forward_gpu(self, bottom, top):
        """The product, the bias and the kept input in one device kernel
        (kernels/cuda/scale.cu)."""
        scale = (bottom[1] if len(bottom) > 1 else self.weights[0]).data
        bias = None if self.bias_layer is None else self.weights[self.bias_param_id].data
        x, y, xp = bottom[0].data, top[0].data, self.xp
        factors = [scale] + ([] if bias is None else [bias])
        if not device.usable(xp, x) or any(f.dtype != x.dtype or not f.flags.c_contiguous
                                            for f in factors):
            return self.forward(bottom, top)
        outer, dim, inner = self.dims
        in_place = top[0] is bottom[0]
        if in_place:
            self.bottom_copy = self.scratch("bottom_copy", (outer, dim, inner), x.dtype)
        flags = device.ints(bias is not None, dim, inner, in_place)
        device.launch(xp, "scale", "scale_forward", x.size, x.dtype, x, scale,
                      scale if bias is None else bias, *flags,
                      self.bottom_copy if in_place else y, y)

    def _backward_compiled(self, top, bottom):
        """The whole backward of a learned scale (and bias) in one compiled pass over top's
        diff, when every gradient is wanted, the sums in Caffe's order (channel_jit's
        scale_backward); False where that does not apply."""
        if len(bottom) > 1 or not all(self.param_propagate_down):
            return False
        outer, dim, inner = self.dims
        dy = top[0].diff.reshape(outer, dim, inner)
        dx = bottom[0].diff.reshape(outer, dim, inner)
        in_place = top[0] is bottom[0]
        x = self.bottom_copy if in_place else bottom[0].data.reshape(outer, dim, inner)
        scale = self.weights[0]
        bias = None if self.bias_layer is None else self.weights[self.bias_param_id]
        if not jit.usable(dy, dx, x, scale.data, scale.diff,
                          *(() if bias is None else (bias.diff,))):
            return False
        s = scale.data.reshape(-1)
        bias_diff = None if bias is None else bias.diff.reshape(-1)
        for_parts(self.xp, lambda c0, c1: channel_jit.scale_backward(
            dy, x, s, c0, c1, bias_diff, scale.diff.reshape(-1), True,
            None if in_place else dx), dim, dy.size, channel_jit.SUMS_MIN_PART)
        return True

    def _backward_device(self, top, bottom):
        """The same whole backward as one device kernel (kernels/cuda/reduce.cu), a block per
        channel; False where it does not apply."""
        if len(bottom) > 1 or not all(self.param_propagate_down):
            return False
        outer, dim, inner = self.dims
        dy = top[0].diff.reshape(outer, dim, inner)
        dx = bottom[0].diff.reshape(outer, dim, inner)
        x = self.bottom_copy if top[0] is bottom[0] else \
            bottom[0].data.reshape(outer, dim, inner)
        scale = self.weights[0]
        if not device.usable(self.xp, dy, dx, x, scale.data):
            return False
        has_bias = self.bias_layer is not None
        bias_diff = self.weights[self.bias_param_id].diff if has_bias else scale.diff
        device.launch_blocks(self.xp, "reduce", "scale_backward", dim, dy.dtype, dy, x,
                             scale.data, *device.ints(outer, inner, has_bias,
                                                      self._scale_sums_accumulate(True)),
                             bias_diff, scale.diff, dx)
        return True

    def _scale_sums_accumulate(self, learned):
        """Whether the per-channel sums of dy * x add into the scale's diff, as Caffe does for
        a learned scale except where the outer dimension is 1 and it writes them directly
        (element-wise or vector scale); a bottom scale's diff is written."""
        outer, dim, inner = self.dims
        return learned and not (outer == 1 and (inner == 1 or dim > 1))

    def _store_scale_sums(self, scale, total, learned):
        if self._scale_sums_accumulate(learned):
            scale.diff.reshape(-1)[...] += total
        else:
            scale.diff.reshape(-1)[...] = total

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0] and (self._backward_compiled(top, bottom)
                                  or self._backward_device(top, bottom)):
            return
        if self.bias_layer is not None and self.param_propagate_down[-1]:
            self.bias_layer.Backward([top[0].blob], [False], [top[0].blob])
        learned = len(bottom) == 1
        scale = self.weights[0] if learned else bottom[1]
        outer, dim, inner = self.dims
        dy = top[0].diff.reshape(outer, dim, inner)
        in_place = top[0] is bottom[0]
        if (learned and self.param_propagate_down[0]) or (not learned and propagate_down[1]):
            x = self.bottom_copy if in_place else bottom[0].data.reshape(outer, dim, inner)
            scratch = not in_place and outer * inner != 1 and not propagate_down[0]
            if scratch or self.xp is numpy:
                product = dy * x
                if self.xp is numpy:
                    _caffe_scale_sums(product, scale.diff.reshape(-1), learned)
                else:
                    self._store_scale_sums(scale, product.sum(axis=(0, 2)), learned)
                if scratch:   # Caffe keeps this product in bottom[0]'s diff as scratch space
                    bottom[0].diff.reshape(outer, dim, inner)[...] = product
            elif not channel_sums(self.xp, dy, scale.diff.reshape(-1), times=x,
                                  accumulate=self._scale_sums_accumulate(learned)):
                # the same sums without the full-size product (one kernel on the device)
                self._store_scale_sums(scale, self.xp.einsum("odi,odi->d", dy, x), learned)
        if propagate_down[0]:
            self.xp.multiply(dy, scale.data.reshape(1, dim, 1),
                             out=bottom[0].diff.reshape(outer, dim, inner))


def _caffe_scale_sums(product, diff, learned):
    """diff (dim,) takes the scale gradient from product = dy * x (outer, dim, inner) as Caffe's
    Scale layer sums it on the host (kernels/caffe_gemv.py, the reference of channel_jit's
    compiled pass): each (outer, dim) row by gemv (the product itself for one value a row; sdot
    with ones for a single row), then over the outer items by sdot (one channel) or gemv,
    added to a ``learned`` scale's diff or written; one outer item's row sums are written."""
    outer, dim, inner = product.shape
    if inner == 1:
        rows = product[:, :, 0]
    elif outer * dim == 1:
        r = caffe_gemv.dot(product.reshape(-1), numpy.ones(inner, product.dtype))
        diff[...] = diff + r if learned else r
        return
    else:
        rows = caffe_gemv.row_totals(product.reshape(outer * dim, inner), 1).reshape(outer, dim)
    if outer == 1:
        diff[...] = rows[0]
    elif dim == 1:
        r = caffe_gemv.dot(numpy.ones(outer, product.dtype), numpy.ascontiguousarray(rows[:, 0]))
        diff[...] = diff + r if learned else r
    else:
        diff[...] = caffe_gemv.item_totals(rows, diff if learned else None)
