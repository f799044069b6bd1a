"""Reduction: SUM, ASUM, SUMSQ or MEAN over the trailing axes (Caffe's reduction_layer)."""
import numpy

from ..kernels import caffe_blas
from ..layer import Layer
from ..proto import caffe_pb2
from ..registry import register_layer

_R = caffe_pb2.ReductionParameter
_OPS = {_R.SUM: "SUM", _R.ASUM: "ASUM", _R.SUMSQ: "SUMSQ", _R.MEAN: "MEAN"}


@register_layer("Reduction")
class ReductionLayer(Layer):
    """Reduces every axis from ``axis`` on to one scaled value; top shape = bottom[:axis]."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        self.op = self.layer_param.reduction_param.operation
        if self.op not in _OPS:
            raise self.error("Unknown reduction op: %d" % self.op)

    def reshape(self, bottom, top):
        p = self.layer_param.reduction_param
        b = bottom[0]
        n = b.num_axes
        if not -n <= p.axis < n:
            raise self.error("axis %d out of range for %d-D bottom with shape %s"
                             % (p.axis, n, b.shape_string()))
        self.axis = p.axis + n if p.axis < 0 else p.axis
        top[0].reshape(b.shape[:self.axis])
        self.num = b.count(0, self.axis)
        self.dim = b.count(self.axis)
        coeff = b.dtype.type(p.coeff)
        if self.op == _R.MEAN:
            coeff = coeff / b.dtype.type(self.dim)  # Caffe folds 1/dim into the coefficient
        self.coeff = b.dtype.type(coeff)

    def forward(self, bottom, top):
        x = bottom[0].data.reshape(self.num, self.dim)
        r = top[0].data.reshape(self.num)
        if self.xp is not numpy:
            if self.op in (_R.SUM, _R.MEAN):
                r[...] = x.sum(axis=1)
            elif self.op == _R.ASUM:
                r[...] = self.xp.abs(x).sum(axis=1)
            else:
                r[...] = (x * x).sum(axis=1)
        else:   # Caffe's caffe_cpu_dot / caffe_cpu_asum of each row (kernels/caffe_blas.py)
            ones = numpy.ones(self.dim, x.dtype) if self.op in (_R.SUM, _R.MEAN) else None
            for i in range(self.num):
                row = x[i]
                r[i] = (caffe_blas.asum(row) if self.op == _R.ASUM else
                        caffe_blas.dot(ones if ones is not None else row, row))
        if self.coeff != 1:
            r *= self.coeff

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        scale = (top[0].diff.reshape(self.num, 1) * self.coeff)
        d = bottom[0].diff.reshape(self.num, self.dim)
        if self.op in (_R.SUM, _R.MEAN):
            d[...] = scale
        elif self.op == _R.ASUM:
            d[...] = self.xp.sign(bottom[0].data.reshape(self.num, self.dim)) * scale
        else:
            d[...] = bottom[0].data.reshape(self.num, self.dim) * (scale * d.dtype.type(2))
