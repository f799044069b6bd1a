"""ReLU: max(x, 0) + negative_slope * min(x, 0) (Caffe's relu_layer); compiled one-pass loops
on the host where they apply (kernels/relu_jit.py), one device kernel each way on the GPU
(kernels/cuda/relu.cu), numpy's passes otherwise: the reference."""
from ..kernels import device, jit, relu_jit
from ..kernels.activations import step_mask
from ..kernels.threads import for_parts
from ..layer import NeuronLayer
from ..registry import register_layer


@register_layer("ReLU")
class ReLULayer(NeuronLayer):
    """max(x, 0) + negative_slope * min(x, 0)."""

    def forward(self, bottom, top):
        x = bottom[0].data
        slope = x.dtype.type(self.layer_param.relu_param.negative_slope)
        xf, yf = x.reshape(-1), top[0].data.reshape(-1)
        if jit.usable(x, top[0].data):
            relu_jit.forward(xf, slope, None if top[0] is bottom[0] else yf)
        elif slope:
            top[0].data[...] = self.xp.maximum(x, 0) + slope * self.xp.minimum(x, 0)
        else:
            for_parts(self.xp, lambda a, b: self.xp.maximum(xf[a:b], 0, out=yf[a:b]),
                      xf.size, xf.size)

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        x = bottom[0].data  # in place: top data equals max(x,0), same sign test
        dy = top[0].diff
        slope = x.dtype.type(self.layer_param.relu_param.negative_slope)
        xf, dyf, dxf = x.reshape(-1), dy.reshape(-1), bottom[0].diff.reshape(-1)
        if jit.usable(x, dy, bottom[0].diff):
            relu_jit.backward(xf, dyf, slope, None if top[0] is bottom[0] else dxf)
            return

        def part(a, b):
            xa = xf[a:b]
            self.xp.multiply(dyf[a:b], step_mask(xa, slope) if slope else xa > 0,
                             out=dxf[a:b])
        for_parts(self.xp, part, xf.size, xf.size)

    def forward_gpu(self, bottom, top):
        x = bottom[0].data
        if not device.usable(self.xp, x):
            return self.forward(bottom, top)
        slope = x.dtype.type(self.layer_param.relu_param.negative_slope)
        device.launch(self.xp, "relu", "relu_forward", x.size, x.dtype, x, slope, top[0].data)

    def backward_gpu(self, top, propagate_down, bottom):
        x = bottom[0].data
        if not (propagate_down[0] and device.usable(self.xp, x)):
            return self.backward(top, propagate_down, bottom)
        slope = x.dtype.type(self.layer_param.relu_param.negative_slope)
        device.launch(self.xp, "relu", "relu_backward", x.size, x.dtype, x, top[0].diff, slope,
                      bottom[0].diff)
