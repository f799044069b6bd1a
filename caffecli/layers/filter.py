"""Filter: keeps the items whose selector is nonzero (Caffe's filter_layer)."""
import numpy

from .. import backend
from ..layer import Layer
from ..registry import register_layer


@register_layer("Filter")
class FilterLayer(Layer):
    """Keeps the items (first-axis entries) whose selector (last bottom) is nonzero."""

    min_bottom_blobs = 2
    min_top_blobs = 1

    def setup(self, bottom, top):
        if len(top) != len(bottom) - 1:
            raise self.error("needs one top per data bottom (bottoms but the selector): "
                             "%d bottoms, %d tops" % (len(bottom), len(top)))
        self.first_reshape = True
        self.selected = numpy.zeros(0, dtype=numpy.int64)

    def reshape(self, bottom, top):
        sel = bottom[-1]
        if sel.num_axes < 1:
            raise self.error("the selector needs at least 1 axis")
        if any(d != 1 for d in sel.shape[1:]):
            raise self.error("Selector blob dimensions must be singletons (1), except the "
                             "first: selector %s" % sel.shape_string())
        for i, b in enumerate(bottom[:-1]):
            if b.num_axes < 1 or b.shape[0] != sel.shape[0]:
                raise self.error("Each bottom should have the same 0th dimension as the "
                                 "selector blob: bottom[%d] %s, selector %s"
                                 % (i, b.shape_string(), sel.shape_string()))
        values = backend.to_host(sel.data).reshape(-1)
        self.selected = numpy.flatnonzero(values != 0)
        n = len(self.selected)
        if self.first_reshape:  # the selector holds no data yet at set-up
            n = bottom[0].shape[0]
            self.first_reshape = False
        for t, b in zip(top, bottom):
            t.reshape((n,) + tuple(b.shape[1:]))

    def forward(self, bottom, top):
        idx = self.xp.asarray(self.selected)
        for t, b in zip(top, bottom):
            t.data[...] = b.data[idx]

    def backward(self, top, propagate_down, bottom):
        if propagate_down[-1]:
            raise self.error("Layer cannot backpropagate to filter index inputs")
        idx = self.xp.asarray(self.selected)
        for i, t in enumerate(top):
            if propagate_down[i]:
                grad = bottom[i].diff
                grad[...] = 0
                grad[idx] = t.diff
