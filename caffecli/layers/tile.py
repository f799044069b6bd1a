"""Tile: repeats the bottom along one axis (Caffe's tile_layer)."""
from ..layer import Layer
from ..registry import register_layer
from ._axes import canonical_axis


@register_layer("Tile")
class TileLayer(Layer):
    """Repeats the bottom ``tiles`` times along ``axis`` (whole blocks from axis on)."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        p = self.layer_param.tile_param
        b = bottom[0]
        self.axis = canonical_axis(self, b, p.axis)
        if not p.HasField("tiles"):
            raise self.error("Number of tiles must be specified")
        if p.tiles <= 0:
            raise self.error("Number of tiles must be positive (got %d)" % p.tiles)
        self.tiles = int(p.tiles)
        shape = list(b.shape)
        shape[self.axis] *= self.tiles
        top[0].reshape(shape)
        self.outer = b.count(0, self.axis)
        self.inner = b.count(self.axis)

    def forward(self, bottom, top):
        src = bottom[0].data.reshape(self.outer, 1, self.inner)
        top[0].data.reshape(self.outer, self.tiles, self.inner)[...] = src

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        grad = top[0].diff.reshape(self.outer, self.tiles, self.inner)
        out = bottom[0].diff.reshape(self.outer, self.inner)
        out[...] = grad[:, 0]
        for t in range(1, self.tiles):  # Caffe's order of accumulation
            out += grad[:, t]
