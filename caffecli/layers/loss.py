"""Loss layers over predictions and labels/targets: SoftmaxWithLoss, EuclideanLoss,
SigmoidCrossEntropyLoss and MultinomialLogisticLoss, with Caffe's normalization rules."""
import numpy

from .. import glog
from ..errors import CaffeError
from ..layer import LossLayer
from ..proto import caffe_pb2
from ..registry import register_layer
from .neuron import sigmoid
from .softmax import softmax, split_axis

_N = caffe_pb2.LossParameter
FLT_MIN = numpy.finfo(numpy.float32).tiny
LOG_THRESHOLD = 1e-20  # Caffe's kLOG_THRESHOLD


def normalization_mode(loss_param, legacy_default):
    """The mode in force: ``normalization`` if set, else legacy ``normalize`` (true -> VALID,
    false -> BATCH_SIZE), else ``legacy_default`` (None: the proto default, VALID)."""
    if loss_param.HasField("normalization"):
        return loss_param.normalization
    if loss_param.HasField("normalize"):
        return _N.VALID if loss_param.normalize else _N.BATCH_SIZE
    return loss_param.normalization if legacy_default is None else legacy_default


def get_normalizer(layer, mode, outer, inner, valid_count, dtype):
    """Caffe's get_normalizer: the divisor for a mode, never below 1 (avoids NaN when nothing
    is valid). ``valid_count`` -1 means every position counts."""
    if mode == _N.FULL:
        n = outer * inner
    elif mode == _N.VALID:
        n = outer * inner if valid_count == -1 else valid_count
    elif mode == _N.BATCH_SIZE:
        n = outer
    elif mode == _N.NONE:
        n = 1
    else:
        raise layer.error("Unknown normalization mode: %d" % mode)
    return dtype.type(max(1.0, float(dtype.type(n))))


def loss_weight(top):
    """The weight Net wrote into the scalar loss top's diff."""
    return top[0].diff.reshape(-1)[0]


def int_labels(xp, blob, shape):
    """Label values cast to int as C++ static_cast<int> does (truncation toward zero)."""
    return blob.data.reshape(shape).astype(xp.int64)


def label_mask(layer, xp, labels, num_labels, ignore_label=None, defer=False):
    """Boolean mask of the positions that count (not ``ignore_label``); a counted label outside
    [0, num_labels) is a CaffeError. With ``defer`` on the device the check costs no copy:
    the bad positions are left out and kept, ``poison`` makes the loss NaN, and the layer's
    explain_nonfinite_loss() names the label when that NaN reaches the host."""
    valid = labels != ignore_label if ignore_label is not None else xp.ones(labels.shape, bool)
    bad = valid & ((labels < 0) | (labels >= num_labels))
    layer.label_check = (labels, bad, num_labels)
    if defer and xp is not numpy:
        return valid & ~bad
    layer.explain_nonfinite_loss()
    return valid


def poison(layer, xp, loss):
    """``loss``, or NaN when a deferred label check found a bad label (device only)."""
    if xp is numpy:
        return loss
    return xp.where(layer.label_check[1].any(), xp.nan, loss).astype(loss.dtype)


def valid_count(layer, xp, valid, normalization, ignore_label):
    """How many positions count, or -1 for all: read from the device only where the
    normalization needs it (VALID with an ignore_label), as Caffe's GPU code."""
    if normalization == _N.VALID and ignore_label is not None:
        return int(xp.count_nonzero(valid))
    return -1


def ignore_label_of(loss_param):
    return int(loss_param.ignore_label) if loss_param.HasField("ignore_label") else None


