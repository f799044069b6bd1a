"""MultinomialLogisticLoss: -mean log p[label] for inputs that are already probabilities."""
import numpy

from ..kernels import libm
from ..layer import LossLayer
from ..registry import register_layer
from ._loss import (LOG_THRESHOLD, int_labels, label_mask, loss_weight, poison,
                    refuse_label_backward, sequential_sum)


@register_layer("MultinomialLogisticLoss")
class MultinomialLogisticLossLayer(LossLayer):
    """-mean(log(max(p[label], 1e-20))) over the batch, for inputs that are already
    probabilities."""

    def reshape(self, bottom, top):
        LossLayer.reshape(self, bottom, top)
        b = bottom[1]
        if (b.channels, b.height, b.width) != (1, 1, 1):
            raise self.error("label must be N x 1 x 1 x 1 (got %s)" % b.shape_string())

    def _gather(self, bottom):
        xp = self.xp
        num = bottom[0].num
        dim = bottom[0].count() // num
        labels = int_labels(xp, bottom[1], (num,))
        labels = xp.where(label_mask(self, xp, labels, dim, defer=True), labels, 0)
        p = bottom[0].data.reshape(num, dim)
        picked = xp.take_along_axis(p, labels[:, None], 1)[:, 0]
        return num, dim, labels, xp.maximum(picked, numpy.dtype(bottom[0].dtype).type(
            LOG_THRESHOLD))

    def forward(self, bottom, top):
        num, _, _, prob = self._gather(bottom)
        dt = numpy.dtype(bottom[0].dtype)
        # Caffe subtracts each log from 0 in turn: +0, not -0
        loss = dt.type(0) - sequential_sum(self.xp, libm.log(self.xp, prob))
        top[0].data[...] = poison(self, self.xp, loss / dt.type(num))

    def backward(self, top, propagate_down, bottom):
        refuse_label_backward(self, propagate_down)
        if not propagate_down[0]:
            return
        xp = self.xp
        num, dim, labels, prob = self._gather(bottom)
        dt = numpy.dtype(bottom[0].dtype)
        scale = -loss_weight(top) / dt.type(num)
        d = bottom[0].diff.reshape(num, dim)
        d[...] = 0
        d[xp.arange(num), labels] = scale / prob
