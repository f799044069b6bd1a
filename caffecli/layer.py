"""Layer: the fixed contract every layer type follows (Caffe's layer.hpp).

Subclasses set the blob-count class attributes and implement ``layer_setup``, ``reshape``,
``forward_impl`` and ``backward_impl`` against ``self.xp`` (numpy or cupy).
"""
import numpy

from . import backend
from .blob import Blob
from .errors import CaffeError


class Layer:
    """Base of all layers; Net calls setup once, then forward/backward each iteration."""

    type = None
    exact_num_bottom_blobs = -1
    min_bottom_blobs = -1
    max_bottom_blobs = -1
    exact_num_top_blobs = -1
    min_top_blobs = -1
    max_top_blobs = -1
    equal_num_bottom_top_blobs = False
    auto_top_blobs = False
    is_loss = False  # loss layers default their first top's loss_weight to 1

    def __init__(self, param):
        self.layer_param = param
        self.phase = param.phase
        self.blobs = [Blob().from_proto(b) for b in param.blobs]
        self.param_propagate_down = [True] * len(self.blobs)
        self.loss_weights = []

    @property
    def name(self):
        return self.layer_param.name

    @property
    def xp(self):
        return backend.xp()

    # ---- contract ----------------------------------------------------------------------
    def layer_setup(self, bottom, top):
        """One-time set-up from layer_param (create parameter blobs here)."""

    def reshape(self, bottom, top):
        """Shape the tops (and buffers) for the bottoms' current shapes."""
        raise NotImplementedError

    def forward_impl(self, bottom, top):
        raise NotImplementedError

    def backward_impl(self, top, propagate_down, bottom):
        """Default: nothing to propagate (layers with no backward)."""

    def allow_force_backward(self, bottom_index):
        return True

    # ---- driver ------------------------------------------------------------------------
    def setup(self, bottom, top):
        """CheckBlobCounts -> LayerSetUp -> Reshape -> SetLossWeights."""
        self.check_blob_counts(bottom, top)
        if self.is_loss and len(self.layer_param.loss_weight) == 0:
            self.layer_param.loss_weight.append(1.0)
        self.layer_setup(bottom, top)
        self.reshape(bottom, top)
        self.set_loss_weights(top)
        while len(self.param_propagate_down) < len(self.blobs):
            self.param_propagate_down.append(True)

    def forward(self, bottom, top):
        """Reshape, compute the tops, and return the weighted loss of the loss tops."""
        self.reshape(bottom, top)
        self.forward_impl(bottom, top)
        loss = 0.0
        for i, t in enumerate(top):
            w = self.loss(i)
            if w:
                loss += float((t.data * t.diff).sum())
        return loss

    def backward(self, top, propagate_down, bottom):
        self.backward_impl(top, propagate_down, bottom)

    def loss(self, top_index):
        return self.loss_weights[top_index] if top_index < len(self.loss_weights) else 0.0

    def set_loss_weights(self, top):
        weights = list(self.layer_param.loss_weight)
        if weights:
            if len(weights) != len(top):
                raise CaffeError("Layer %s (%s): loss_weight must be unspecified or specified "
                                 "once per top blob (%d weights, %d tops)"
                                 % (self.name, self.type, len(weights), len(top)))
            self.loss_weights = [float(w) for w in weights]
            for t, w in zip(top, self.loss_weights):
                if w:
                    t.diff[...] = w
        else:
            self.loss_weights = [0.0] * len(top)

    def set_param_propagate_down(self, index, value):
        while len(self.param_propagate_down) <= index:
            self.param_propagate_down.append(True)
        self.param_propagate_down[index] = bool(value)

    def check_blob_counts(self, bottom, top):
        def fail(what, n, rule):
            raise CaffeError("Layer %s (%s) takes %s %s blob(s) as %s, got %d"
                             % (self.name, self.type, rule, what.split()[0], what, n))
        nb, nt = len(bottom), len(top)
        if self.exact_num_bottom_blobs >= 0 and nb != self.exact_num_bottom_blobs:
            fail("bottom input", nb, "exactly %d" % self.exact_num_bottom_blobs)
        if self.min_bottom_blobs >= 0 and nb < self.min_bottom_blobs:
            fail("bottom input", nb, "at least %d" % self.min_bottom_blobs)
        if self.max_bottom_blobs >= 0 and nb > self.max_bottom_blobs:
            fail("bottom input", nb, "at most %d" % self.max_bottom_blobs)
        if self.exact_num_top_blobs >= 0 and nt != self.exact_num_top_blobs:
            fail("top output", nt, "exactly %d" % self.exact_num_top_blobs)
        if self.min_top_blobs >= 0 and nt < self.min_top_blobs:
            fail("top output", nt, "at least %d" % self.min_top_blobs)
        if self.max_top_blobs >= 0 and nt > self.max_top_blobs:
            fail("top output", nt, "at most %d" % self.max_top_blobs)
        if self.equal_num_bottom_top_blobs and nb != nt:
            raise CaffeError("Layer %s (%s) needs as many tops as bottoms, got %d bottoms "
                             "and %d tops" % (self.name, self.type, nb, nt))

    def error(self, message):
        """A CaffeError prefixed with this layer's name and type."""
        return CaffeError("Layer %s (%s): %s" % (self.name, self.type, message))

    def to_proto(self, write_diff=False):
        """This layer's LayerParameter with its current parameter blobs."""
        from .proto import caffe_pb2
        p = caffe_pb2.LayerParameter()
        p.CopyFrom(self.layer_param)
        del p.blobs[:]
        for b in self.blobs:
            b.to_proto(p.blobs.add(), write_diff=write_diff)
        return p


class NeuronLayer(Layer):
    """One bottom, one top of the same shape (elementwise layers; in-place allowed)."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        top[0].reshape_like(bottom[0])


class LossLayer(Layer):
    """Two bottoms (predictions, labels/targets), one scalar top weighted 1 by default."""

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1
    is_loss = True

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1

    def reshape(self, bottom, top):
        if bottom[0].shape_at(0) != bottom[1].shape_at(0) if bottom[0].num_axes and bottom[1].num_axes else False:
            raise self.error("The data and label should have the same first dimension "
                             "(%s vs %s)" % (bottom[0].shape_string(), bottom[1].shape_string()))
        top[0].reshape(())


def dtype_of(blob):
    return numpy.dtype(blob.dtype)
