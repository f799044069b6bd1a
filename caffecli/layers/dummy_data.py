"""DummyData: tops filled by fillers (Caffe's dummy_data_layer.cpp).

Constant fillers fill once at setup; any other filler refills on every forward pass.
"""
from .. import fillers
from ..layer import Layer
from ..proto import caffe_pb2
from ..registry import register_layer


@register_layer("DummyData")
class DummyDataLayer(Layer):
    """Tops filled on the host by fillers, as Caffe's (CPU-only) DummyData."""

    device_code = False
    exact_num_bottom_blobs = 0
    min_top_blobs = 1

    def setup(self, bottom, top):
        p = self.layer_param.dummy_data_param
        n_top, n_fill = len(top), len(p.data_filler)
        if n_fill not in (0, 1, n_top):
            raise self.error("number of data fillers must be 0, 1 or equal to the number of "
                             "tops: %d; you specified %d data fillers" % (n_top, n_fill))
        legacy = any(len(f) for f in (p.num, p.channels, p.height, p.width))
        if legacy:
            if len(p.shape):
                raise self.error("both shape and legacy fields were specified")
            for field in ("num", "channels", "height", "width"):
                n = len(getattr(p, field))
                if n not in (1, n_top):
                    raise self.error("must specify '%s' once, or once per top blob (%d); "
                                     "specified %d" % (field, n_top, n))
        elif len(p.shape) not in (1, n_top):
            raise self.error("must specify 'shape' once, or once per top blob (%d); "
                             "specified %d" % (n_top, len(p.shape)))
        if n_fill == 0:
            self.filler_params = [caffe_pb2.FillerParameter(type="constant", value=0)]
        else:
            self.filler_params = list(p.data_filler)
        for i, t in enumerate(top):
            if legacy:
                dims = [getattr(p, f)[0 if len(getattr(p, f)) == 1 else i]
                        for f in ("num", "channels", "height", "width")]
                t.reshape(dims)
            else:
                t.reshape(list(p.shape[0 if len(p.shape) == 1 else i].dim))
        self.refill = [fp.type != "constant" for fp in self.filler_params]
        # Caffe fills only the constant tops here (one Forward with refill inverted): the
        # random ones draw at each forward, and not before
        for i, t in enumerate(top):
            if not self.refill[i if len(self.refill) > 1 else 0]:
                fillers.fill(t, self._filler(i))

    def _filler(self, i):
        return self.filler_params[i if len(self.filler_params) > 1 else 0]

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        for i, t in enumerate(top):
            if self.refill[i if len(self.refill) > 1 else 0]:
                fillers.fill(t, self._filler(i))
