"""Eltwise: elementwise PROD, SUM (with per-bottom coefficients) or MAX of same-shaped bottoms."""
import numpy

from ..kernels import eltwise_jit
from ..kernels.threads import split_copy, split_sum
from ..layer import Layer
from ..proto import caffe_pb2
from ..registry import register_layer

PROD = caffe_pb2.EltwiseParameter.PROD
SUM = caffe_pb2.EltwiseParameter.SUM
MAX = caffe_pb2.EltwiseParameter.MAX
FLT_MAX = float(numpy.finfo(numpy.float32).max)


@register_layer("Eltwise")
class EltwiseLayer(Layer):
    """Combines two or more bottoms elementwise, as Caffe's EltwiseLayer."""

    min_bottom_blobs = 2
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.eltwise_param
        if len(p.coeff) not in (0, len(bottom)):
            raise self.error("Eltwise Layer takes one coefficient per bottom blob "
                             "(%d coefficients, %d bottoms)" % (len(p.coeff), len(bottom)))
        if p.operation == PROD and len(p.coeff):
            raise self.error("Eltwise layer only takes coefficients for summation.")
        if p.operation not in (PROD, SUM, MAX):
            raise self.error("Unknown elementwise operation %d" % p.operation)
        self.op = p.operation
        self.coeffs = [float(c) for c in p.coeff] if len(p.coeff) else [1.0] * len(bottom)
        self.stable_prod_grad = bool(p.stable_prod_grad)
        self.mask = None

    def reshape(self, bottom, top):
        for i, b in enumerate(bottom[1:], 1):
            if b.shape != bottom[0].shape:
                raise self.error("bottoms must have the same shape: bottom[0]: %s, "
                                 "bottom[%d]: %s" % (bottom[0].shape_string(), i,
                                                     b.shape_string()))
        top[0].reshape_like(bottom[0])

    def forward(self, bottom, top):
        xp, out = self.xp, top[0].data
        if self.op == PROD:
            xp.multiply(bottom[0].data, bottom[1].data, out=out)
            for b in bottom[2:]:
                out *= b.data
        elif self.op == SUM and all(c == 1.0 for c in self.coeffs) and top[0] is not bottom[0]:
            # Caffe's 0 + a + b + ...: the first add writes the top (one pass, not three),
            # the parts on every core
            split_sum(xp, [b.data.reshape(-1) for b in bottom], out.reshape(-1))
        elif self.op == SUM:
            dtype = out.dtype
            out[...] = 0
            for c, b in zip(self.coeffs, bottom):
                out += b.data * dtype.type(c) if c != 1.0 else b.data
        elif top[0] is not bottom[0] and eltwise_jit.usable(out, *(b.data for b in bottom)):
            self.mask = self.scratch("mask", out.shape, numpy.int32)
            eltwise_jit.max_forward([b.data for b in bottom], out, self.mask)
        else:
            a, b = bottom[0].data, bottom[1].data
            if top[0] is bottom[0]:   # in place Caffe first fills the top (bottom[0]) with
                a = xp.full_like(a, -FLT_MAX)   # -FLT_MAX, so bottom[0] never wins
            first = a > b  # ties between the first two go to the second
            mask = xp.where(first, 0, 1).astype(xp.int32)
            out[...] = xp.where(first, a, b)
            for k, blob in enumerate(bottom[2:], 2):
                better = blob.data > out  # later ties keep the earlier bottom
                mask[better] = k
                out[...] = xp.where(better, blob.data, out)
            self.mask = mask

    def backward(self, top, propagate_down, bottom):
        xp, grad = self.xp, top[0].diff
        for i, b in enumerate(bottom):
            if not propagate_down[i]:
                continue
            d = b.diff
            if self.op == PROD:
                if self.stable_prod_grad:
                    others = [o for j, o in enumerate(bottom) if j != i]
                    d[...] = others[0].data
                    for o in others[1:]:
                        d *= o.data
                else:
                    xp.divide(top[0].data, b.data, out=d)
                d *= grad
            elif self.op == SUM:
                c = self.coeffs[i]
                if c == 1.0:
                    split_copy(xp, d.reshape(1, -1), grad.reshape(1, -1))
                else:
                    d[...] = grad * d.dtype.type(c)
            elif eltwise_jit.usable(self.mask, grad, d):
                eltwise_jit.max_backward(self.mask, i, grad, d)
            else:
                d[...] = xp.where(self.mask == i, grad, d.dtype.type(0))
