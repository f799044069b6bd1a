"""HingeLoss: one-vs-all hinge loss, L1 or L2 (Caffe's hinge_loss_layer)."""
import numpy

from ..kernels import caffe_blas
from ..layer import LossLayer
from ..proto import caffe_pb2
from ..registry import register_layer
from ._loss import int_labels, label_mask, loss_weight, poison, refuse_label_backward

_H = caffe_pb2.HingeLossParameter


@register_layer("HingeLoss")
class HingeLossLayer(LossLayer):
    """sum_k max(0, 1 - s_k x_k) / num (L1) or its squares (L2), s = +1 at the label, -1
    elsewhere. Like Caffe, forward leaves the margins max(0, 1 - s x) in bottom[0]'s diff."""

    def setup(self, bottom, top):
        self.norm = self.layer_param.hinge_loss_param.norm
        if self.norm not in (_H.L1, _H.L2):
            raise self.error("Unknown Norm %d" % self.norm)

    def _flip_label_entries(self, a, labels):
        a[self.xp.arange(a.shape[0]), labels] *= -1

    def forward(self, bottom, top):
        xp = self.xp
        dt = numpy.dtype(bottom[0].dtype)
        num = bottom[0].num
        dim = bottom[0].count() // num
        if bottom[1].count() < num:
            raise self.error("need %d labels, got %s" % (num, bottom[1].shape_string()))
        labels = int_labels(xp, bottom[1], (-1,))[:num]
        self.labels = xp.where(label_mask(self, xp, labels, dim, defer=True), labels, 0)
        m = bottom[0].data.reshape(num, dim).copy()
        self._flip_label_entries(m, self.labels)
        m = xp.maximum(dt.type(0), dt.type(1) + m)
        self.margins = m
        # Caffe's scratch use of the bottom diff (mutable_cpu_diff in Forward)
        bottom[0].writable().diff.reshape(num, dim)[...] = m
        if self.norm == _H.L1:   # caffe_cpu_asum, caffe_cpu_dot (kernels/caffe_blas.py)
            total = caffe_blas.asum(m)
        else:
            total = caffe_blas.dot(m, m)
        top[0].data[...] = poison(self, xp, total / dt.type(num))

    def backward(self, top, propagate_down, bottom):
        refuse_label_backward(self, propagate_down)
        if not propagate_down[0]:
            return
        dt = numpy.dtype(bottom[0].dtype)
        num = self.margins.shape[0]
        d = self.margins.copy()
        self._flip_label_entries(d, self.labels)
        w = loss_weight(top)
        if self.norm == _H.L1:
            d = self.xp.sign(d) * (w / dt.type(num))
        else:
            d = d * (w * dt.type(2) / dt.type(num))
        bottom[0].diff.reshape(d.shape)[...] = d
