"""Pooling: MAX, AVE or STOCHASTIC pooling (Caffe's pooling_layer)."""
import numpy

from .. import context
from ..kernels.pooling import (PP, geometry, ave_pool, ave_pool_backward, max_pool,
                               max_pool_backward, spill_empty_windows, stochastic_pool_test,
                               stochastic_pool_train)
from ..kernels import device, pooling_jit
from ..kernels.jit import usable as compiled_usable
from ..kernels.threads import for_parts
from ..layer import Layer
from ..proto import caffe_pb2
from ..registry import register_layer


def pooling_params(layer, p, bottom_hw):
    """kernel, stride, pad from a PoolingParameter with Caffe's consistency checks."""
    has = p.HasField
    if p.global_pooling:
        if has("kernel_size") or has("kernel_h") or has("kernel_w"):
            raise layer.error("With Global_pooling: true Filter size cannot specified")
    else:
        if has("kernel_size") == (has("kernel_h") and has("kernel_w")):
            raise layer.error("Filter size is kernel_size OR kernel_h and kernel_w; not both"
                              if has("kernel_size") else
                              "For non-square filters both kernel_h and kernel_w are required.")
    if not ((not has("pad") and has("pad_h") and has("pad_w"))
            or (not has("pad_h") and not has("pad_w"))):
        raise layer.error("pad is pad OR pad_h and pad_w are required.")
    if not ((not has("stride") and has("stride_h") and has("stride_w"))
            or (not has("stride_h") and not has("stride_w"))):
        raise layer.error("Stride is stride OR stride_h and stride_w are required.")
    if p.global_pooling:
        kernel = list(bottom_hw)
    elif has("kernel_size"):
        kernel = [p.kernel_size] * 2
    else:
        kernel = [p.kernel_h, p.kernel_w]
    if kernel[0] <= 0 or kernel[1] <= 0:
        raise layer.error("Filter dimensions cannot be zero (kernel %s)" % kernel)
    pad = [p.pad, p.pad] if not has("pad_h") else [p.pad_h, p.pad_w]
    stride = [p.stride, p.stride] if not has("stride_h") else [p.stride_h, p.stride_w]
    if stride[0] <= 0 or stride[1] <= 0:
        raise layer.error("Stride dimensions cannot be zero (stride %s)" % stride)
    if p.global_pooling and (any(pad) or stride != [1, 1]):
        raise layer.error("With Global_pooling: true; only pad = 0 and stride = 1")
    if any(pad):
        if p.pool not in (PP.AVE, PP.MAX):
            raise layer.error("Padding implemented only for average and max pooling.")
        if pad[0] >= kernel[0] or pad[1] >= kernel[1]:
            raise layer.error("pad %s must be smaller than kernel %s" % (pad, kernel))
    return kernel, stride, pad


