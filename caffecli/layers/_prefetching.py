"""Base of the prefetching data layers (Caffe's BasePrefetchingDataLayer): a background thread
fills up to ``data_param.prefetch`` batches ahead and Forward hands the next one to the tops.

``get_data_state`` reports the source position after the last batch Forward handed out (not the
read-ahead), so a solver can save it and ``set_data_state`` resumes at the next unseen record.
"""
import weakref

import numpy

from .. import glog
from ..data.prefetch import Prefetcher
from ..data.transformer import DataTransformer
from ..errors import CaffeError
from ..layer import Layer


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

    log_where = "data.output_size"

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
