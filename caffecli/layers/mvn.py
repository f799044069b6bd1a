"""MVN: mean-variance normalization per item (or across channels), in Caffe's arithmetic
(mvn_layer): its sums are gemvs against ones, taken on the host in OpenBLAS's order
(kernels/caffe_gemv.py)."""
import numpy

from ..kernels import caffe_gemv, caffe_gemv_jit, jit
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("MVN")
class MVNLayer(NeuronLayer):
    """Subtract the mean (and divide by std + eps) per (item, channel) or per item."""

    def reshape(self, bottom, top):
        b = bottom[0]
        top[0].reshape(b.num, b.channels, b.height, b.width)  # Caffe's legacy 4-D top

    def _rows(self, a, bottom):
        """(groups, values per group) view: one row per item or per (item, channel)."""
        b = bottom[0]
        groups = b.num if self.layer_param.mvn_param.across_channels else b.num * b.channels
        return a.reshape(groups, -1) if groups else a.reshape(0, 0)

    def _row_sums(self, a, alpha=1.0):
        """Each row's sum times alpha (Caffe's gemv with alpha, in the data's type): on the host
        in OpenBLAS's order (compiled where it can), on a device by its own reduction."""
        alpha = a.dtype.type(alpha)
        if self.xp is numpy and a.size:
            if jit.usable(a):
                return caffe_gemv_jit.row_totals(a, alpha, numpy.empty(a.shape[0], a.dtype))
            return caffe_gemv.row_totals(a, alpha)
        return a.sum(axis=1) * alpha

    def forward(self, bottom, top):
        p = self.layer_param.mvn_param
        x = self._rows(bottom[0].data, bottom)
        dim = x.shape[1]
        centered = x - self._row_sums(x, 1.0 / max(dim, 1)).reshape(-1, 1)
        if p.normalize_variance:
            var = self._row_sums(centered * centered, 1.0 / max(dim, 1))
            self.std = (self.xp.sqrt(var) + p.eps).reshape(-1, 1)
            centered = centered / self.std
        self._rows(top[0].data, bottom)[...] = centered

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        p = self.layer_param.mvn_param
        # Caffe's sequence of steps on the bottom diff; in place that buffer is also the top
        # diff, which Caffe overwrites part way (reproduced by following the same steps).
        dy = self._rows(top[0].diff, bottom)
        g = self._rows(bottom[0].diff, bottom)
        dim = max(dy.shape[1], 1)
        if p.normalize_variance:
            y = self._rows(top[0].data, bottom)
            g[...] = y * dy
            g[...] = self._row_sums(g).reshape(-1, 1)
            g *= y
            g += self._row_sums(dy).reshape(-1, 1)
            g *= -1.0 / dim   # Caffe's axpby: scale, then add (in place, dy is g)
            g += dy
            g /= self.std
        else:
            g[...] = dy - self._row_sums(dy, 1.0 / dim).reshape(-1, 1)
