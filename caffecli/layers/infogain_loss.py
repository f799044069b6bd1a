"""InfogainLoss: softmax over ``infogain_loss_param.axis`` weighted by a KxK matrix H
(third bottom, or a binaryproto named by ``source``), Caffe's normalization rules.
"""
import numpy

from ..blob import Blob
from ..errors import CaffeError
from ..kernels import libm
from ..kernels.activations import softmax
from ..layer import LossLayer
from ..proto.io import read_blob_proto
from ..registry import register_layer, say_creating
from ._axes import label_positions
from ._loss import (LOG_THRESHOLD, get_normalizer, ignore_label_of, int_labels, label_mask,
                    loss_weight, poison, refuse_label_backward, sequential_sum, valid_count)


@register_layer("InfogainLoss")
class InfogainLossLayer(LossLayer):
    """-sum_l H[label, l] log(max(prob_l, 1e-20)) per labelled position, normalized; an
    optional second top carries prob (it needs explicit loss weights for both tops)."""

    exact_num_bottom_blobs = -1
    min_bottom_blobs = 2
    max_bottom_blobs = 3
    exact_num_top_blobs = -1
    min_top_blobs = 1
    max_top_blobs = 2

    def setup(self, bottom, top):
        # Caffe builds its internal Softmax through the layer factory, which logs this line
        if self.net_log:
            say_creating(self.name)
        lp = self.layer_param.loss_param
        self.ignore_label = ignore_label_of(lp)
        if lp.HasField("normalize"):
            raise self.error('normalize is deprecated. use "normalization"')
        self.normalization = lp.normalization
        self.infogain = None
        if len(bottom) < 3:
            ip = self.layer_param.infogain_loss_param
            if not ip.HasField("source"):
                raise self.error("Infogain matrix source must be specified.")
            h = Blob()
            try:
                h.from_proto(read_blob_proto(ip.source))
            except CaffeError as e:
                raise self.error("infogain_loss_param.source: %s" % e)
            self.infogain = h

    def reshape(self, bottom, top):
        LossLayer.reshape(self, bottom, top)
        self.axis, self.outer, self.num_labels, self.inner = label_positions(
            self, bottom, "infogain_loss_param", "infogain")
        h = self.infogain.at(self.side, False, False) if len(bottom) < 3 else bottom[2]
        if h.count() != self.num_labels * self.num_labels:
            raise self.error("H must be %dx%d (got %s)"
                             % (self.num_labels, self.num_labels, h.shape_string()))
        if len(top) >= 2:
            top[1].reshape_like(bottom[0])

    def _matrix(self, bottom):
        """H as a (K, K) array in the bottom's dtype."""
        h = self.infogain.at(self.side, False, False) if len(bottom) < 3 else bottom[2]
        k = self.num_labels
        return h.data.reshape(k, k).astype(bottom[0].dtype, copy=False)

    def _labels(self, bottom):
        labels = int_labels(self.xp, bottom[1], (self.outer, self.inner))
        valid = label_mask(self, self.xp, labels, self.num_labels, self.ignore_label, defer=True)
        return self.xp.where(valid, labels, 0), valid

    def _normalizer(self, valid, dt):
        count = valid_count(self, self.xp, valid, self.normalization, self.ignore_label)
        return get_normalizer(self, self.normalization, self.outer, self.inner, count, dt)

    def forward(self, bottom, top):
        xp = self.xp
        dt = numpy.dtype(bottom[0].dtype)
        dims = (self.outer, self.num_labels, self.inner)
        self.prob = softmax(xp, bottom[0].data.reshape(dims))
        self.labels, self.valid = labels, valid = self._labels(bottom)
        self.norm = self._normalizer(valid, dt)
        rows = self._matrix(bottom)[labels].transpose(0, 2, 1)  # (outer, K, inner): H[label, l]
        logs = libm.log(xp, xp.maximum(self.prob, dt.type(LOG_THRESHOLD)))
        terms = xp.where(valid[:, None, :], rows * logs, dt.type(0))
        # Caffe's loop: loss -= each term by (item, position, label), from 0 (+0, not -0)
        loss = dt.type(0) - sequential_sum(xp, terms.transpose(0, 2, 1))
        top[0].data[...] = poison(self, xp, loss / self.norm)
        if len(top) == 2:
            top[1].data.reshape(dims)[...] = self.prob

    def backward(self, top, propagate_down, bottom):
        refuse_label_backward(self, propagate_down)
        refuse_label_backward(self, propagate_down, 2, "infogain")
        if not propagate_down[0]:
            return
        dt = numpy.dtype(bottom[0].dtype)
        labels, valid = self.labels, self.valid
        h = self._matrix(bottom)
        row_sums = h.sum(axis=1)
        rows = h[labels].transpose(0, 2, 1)
        d = self.prob * row_sums[labels][:, None, :] - rows
        d = d * valid[:, None, :].astype(dt)
        scale = loss_weight(top) / self.norm
        bottom[0].diff.reshape(self.prob.shape)[...] = d * scale
