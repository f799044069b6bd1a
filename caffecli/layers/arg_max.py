"""ArgMax: the top-k indices (and values) per item or along an axis (Caffe's argmax_layer)."""
from ..kernels import device
from ..layer import Layer
from ..registry import register_layer


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

    def forward_gpu(self, bottom, top):
        """One kernel ranks each row (kernels/cuda/argmax.cu) where the array code sorts it."""
        b, xp = bottom[0], self.xp
        if not device.usable(xp, b.data):
            return self.forward(bottom, top)
        if self.has_axis:
            outer, dim, inner = b.count(0, self.axis), b.shape[self.axis], b.count(self.axis + 1)
        else:
            outer, dim, inner = b.shape[0], b.count(1), 1
        picks = (outer, self.top_k, inner)
        idx = self.scratch("idx", picks, b.dtype)
        val = self.scratch("val", picks, b.dtype)
        device.launch(xp, "argmax", "argmax_top_k", outer * inner, b.dtype, b.data,
                      *device.ints(dim, inner, self.top_k), idx, val)
        if self.has_axis:
            top[0].data[...] = (val if self.out_max_val else idx).reshape(top[0].shape)
        else:
            out = top[0].data.reshape(outer, -1, self.top_k)
            out[:, 0] = idx.reshape(outer, self.top_k)
            if self.out_max_val:
                out[:, 1] = val.reshape(outer, self.top_k)

    def backward(self, top, propagate_down, bottom):
        if any(propagate_down):
            raise self.error("ArgMax has no backward pass (Not Implemented)")
