"""What the loss layers share: Caffe's normalization rules, label checks and the loss weight."""
import numpy

from .. import backend
from ..proto import caffe_pb2

NORM = caffe_pb2.LossParameter
FLT_MIN = numpy.finfo(numpy.float32).tiny
LOG_THRESHOLD = 1e-20  # Caffe's kLOG_THRESHOLD


def normalization_mode(loss_param, legacy_default):
    """The mode in force: ``normalization`` if set, else legacy ``normalize`` (true -> VALID,
    false -> BATCH_SIZE), else ``legacy_default`` (None: the proto default, VALID)."""
    if loss_param.HasField("normalization"):
        return loss_param.normalization
    if loss_param.HasField("normalize"):
        return NORM.VALID if loss_param.normalize else NORM.BATCH_SIZE
    return loss_param.normalization if legacy_default is None else legacy_default


def normalizer_count(layer, mode, outer, inner, counts_valid):
    """What Caffe's get_normalizer divides by for ``mode``: a number of positions, or None
    where it is the number of valid ones (VALID, when ``counts_valid``: an ignore_label)."""
    if mode == NORM.FULL:
        return outer * inner
    if mode == NORM.VALID:
        return None if counts_valid else outer * inner
    if mode == NORM.BATCH_SIZE:
        return outer
    if mode == NORM.NONE:
        return 1
    raise layer.error("Unknown normalization mode: %d" % mode)


def get_normalizer(layer, mode, outer, inner, valid_count, dtype):
    """Caffe's get_normalizer: the divisor for a mode, never below 1 (avoids NaN when nothing
    is valid). ``valid_count`` -1 means every position counts."""
    n = normalizer_count(layer, mode, outer, inner,
                         not (isinstance(valid_count, int) and valid_count == -1))
    if n is None:
        n = valid_count
    if backend.is_device_array(n):   # a count left on the device: the same float, there
        return backend.array_module(n).maximum(n.astype(dtype), dtype.type(1))
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


def sequential_sum(xp, terms):
    """The sum of ``terms`` (C order) added one after another in their dtype, as Caffe's loss
    loops accumulate (``loss -= ...``); numpy's pairwise sum rounds otherwise."""
    flat = terms.reshape(-1)
    if flat.size == 0:
        return flat.dtype.type(0)
    return xp.cumsum(flat)[-1]


def poison(layer, xp, loss):
    """``loss``, or NaN when a deferred label check found a bad label (device only)."""
    if xp is numpy:
        return loss
    return xp.where(layer.label_check[1].any(), xp.nan, loss).astype(loss.dtype)


def valid_count(layer, xp, valid, normalization, ignore_label):
    """How many positions count, or -1 for all, counted only where the normalization needs it
    (VALID with an ignore_label). On the device the count stays there (Caffe's GPU code reads
    it back), so a CUDA graph can hold the loss."""
    if normalization == NORM.VALID and ignore_label is not None:
        count = xp.count_nonzero(valid)
        return int(count) if xp is numpy else count
    return -1


def ignore_label_of(loss_param):
    return int(loss_param.ignore_label) if loss_param.HasField("ignore_label") else None


def refuse_label_backward(layer, propagate_down, index=1, what="label"):
    if len(propagate_down) > index and propagate_down[index]:
        raise layer.error("%s Layer cannot backpropagate to %s inputs." % (layer.type, what))
