"""ReLU: max(x, 0) + negative_slope * min(x, 0) (Caffe's relu_layer)."""
from ..kernels.activations import step_mask
from ..kernels.threads import for_parts
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("ReLU")
class ReLULayer(NeuronLayer):
    """max(x, 0) + negative_slope * min(x, 0)."""

    def forward(self, bottom, top):
        x = bottom[0].data
        slope = self.layer_param.relu_param.negative_slope
        if slope:
            top[0].data[...] = (self.xp.maximum(x, 0)
                                + x.dtype.type(slope) * self.xp.minimum(x, 0))
        else:
            xf, yf = x.reshape(-1), top[0].data.reshape(-1)
            for_parts(self.xp, lambda a, b: self.xp.maximum(xf[a:b], 0, out=yf[a:b]),
                      xf.size, xf.size)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = bottom[0].data  # in place: top data equals max(x,0), same sign test
        dy = top[0].diff
        slope = self.layer_param.relu_param.negative_slope
        xf, dyf, dxf = x.reshape(-1), dy.reshape(-1), bottom[0].diff.reshape(-1)

        def part(a, b):
            xa = xf[a:b]
            self.xp.multiply(dyf[a:b], step_mask(xa, xa.dtype.type(slope)) if slope else xa > 0,
                             out=dxf[a:b])
        for_parts(self.xp, part, xf.size, xf.size)