@register_layer("Pooling")
class PoolingLayer(Layer):
    """2-D pooling; MAX can write Caffe's argmax mask (index h * W + w) as a second top.

    STOCHASTIC follows Caffe's GPU kernels (BVLC's CPU build has no STOCHASTIC pooling):
    sampling in TRAIN, the weighted average sum(x^2)/sum(x) in TEST.
    """

    exact_num_bottom_blobs = 1
    min_top_blobs = 1

    def __init__(self, param):
        super().__init__(param)
        self.max_top_blobs = 2 if param.pooling_param.pool == PP.MAX else 1

    def setup(self, bottom, top):
        p = self.layer_param.pooling_param
        if p.pool not in (PP.MAX, PP.AVE, PP.STOCHASTIC):
            raise self.error("Unknown pooling method.")
        hw = bottom[0].shape[2:4] if bottom[0].num_axes == 4 else (1, 1)
        self.kernel, self.stride, self.pad = pooling_params(self, p, hw)

    reshape_by_shapes = True

    def reshape(self, bottom, top):
        b = bottom[0]
        if b.num_axes != 4:
            raise self.error("Input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got %s" % b.shape_string())
        p = self.layer_param.pooling_param
        if p.global_pooling:
            self.kernel = list(b.shape[2:4])
        self.geo = geometry(self.kernel, self.stride, self.pad, b.shape[2:4],
                            ceil_mode=p.round_mode == PP.CEIL, owner=self)
        shape = b.shape[:2] + tuple(self.geo.out_hw)
        top[0].reshape(shape)
        if len(top) > 1:
            top[1].reshape(shape)

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        pool = self.layer_param.pooling_param.pool
        self.arg = None
        if pool in (PP.MAX, PP.AVE):
            self._forward_deterministic(x, top, pool)
            return
        if self.phase == caffe_pb2.TRAIN:    # Caffe draws these with cuRAND (GPU only)
            u = context.device_rng().uniform(top[0].count(), 0, 1, x.dtype)
            u = xp.asarray(u.reshape(top[0].shape))
            out, self.arg = stochastic_pool_train(xp, x, self.geo, u)
        else:
            out = stochastic_pool_test(xp, x, self.geo)
        top[0].data[...] = out

    def _forward_deterministic(self, x, top, pool):
        """MAX or AVE pooling, the images of the batch split across threads."""
        xp, y = self.xp, top[0].data
        mask = top[1].data if len(top) > 1 else None
        if pool == PP.MAX:
            self.arg = self.scratch("arg", y.shape, numpy.int32)
        compiled = compiled_usable(x, y)

        def part(a, b):
            if pool == PP.AVE:
                y[a:b] = ave_pool(xp, x[a:b], self.geo)
            else:
                y[a:b], self.arg[a:b] = max_pool(xp, x[a:b], self.geo)
        if not compiled:
            for_parts(xp, part, x.shape[0], x.size)
        elif pool == PP.AVE:
            pooling_jit.ave_pool(x, self.geo, y)
        else:
            pooling_jit.max_pool(x, self.geo, y, self.arg)
        if mask is not None:
            mask[...] = self.geo.caffe_index(xp, self.arg)

    def _kernel_geometry(self):
        """The geometry arguments of kernels/cuda/pooling.cu, after the data pointer."""
        geo = self.geo
        return device.ints(*geo.in_hw, *geo.out_hw, *geo.kernel, *geo.stride, *geo.pad)

    def _device_kernels(self, *arrays):
        pool = self.layer_param.pooling_param.pool
        return pool in (PP.MAX, PP.AVE) and device.usable(self.xp, *arrays)

    def forward_gpu(self, bottom, top):
        """MAX and AVE pooling as one device kernel each (STOCHASTIC: the array code)."""
        x, y = bottom[0].data, top[0].data
        if not self._device_kernels(x):
            return self.forward(bottom, top)
        xp, geometry_args = self.xp, self._kernel_geometry()
        if self.layer_param.pooling_param.pool == PP.AVE:
            self.arg = None
            device.launch(xp, "pooling", "ave_pool_forward", y.size, x.dtype, x,
                          *geometry_args, y)
            return
        self.arg = self.scratch("arg", y.shape, numpy.int32)
        mask = top[1].data if len(top) > 1 else y
        device.launch(xp, "pooling", "max_pool_forward", y.size, x.dtype, x, *geometry_args,
                      y, self.arg, numpy.int32(len(top) > 1), mask)

    def backward_gpu(self, top, propagate_down, bottom):
        dtop, dx = top[0].diff, bottom[0].diff
        if not (propagate_down[0] and self._device_kernels(dtop)):
            return self.backward(top, propagate_down, bottom)
        geometry_args = self._kernel_geometry()
        if self.layer_param.pooling_param.pool == PP.AVE:
            device.launch(self.xp, "pooling", "ave_pool_backward", dx.size, dx.dtype, dtop,
                          *geometry_args, dx)
        else:
            device.launch(self.xp, "pooling", "max_pool_backward", dx.size, dx.dtype, dtop,
                          self.arg, *geometry_args, dx)
            if self.geo.empty_windows:
                spill_empty_windows(self.xp, dtop, self.arg, dx, data_dependent=False)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        dtop = top[0].diff
        pool = self.layer_param.pooling_param.pool
        if pool != PP.AVE and self.arg is None:
            raise self.error("STOCHASTIC pooling has no backward in TEST phase")
        dx = bottom[0].diff
        compiled = compiled_usable(dtop, dx)   # STOCHASTIC's winners are MAX's kind
        unwon = True   # windows nothing won, for the spill below: unknown unless compiled

        def part(a, b):
            if pool == PP.AVE:
                dx[a:b] = ave_pool_backward(xp, dtop[a:b], self.geo, dtop.dtype)
            else:
                dx[a:b] = max_pool_backward(xp, dtop[a:b], self.arg[a:b], self.geo, dtop.dtype)
        if not compiled:
            for_parts(xp, part, dx.shape[0], dx.size)
        elif pool == PP.AVE:
            pooling_jit.ave_pool_backward(dtop, self.geo, dx)
        else:
            unwon = pooling_jit.max_pool_backward(dtop, self.arg, self.geo, dx)
        if pool == PP.MAX and unwon and (xp is numpy or self.geo.empty_windows):
            spill_empty_windows(xp, dtop, self.arg, dx, data_dependent=xp is numpy)
