"""SigmoidCrossEntropyLoss: cross-entropy of sigmoid(x) against targets in [0, 1], computed
stably."""
import numpy

from ..kernels import libm
from ..kernels.activations import sigmoid
from ..layer import LossLayer
from ..registry import register_layer
from ._loss import (NORM, get_normalizer, ignore_label_of, int_labels, loss_weight,
                    normalization_mode, refuse_label_backward, sequential_sum, valid_count)


@register_layer("SigmoidCrossEntropyLoss")
class SigmoidCrossEntropyLossLayer(LossLayer):
    """Cross-entropy of sigmoid(x) against targets in [0, 1], computed stably from x;
    normalization defaults to BATCH_SIZE here (unlike SoftmaxWithLoss)."""

    def setup(self, bottom, top):
        lp = self.layer_param.loss_param
        self.ignore_label = ignore_label_of(lp)
        self.normalization = normalization_mode(lp, NORM.BATCH_SIZE)

    def reshape(self, bottom, top):
        LossLayer.reshape(self, bottom, top)
        self.outer = bottom[0].shape_at(0)
        self.inner = bottom[0].count(1)
        if bottom[0].count() != bottom[1].count():
            raise self.error("SIGMOID_CROSS_ENTROPY_LOSS layer inputs must have the same count "
                             "(%s vs %s)" % (bottom[0].shape_string(), bottom[1].shape_string()))

    def _valid(self, bottom):
        if self.ignore_label is None:
            return None
        return int_labels(self.xp, bottom[1], bottom[0].shape) != self.ignore_label

    def forward(self, bottom, top):
        xp = self.xp
        dt = numpy.dtype(bottom[0].dtype)
        x = bottom[0].data
        t = bottom[1].data.reshape(x.shape)
        self.sigmoid = sigmoid(xp, x)
        pos = (x >= 0).astype(dt)
        term = x * (t - pos) - libm.log(xp, dt.type(1) + libm.exp(xp, x - dt.type(2) * x * pos))
        valid = self._valid(bottom)
        if valid is None:
            count = x.size
        else:
            term = xp.where(valid, term, dt.type(0))
            count = valid_count(self, xp, valid, self.normalization, self.ignore_label)
        self.normalizer = get_normalizer(self, self.normalization, self.outer, self.inner,
                                         count, dt)
        # Caffe's loop: loss -= each term in turn, from 0 (+0, not -0)
        top[0].data[...] = (dt.type(0) - sequential_sum(xp, term)) / self.normalizer

    def backward(self, top, propagate_down, bottom):
        refuse_label_backward(self, propagate_down)
        if not propagate_down[0]:
            return
        d = self.sigmoid - bottom[1].data.reshape(bottom[0].shape)
        valid = self._valid(bottom)
        if valid is not None:
            d = d * valid.astype(d.dtype)
        bottom[0].diff[...] = d * (loss_weight(top) / self.normalizer)
