"""Accuracy: top-k classification accuracy, optionally per class (Caffe's accuracy_layer)."""
import numpy

from .. import replay
from ..kernels.indexing import scatter_add
from ..layer import Layer
from ..registry import register_layer
from ._axes import label_positions
from ._loss import int_labels, label_mask, poison


@register_layer("Accuracy")
class AccuracyLayer(Layer):
    """Fraction of labelled positions whose true-class score has fewer than top_k other
    scores >= it (ties count against); second top: the same per class (0 for absent ones)."""

    exact_num_bottom_blobs = 2
    min_top_blobs = 1
    max_top_blobs = 2

    def setup(self, bottom, top):
        p = self.layer_param.accuracy_param
        self.top_k = int(p.top_k)
        self.ignore_label = int(p.ignore_label) if p.HasField("ignore_label") else None

    def reshape(self, bottom, top):
        if bottom[1].count() == 0 or self.top_k > bottom[0].count() // bottom[1].count():
            raise self.error("top_k must be less than or equal to the number of classes "
                             "(top_k %d, prediction %s, label %s)"
                             % (self.top_k, bottom[0].shape_string(), bottom[1].shape_string()))
        self.axis, self.outer, self.num_labels, self.inner = label_positions(
            self, bottom, "accuracy_param", "label")
        top[0].reshape(())
        if len(top) > 1:
            top[1].reshape((self.num_labels,))

    def forward(self, bottom, top):
        """Counted where the data is, with no read back to the host, so a CUDA graph can
        record it; while one captures, a bad label makes the accuracy NaN rather than an
        error (the loss beside it, reading the same labels, names it)."""
        xp = self.xp
        dt = numpy.dtype(bottom[0].dtype)
        scores = bottom[0].data.reshape(self.outer, self.num_labels, self.inner)
        labels = int_labels(xp, bottom[1], (self.outer, self.inner))
        deferred = replay.capturing()
        valid = label_mask(self, xp, labels, self.num_labels, self.ignore_label, defer=deferred)
        labels = xp.where(valid, labels, 0)
        true_score = xp.take_along_axis(scores, labels[:, None, :], 1)
        better = (scores >= true_score).sum(axis=1) - 1  # the true class counts itself
        correct = valid & (better < self.top_k)
        count = xp.asarray(xp.count_nonzero(valid))
        hits = xp.asarray(xp.count_nonzero(correct))
        value = xp.where(count == 0, dt.type(0),
                         hits.astype(dt) / xp.maximum(count, 1).astype(dt)).astype(dt)
        top[0].data[...] = poison(self, xp, value) if deferred else value
        if len(top) > 1:
            k = self.num_labels
            seen, right = xp.zeros(k, dt), xp.zeros(k, dt)
            scatter_add(xp, seen, labels.reshape(-1), valid.reshape(-1).astype(dt))
            scatter_add(xp, right, labels.reshape(-1), correct.reshape(-1).astype(dt))
            top[1].data[...] = xp.where(seen == 0, dt.type(0), right / xp.maximum(seen, 1))

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("Accuracy has no backward pass (Not Implemented)")