def refuse_label_backward(layer, propagate_down, index=1, what="label"):
    if len(propagate_down) > index and propagate_down[index]:
        raise layer.error("%s Layer cannot backpropagate to %s inputs." % (layer.type, what))


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
        glog.info("layer_factory.hpp:77", "Creating layer " + self.name)
        lp = self.layer_param.loss_param
        self.ignore_label = ignore_label_of(lp)
        self.normalization = normalization_mode(lp, None)

    def reshape(self, bottom, top):
        LossLayer.reshape(self, bottom, top)
        try:
            self.axis = bottom[0].canonical_axis_index(self.layer_param.softmax_param.axis)
        except CaffeError as e:
            raise self.error("softmax_param.axis: %s" % e)
        self.outer, self.channels, self.inner = split_axis(bottom[0], self.axis)
        if self.outer * self.inner != bottom[1].count():
            raise self.error(
                "Number of labels must match number of predictions; e.g., if softmax axis == 1 "
                "and prediction shape is (N, C, H, W), label count (number of labels) must be "
                "N*H*W, with integer values in {0, 1, ..., C-1} (prediction %s, label %s)"
                % (bottom[0].shape_string(), bottom[1].shape_string()))

    def _dims(self):
        return (self.outer, self.channels, self.inner)

    def forward(self, bottom, top):
        xp = self.xp
        dt = numpy.dtype(bottom[0].dtype)
        self.prob = softmax(xp, bottom[0].data.reshape(self._dims()))
        self.labels = labels = int_labels(xp, bottom[1], (self.outer, self.inner))
        self.valid = valid = label_mask(self, xp, labels, self.channels, self.ignore_label,
                                        defer=True)
        picked = xp.take_along_axis(self.prob, xp.where(valid, labels, 0)[:, None, :], 1)[:, 0]
        logs = xp.log(xp.maximum(picked, dt.type(FLT_MIN)))
        loss = -xp.where(valid, logs, dt.type(0)).sum()
        count = valid_count(self, xp, valid, self.normalization, self.ignore_label)
        self.norm = get_normalizer(self, self.normalization, self.outer, self.inner, count, dt)
        top[0].data[...] = poison(self, xp, loss / self.norm)

    def backward(self, top, propagate_down, bottom):
        refuse_label_backward(self, propagate_down)
        if not propagate_down[0]:
            return
        xp = self.xp
        dt = numpy.dtype(bottom[0].dtype)
        onehot = xp.arange(self.channels)[None, :, None] == self.labels[:, None, :]
        d = (self.prob - onehot.astype(dt)) * self.valid[:, None, :].astype(dt)
        bottom[0].diff.reshape(self._dims())[...] = d * (loss_weight(top) / self.norm)


@register_layer("EuclideanLoss")
class EuclideanLossLayer(LossLayer):
    """sum((a - b)^2) / (2 num); gradients +-(a - b) * weight / num to both inputs."""

    def allow_force_backward(self, bottom_index):
        return True

    def reshape(self, bottom, top):
        LossLayer.reshape(self, bottom, top)
        if bottom[0].count(1) != bottom[1].count(1):
            raise self.error("Inputs must have the same dimension (%s vs %s)"
                             % (bottom[0].shape_string(), bottom[1].shape_string()))

    def forward(self, bottom, top):
        self.diff = bottom[0].data - bottom[1].data.reshape(bottom[0].shape)
        flat = self.diff.reshape(-1)
        dt = numpy.dtype(bottom[0].dtype)
        top[0].data[...] = flat.dot(flat) / dt.type(bottom[0].num) / dt.type(2)

    def backward(self, top, propagate_down, bottom):
        dt = numpy.dtype(bottom[0].dtype)
        for i, sign in ((0, 1), (1, -1)):
            if propagate_down[i]:
                alpha = dt.type(sign) * loss_weight(top) / dt.type(bottom[i].num)
                bottom[i].diff[...] = (self.diff * alpha).reshape(bottom[i].shape)


@register_layer("SigmoidCrossEntropyLoss")
class SigmoidCrossEntropyLossLayer(LossLayer):
    """Cross-entropy of sigmoid(x) against targets in [0, 1], computed stably from x;
    normalization defaults to BATCH_SIZE here (unlike SoftmaxWithLoss)."""

    def setup(self, bottom, top):
        lp = self.layer_param.loss_param
        self.ignore_label = ignore_label_of(lp)
        self.normalization = normalization_mode(lp, _N.BATCH_SIZE)

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
        term = x * (t - pos) - xp.log(dt.type(1) + xp.exp(x - dt.type(2) * x * pos))
        valid = self._valid(bottom)
        if valid is None:
            count = x.size
        else:
            term = xp.where(valid, term, dt.type(0))
            count = valid_count(self, xp, valid, self.normalization, self.ignore_label)
        self.normalizer = get_normalizer(self, self.normalization, self.outer, self.inner,
                                         count, dt)
        top[0].data[...] = -term.sum() / self.normalizer

    def backward(self, top, propagate_down, bottom):
        refuse_label_backward(self, propagate_down)
        if not propagate_down[0]:
            return
        d = self.sigmoid - bottom[1].data.reshape(bottom[0].shape)
        valid = self._valid(bottom)
        if valid is not None:
            d = d * valid.astype(d.dtype)
        bottom[0].diff[...] = d * (loss_weight(top) / self.normalizer)


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
        top[0].data[...] = poison(self, self.xp, -self.xp.log(prob).sum() / dt.type(num))

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
