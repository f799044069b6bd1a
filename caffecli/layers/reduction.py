"""Reduction (SUM, ASUM, SUMSQ, MEAN over the trailing axes) and ArgMax (top-k indices/values)."""

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
        if self.op in (_R.SUM, _R.MEAN):
            r = x.sum(axis=1)
        elif self.op == _R.ASUM:
            r = self.xp.abs(x).sum(axis=1)
        else:
            r = (x * x).sum(axis=1)
        if self.coeff != 1:
            r = r * self.coeff
        top[0].data.reshape(self.num)[...] = r

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


@register_layer("ArgMax")
class ArgMaxLayer(Layer):
    """Indices (and optionally values) of the top_k largest entries per item or along ``axis``.

    Ties rank the larger index first, as Caffe's partial_sort with greater<(value, index)>.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.argmax_param
        self.out_max_val = bool(p.out_max_val)
        self.top_k = int(p.top_k)
        self.has_axis = p.HasField("axis")
        if self.top_k < 1:
            raise self.error("top k must not be less than 1.")

    def reshape(self, bottom, top):
        b = bottom[0]
        if self.has_axis:
            axis = self.layer_param.argmax_param.axis
            n = b.num_axes
            if not -n <= axis < n:
                raise self.error("axis %d out of range for %d-D bottom with shape %s"
                                 % (axis, n, b.shape_string()))
            self.axis = axis + n if axis < 0 else axis
            if self.top_k > b.shape[self.axis]:
                raise self.error("top_k (%d) must be less than or equal to the dimension of "
                                 "the axis (%d) of bottom %s"
                                 % (self.top_k, b.shape[self.axis], b.shape_string()))
            shape = list(b.shape)
            shape[self.axis] = self.top_k
        else:
            if b.num_axes < 1:
                raise self.error("needs a bottom with at least 1 axis")
            if self.top_k > b.count(1):
                raise self.error("top_k (%d) must be less than or equal to the dimension of "
                                 "the flattened bottom blob per instance (%d, bottom %s)"
                                 % (self.top_k, b.count(1), b.shape_string()))
            shape = [1] * max(b.num_axes, 3)
            shape[0] = b.shape[0]
            shape[1] = 2 if self.out_max_val else 1
            shape[2] = self.top_k
        top[0].reshape(shape)

    def _ranked(self, x):
        """Order of the last axis: descending value, larger index first on ties."""
        xp = self.xp
        order = xp.argsort(-x[..., ::-1], axis=-1, kind="stable")[..., :self.top_k]
        idx = x.shape[-1] - 1 - order
        return idx, xp.take_along_axis(x, idx, axis=-1)

    def forward(self, bottom, top):
        b, dt = bottom[0], top[0].dtype
        if self.has_axis:
            outer, dim = b.count(0, self.axis), b.shape[self.axis]
            inner = b.count(self.axis + 1)
            x = b.data.reshape(outer, dim, inner).transpose(0, 2, 1)
            idx, val = self._ranked(x)
            res = val if self.out_max_val else idx.astype(dt)
            top[0].data.reshape(outer, self.top_k, inner)[...] = res.transpose(0, 2, 1)
        else:
            num = b.shape[0]
            idx, val = self._ranked(b.data.reshape(num, -1))
            out = top[0].data.reshape(num, -1, self.top_k)
            out[:, 0] = idx.astype(dt)
            if self.out_max_val:
                out[:, 1] = val

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("ArgMax has no backward pass (Not Implemented)")
