"""EuclideanLoss: sum((a - b)^2) / (2 num) (Caffe's euclidean_loss_layer)."""
import numpy

from ..kernels import caffe_blas
from ..layer import LossLayer
from ..registry import register_layer
from ._loss import loss_weight


def _sum_of_squares(flat):
    """flat . flat: caffe_cpu_dot on the host (OpenBLAS's sdot order, kernels/caffe_blas.py), a
    reduction on the device, which a CUDA graph can record (cupy refuses cuBLAS's dot while a
    stream captures)."""
    return caffe_blas.dot(flat, flat)


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
        top[0].data[...] = _sum_of_squares(flat) / dt.type(bottom[0].num) / dt.type(2)

    def backward(self, top, propagate_down, bottom):
        dt = numpy.dtype(bottom[0].dtype)
        for i, sign in ((0, 1), (1, -1)):
            if propagate_down[i]:
                alpha = dt.type(sign) * loss_weight(top) / dt.type(bottom[i].num)
                bottom[i].diff[...] = (self.diff * alpha).reshape(bottom[i].shape)
