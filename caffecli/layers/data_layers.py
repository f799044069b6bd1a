"""Prefetching data layers: Data (LMDB/LevelDB Datums) and ImageData (an image list).

As Caffe's BasePrefetchingDataLayer, a background thread fills up to ``data_param.prefetch``
batches ahead and forward copies the next one into the tops. ``get_data_state`` reports the
source position after the last batch forward handed out (not the read-ahead), so a solver can
save it and ``set_data_state`` resumes at exactly the next unseen record.
"""
import weakref

import numpy

from .. import context, glog
from ..data.prefetch import Prefetcher
from ..data.sources import DBSource, ImageListSource, read_image_list
from ..data.transformer import DataTransformer
from ..errors import CaffeError
from ..layer import Layer
from ..proto import caffe_pb2
from ..registry import register_layer


def _shutdown(prefetcher, source):
    prefetcher.stop()
    source.close()


class PrefetchingDataLayer(Layer):
    """Base: subclasses build ``self.source`` in ``make_source(top)``. Batches are made on the
    host; the next layer takes them to the device, as Caffe's Forward_gpu copies them."""

    device_code = False
    exact_num_bottom_blobs = 0
    min_top_blobs = 1
    max_top_blobs = 2

    def setup(self, bottom, top):
        self.output_labels = len(top) > 1
        self.transformer = DataTransformer(self.layer_param.transform_param, self.phase,
                                           what="Layer %s (%s)" % (self.name, self.type))
        dtype = numpy.dtype(top[0].dtype)
        try:
            self.source = self.make_source(top, dtype)
            shape = list(self.source.first_shape())
        except CaffeError as e:
            raise self.error(str(e)) from None
        shape[0] = self.source.batch_size
        top[0].reshape(shape)
        if self.output_labels:
            top[1].reshape((self.source.batch_size,))
        glog.info(self.log_where, "output data size: %s" % ",".join(
            str(d) for d in (list(shape) + [1] * 4)[:4]))
        self._state = self.source.get_state()
        self.prefetcher = Prefetcher(self.source.next_batch,
                                     capacity=self.layer_param.data_param.prefetch,
                                     name="%s prefetch" % self.name)
        self._finalizer = weakref.finalize(self, _shutdown, self.prefetcher, self.source)

    log_where = "data_layer.cpp:45"

    def make_source(self, top, dtype):
        raise NotImplementedError

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        try:
            tops, self._state = self.prefetcher.get()
        except CaffeError as e:
            raise self.error(str(e)) from None
        for blob, arr in zip(top, tops):
            if blob.shape != arr.shape:
                blob.reshape(arr.shape)
            blob.data[...] = arr

    def get_data_state(self):
        """Where the next forward pass starts reading (JSON-friendly)."""
        return self._state

    def set_data_state(self, state):
        """Resume the source at ``state`` (dropping batches already read ahead)."""
        self.prefetcher.stop()
        self.source.set_state(state)
        self._state = self.source.get_state()

    def close(self):
        """Stop the prefetch thread and release the source now."""
        self._finalizer()


@register_layer("Data")
class DataLayer(PrefetchingDataLayer):
    """Datum records from an LMDB or LevelDB database (data_param)."""

    def make_source(self, top, dtype):
        p = self.layer_param.data_param
        if not p.source:
            raise self.error("data_param.source is not set")
        tp = self.layer_param.transform_param
        backend_name = "lmdb" if p.backend == p.LMDB else "leveldb"
        # data-parallel ranks read disjoint records in TRAIN; only the root tests
        share = (context.solver_rank(), context.solver_count()) \
            if self.phase == caffe_pb2.TRAIN else (0, 1)
        source = DBSource(p.source, backend_name, p.batch_size, self.transformer, dtype,
                          self.output_labels, force_color=tp.force_color,
                          force_gray=tp.force_gray, rand_skip=p.rand_skip, share=share)
        glog.info("db_%s.cpp:%d" % (backend_name, 35 if backend_name == "lmdb" else 18),
                  "Opened %s %s" % (backend_name, p.source))
        return source


@register_layer("ImageData")
class ImageDataLayer(PrefetchingDataLayer):
    """Images listed in ``image_data_param.source`` ("path label" lines), decoded by OpenCV."""

    exact_num_top_blobs = 2
    min_top_blobs = -1
    max_top_blobs = -1
    log_where = "image_data_layer.cpp:90"

    def make_source(self, top, dtype):
        p = self.layer_param.image_data_param
        glog.info("image_data_layer.cpp:38", "Opening file " + p.source)
        lines = read_image_list(p.source)
        if p.shuffle:
            glog.info("image_data_layer.cpp:53", "Shuffling data")
        glog.info("image_data_layer.cpp:63", "A total of %d images." % len(lines))
        return ImageListSource(lines, p.root_folder, p.batch_size, self.transformer, dtype,
                               new_height=p.new_height, new_width=p.new_width,
                               is_color=p.is_color, shuffle=p.shuffle, rand_skip=p.rand_skip,
                               what="Layer %s (ImageData)" % self.name)
