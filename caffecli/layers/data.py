"""Data: Datum records from an LMDB or LevelDB database, prefetched (Caffe's data_layer)."""
import os

from .. import context
from ..data import db as db_mod
from ..data.sources import DBSource
from ..proto import caffe_pb2
from ..registry import register_layer
from ._prefetching import PrefetchingDataLayer


@register_layer("Data")
class DataLayer(PrefetchingDataLayer):
    """Datum records from an LMDB or LevelDB database (data_param), from the first record:
    Caffe's Data layer no longer reads the deprecated ``rand_skip`` (ImageData still does)."""

    def __init__(self, param):
        super().__init__(param)
        p = param.data_param
        self.backend_name = db_mod.backend_name(p.backend)
        if p.source and os.path.exists(p.source):
            # Caffe's DataLayer opens its database when it is made, before the net names its
            # bottoms and tops (a missing one fails at set-up, naming the layer)
            db_mod.say_opened(self.backend_name, p.source)

    def make_source(self, top, dtype):
        p = self.layer_param.data_param
        if not p.source:
            raise self.error("data_param.source is not set")
        tp = self.layer_param.transform_param
        return DBSource(p.source, self.backend_name, p.batch_size, self.transformer, dtype,
                        self.output_labels, force_color=tp.force_color,
                        force_gray=tp.force_gray,
                        share=context.data_share(self.phase == caffe_pb2.TRAIN))
