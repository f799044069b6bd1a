"""ContrastiveLoss: the Siamese-pair loss of Hadsell et al. (Caffe's contrastive_loss_layer)."""
import numpy

from ..kernels import caffe_blas
from ..layer import LossLayer
from ..registry import register_layer
from ._loss import int_labels, loss_weight


@register_layer("ContrastiveLoss")
class ContrastiveLossLayer(LossLayer):
    """Pairs (a, b, similar): d^2 for similar pairs, max(margin - d, 0)^2 for dissimilar ones
    (legacy_version: max(margin - d^2, 0)), summed / (2 num); gradients to both features."""

    exact_num_bottom_blobs = 3

    def allow_force_backward(self, bottom_index):
        return bottom_index != 2

    def setup(self, bottom, top):
        a, b, y = bottom
        if (a.channels != b.channels or (a.height, a.width, b.height, b.width) != (1, 1, 1, 1)
                or (y.channels, y.height, y.width) != (1, 1, 1)):
            raise self.error("features must be N x C x 1 x 1 with equal C and the similarity "
                             "label N x 1 x 1 x 1 (got %s, %s, %s)"
                             % (a.shape_string(), b.shape_string(), y.shape_string()))
        p = self.layer_param.contrastive_loss_param
        self.legacy = bool(p.legacy_version)

    def reshape(self, bottom, top):
        LossLayer.reshape(self, bottom, top)
        a, b, y = bottom
        if a.count() != b.count() or y.count() < a.num:
            raise self.error("feature shapes %s and %s and label %s do not pair up"
                             % (a.shape_string(), b.shape_string(), y.shape_string()))

    def forward(self, bottom, top):
        xp = self.xp
        dt = numpy.dtype(bottom[0].dtype)
        num, ch = bottom[0].num, bottom[0].channels
        margin = dt.type(self.layer_param.contrastive_loss_param.margin)
        self.diff = (bottom[0].data.reshape(num, ch) - bottom[1].data.reshape(num, ch))
        if xp is numpy:   # each pair's caffe_cpu_dot (kernels/caffe_blas.py)
            self.dist_sq = numpy.array([caffe_blas.dot(d, d) for d in self.diff], dt)
        else:
            self.dist_sq = (self.diff * self.diff).sum(axis=1)
        self.similar = int_labels(xp, bottom[2], (-1,))[:num] != 0
        if self.legacy:
            dissimilar = xp.maximum(margin - self.dist_sq, dt.type(0))
        else:
            dissimilar = xp.maximum(margin - xp.sqrt(self.dist_sq), dt.type(0)) ** 2
        per_pair = xp.where(self.similar, self.dist_sq, dissimilar)
        # Caffe adds the pairs' terms one after another
        total = (numpy.add.accumulate(per_pair)[-1] if xp is numpy and per_pair.size
                 else per_pair.sum())
        top[0].data[...] = total / dt.type(num) / dt.type(2)

    def backward(self, top, propagate_down, bottom):
        xp = self.xp
        dt = numpy.dtype(bottom[0].dtype)
        margin = dt.type(self.layer_param.contrastive_loss_param.margin)
        num = self.diff.shape[0]
        for i, sign in ((0, 1), (1, -1)):
            if not propagate_down[i]:
                continue
            alpha = dt.type(sign) * loss_weight(top) / dt.type(num)
            if self.legacy:
                mdist = margin - self.dist_sq
                beta = -alpha * xp.ones_like(mdist)
            else:
                dist = xp.sqrt(self.dist_sq)
                mdist = margin - dist
                beta = -alpha * mdist / (dist + dt.type(1e-4))
            coeff = xp.where(self.similar, alpha, xp.where(mdist > 0, beta, dt.type(0)))
            bottom[i].diff.reshape(self.diff.shape)[...] = self.diff * coeff[:, None]
