"""SoftmaxWithLoss: -log softmax(x)[label] over the labelled positions, with Caffe's normalization
(softmax_loss_layer)."""
import numpy

from ..kernels import device, jit, libm, softmax_jit
from ..kernels.activations import softmax
from ..layer import LossLayer
from ..registry import register_layer, say_creating
from ._axes import label_positions
from ._loss import (FLT_MIN, get_normalizer, ignore_label_of, int_labels, label_mask, loss_weight,
                    normalization_mode, normalizer_count, poison, refuse_label_backward,
                    sequential_sum, valid_count)


@register_layer("SoftmaxWithLoss")
class SoftmaxWithLossLayer(LossLayer):
    """Mean of -log(softmax(x)[label]) over the labelled positions, normalized per
    ``loss_param.normalization``; gradient (prob - onehot) * weight / normalizer."""

    exact_num_top_blobs = -1
    min_top_blobs = 1
    max_top_blobs = 2

    def setup(self, bottom, top):
        if len(top) == 2:
            # Caffe aborts here whatever the weights: 1 default weight for 2 tops, or 2 explicit
            # weights that its internal Softmax (1 top) inherits.
            raise self.error("a second (prob) top cannot be built: loss_weight must be "
                             "specified once per top blob (Caffe aborts for this layer)")
        # Caffe builds its internal Softmax through the layer factory, which logs this line
        if self.net_log:
            say_creating(self.name)
        lp = self.layer_param.loss_param
        self.ignore_label = ignore_label_of(lp)
        self.normalization = normalization_mode(lp, None)
        self.flags = None

    def reshape(self, bottom, top):
        LossLayer.reshape(self, bottom, top)
        self.axis, self.outer, self.channels, self.inner = label_positions(
            self, bottom, "softmax_param", "softmax")

    def _dims(self):
        return (self.outer, self.channels, self.inner)

    def forward(self, bottom, top):
        xp = self.xp
        dt = numpy.dtype(bottom[0].dtype)
        self.flags = None                 # the device kernels' label flags (forward_gpu)
        x = bottom[0].data.reshape(self._dims())
        self.prob = softmax(xp, x, self.scratch("prob", x.shape, dt) if xp is numpy else None)
        self.labels = labels = int_labels(xp, bottom[1], (self.outer, self.inner))
        self.valid = valid = label_mask(self, xp, labels, self.channels, self.ignore_label,
                                        defer=True)
        picked = xp.take_along_axis(self.prob, xp.where(valid, labels, 0)[:, None, :], 1)[:, 0]
        logs = libm.log(xp, xp.maximum(picked, dt.type(FLT_MIN)))
        # Caffe's loop: loss -= each log in turn, from 0 (+0 when there is none, not -0)
        loss = dt.type(0) - sequential_sum(xp, xp.where(valid, logs, dt.type(0)))
        count = valid_count(self, xp, valid, self.normalization, self.ignore_label)
        self.norm = get_normalizer(self, self.normalization, self.outer, self.inner, count, dt)
        top[0].data[...] = poison(self, xp, loss / self.norm)

    def forward_gpu(self, bottom, top):
        """The softmax, each position's log-probability and label check in one device kernel,
        the sum, the normalizer and the loss in a second (kernels/cuda/softmax_loss.cu)."""
        x, labels, xp = bottom[0].data, bottom[1].data, self.xp
        if not device.usable(xp, x, labels, top[0].data):
            return self.forward(bottom, top)
        dt = numpy.dtype(x.dtype)
        positions = (self.outer, self.inner)
        self.prob = self.scratch("prob", self._dims(), dt)
        logs = self.scratch("logs", positions, dt)
        self.flags = flags = self.scratch("flags", positions, numpy.int32)
        self.norm = self.scratch("norm", (1,), dt)
        ignore = self.ignore_label
        device.launch(xp, "softmax_loss", "softmax_loss_forward", logs.size, dt, x, labels,
                      *device.ints(self.channels, self.inner, ignore or 0, ignore is not None),
                      self.prob, logs, flags)
        fixed = normalizer_count(self, self.normalization, self.outer, self.inner,
                                 ignore is not None)
        device.launch_blocks(xp, "softmax_loss", "softmax_loss_total", logs.size, dt, logs,
                             flags, *device.ints(fixed or 0, fixed is None),
                             dt.type(numpy.nan), top[0].data, self.norm, blocks=1)
        # read only when the loss comes back NaN or infinite (explain_nonfinite_loss)
        self.label_check = lambda: (int_labels(xp, bottom[1], positions), flags == 2,
                                    self.channels)

    def backward_gpu(self, top, propagate_down, bottom):
        refuse_label_backward(self, propagate_down)
        dx = bottom[0].diff
        if not propagate_down[0] or self.flags is None or not device.usable(self.xp, dx):
            return self.backward(top, propagate_down, bottom)
        device.launch(self.xp, "softmax_loss", "softmax_loss_backward", dx.size, dx.dtype,
                      self.prob, bottom[1].data, self.flags,
                      *device.ints(self.channels, self.inner), top[0].diff, self.norm, dx)

    def backward(self, top, propagate_down, bottom):
        refuse_label_backward(self, propagate_down)
        if not propagate_down[0]:
            return
        xp = self.xp
        dt = numpy.dtype(bottom[0].dtype)
        scale = loss_weight(top) / self.norm
        dx = bottom[0].diff.reshape(self._dims())
        if jit.usable(self.prob, dx) and all(isinstance(a, numpy.ndarray) and a.flags.c_contiguous
                                             for a in (self.labels, self.valid)):
            softmax_jit.loss_backward(self.prob, self.labels, self.valid, scale, dx)
            return
        onehot = xp.arange(self.channels)[None, :, None] == self.labels[:, None, :]
        d = (self.prob - onehot.astype(dt)) * self.valid[:, None, :].astype(dt)
        dx[...] = d * scale
