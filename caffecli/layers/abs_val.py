"""AbsVal: |x| (Caffe's absval_layer); one compiled pass each way on the host
(kernels/abs_jit.py)."""
from ..kernels import abs_jit, jit
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("AbsVal")
class AbsValLayer(NeuronLayer):
    """|x|; Caffe refuses in-place use (backward needs the sign of the input)."""

    def setup(self, bottom, top):
        if top[0] is bottom[0]:
            raise self.error("AbsVal Layer does not allow in-place computation.")

    def forward(self, bottom, top):
        x, y = bottom[0].data, top[0].data
        if jit.usable(x, y):
            abs_jit.forward(x, y)
            return
        self.xp.abs(x, out=y)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x, dy, dx = bottom[0].data, top[0].diff, bottom[0].diff
        if jit.usable(x, dy, dx):
            abs_jit.backward(x, dy, dx)
            return
        # Caffe's caffe_sign: (0 < x) - (x < 0), so 0 (not NaN) for a NaN input
        sign = (x > 0).astype(x.dtype) - (x < 0).astype(x.dtype)
        self.xp.multiply(sign, dy, out=dx)
