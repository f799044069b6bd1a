"""SPP: spatial pyramid pooling, each level pooled and flattened, then concatenated (Caffe's
spp_layer)."""
import math

from .. import context
from ..kernels.pooling import (PP, geometry, ave_pool, ave_pool_backward, max_pool,
                               max_pool_backward, stochastic_pool_test, stochastic_pool_train)
from ..layer import Layer
from ..proto import caffe_pb2
from ..registry import register_layer


def spp_level_geometry(layer, level, hw, pool=PP.MAX):
    """Caffe's SPP level: 2^level bins, kernel ceil(H/bins), stride = kernel, pad to cover."""
    bins = 2 ** level
    kernel, pad = [], []
    for size in hw:
        k = int(math.ceil(size / float(bins)))
        kernel.append(k)
        pad.append((k * bins - size + 1) // 2)
    if any(pad) and (pad[0] >= kernel[0] or pad[1] >= kernel[1]):
        raise layer.error("pyramid level %d over a %dx%d input needs pad %s >= kernel %s"
                          % (level, hw[0], hw[1], pad, kernel))
    if any(pad) and pool == PP.STOCHASTIC:
        raise layer.error("pyramid level %d needs padding %s, and padding is implemented "
                          "only for average and max pooling" % (level, pad))
    return geometry(kernel, kernel, pad, hw, ceil_mode=True, owner=layer)


@register_layer("SPP")
class SPPLayer(Layer):
    """Spatial pyramid pooling: each level pooled, flattened and concatenated (N, sum C*bins).

    With pyramid_height 1 the top is the single pooling output (N, C, 1, 1), as in Caffe.
    """

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.spp_param
        if p.pyramid_height < 1:
            raise self.error("pyramid_height must be at least 1")
        if p.pool not in (PP.MAX, PP.AVE, PP.STOCHASTIC):
            raise self.error("Unknown pooling method.")

    def reshape(self, bottom, top):
        b = bottom[0]
        if b.num_axes != 4:
            raise self.error("Input must have 4 axes, corresponding to (num, channels, height, "
                             "width); got %s" % b.shape_string())
        hw = b.shape[2:4]
        if hw[0] <= 0 or hw[1] <= 0:
            raise self.error("Input dimensions cannot be zero (%s)" % b.shape_string())
        p = self.layer_param.spp_param
        self.levels = [spp_level_geometry(self, lvl, hw, p.pool)
                       for lvl in range(p.pyramid_height)]
        n, c = b.shape[:2]
        if p.pyramid_height == 1:
            top[0].reshape((n, c) + tuple(self.levels[0].out_hw))
        else:
            top[0].reshape(n, sum(c * g.out_hw[0] * g.out_hw[1] for g in self.levels))

    def forward(self, bottom, top):
        xp = self.xp
        x = bottom[0].data
        pool = self.layer_param.spp_param.pool
        n = x.shape[0]
        out = top[0].data.reshape(n, top[0].count(1))
        self.args = []
        col = 0
        for g in self.levels:
            arg = None
            if pool == PP.MAX:
                y, arg = max_pool(xp, x, g)
            elif pool == PP.AVE:
                y = ave_pool(xp, x, g)
            elif self.phase == caffe_pb2.TRAIN:
                shape = x.shape[:2] + tuple(g.out_hw)
                u = context.device_rng().uniform(math.prod(shape), 0, 1, x.dtype)
                u = xp.asarray(u.reshape(shape))
                y, arg = stochastic_pool_train(xp, x, g, u)
            else:
                y = stochastic_pool_test(xp, x, g)
            self.args.append(arg)
            width = math.prod(y.shape[1:])
            out[:, col:col + width] = y.reshape(n, width)
            col += width

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        xp = self.xp
        n = bottom[0].shape[0]
        dout = top[0].diff.reshape(n, top[0].count(1))
        dx = bottom[0].diff
        col = 0
        pool = self.layer_param.spp_param.pool
        for i, (g, arg) in enumerate(zip(self.levels, self.args)):
            shape = bottom[0].shape[:2] + tuple(g.out_hw)
            width = shape[1] * shape[2] * shape[3]
            dy = dout[:, col:col + width].reshape(shape)
            col += width
            if pool == PP.AVE:
                part = ave_pool_backward(xp, dy, g, dy.dtype)
            elif arg is not None:
                part = max_pool_backward(xp, dy, arg, g, dy.dtype)
            else:
                raise self.error("STOCHASTIC pooling has no backward in TEST phase")
            if i == 0:
                dx[...] = part
            else:
                dx += part
