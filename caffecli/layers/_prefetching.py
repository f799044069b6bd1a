"""Base of the prefetching data layers (Caffe's BasePrefetchingDataLayer): a background thread
fills up to ``data_param.prefetch`` batches ahead and Forward hands the next one to the tops.

``get_data_state`` reports the source position after the last batch Forward handed out (not the
read-ahead), so a solver can save it and ``set_data_state`` resumes at the next unseen record.
"""
import weakref

import numpy

from .. import backend, context, glog
from ..data.prefetch import Prefetcher
from ..data.transformer import DataTransformer
from ..errors import CaffeError
from ..layer import Layer


def _shutdown(prefetcher, source):
    prefetcher.stop()
    source.close()


class _Stager:
    """What the prefetch thread runs: the next batch from the source, moved to ``device`` (the
    one the net last ran its forward on in GPU mode; None: left on the host). Holds no reference
    to the layer, so the layer can be collected."""

    def __init__(self, produce):
        self.produce, self.device = produce, None

    def __call__(self):
        tops, state = self.produce()
        device = self.device
        if device is not None:
            tops = backend.upload(tops, device)
        return tops, state, device


class PrefetchingDataLayer(Layer):
    """Base: subclasses build ``self.source`` in ``make_source(top)``. Batches are made on the
    host; in GPU mode the prefetch thread also copies them to the device, on its own stream,
    and Forward copies one into the tops' device memory, as Caffe's Forward_gpu does."""

    device_code = False
    exact_num_bottom_blobs = 0
    min_top_blobs = 1
    max_top_blobs = 2

    def setup(self, bottom, top):
        self.output_labels = len(top) > 1
        self.transformer = DataTransformer(self.layer_param.transform_param, self.phase,
                                           what="Layer %s (%s)" % (self.name, self.type))
        dtype = numpy.dtype(top[0].dtype)
        # SetUp's _guarded names this layer in an error that does not name it already
        self.source = self.make_source(top, dtype)
        try:
            shape = list(self.source.first_shape())
        except BaseException:
            # a net that fails to build must not keep its database open (LevelDB's lock would
            # refuse the next net built on it in this process)
            self.source.close()
            raise
        shape[0] = self.source.batch_size
        top[0].reshape(shape)
        if self.output_labels:
            top[1].reshape((self.source.batch_size,))
        glog.info(self.log_where, "output data size: %s" % ",".join(
            str(d) for d in (list(shape) + [1] * 4)[:4]))
        # Caffe's BasePrefetchingDataLayer seeds the transformer's stream again, then draws
        # the prefetch thread's seed: the same words leave the rank's stream here
        self.transformer.init_rand()
        context.rng().rand()
        self._state = self.source.get_state()
        self.stager = _Stager(self.source.next_batch)
        self.prefetcher = Prefetcher(self.stager,
                                     capacity=self.layer_param.data_param.prefetch,
                                     name="%s prefetch" % self.name)
        self._finalizer = weakref.finalize(self, _shutdown, self.prefetcher, self.source)

    log_where = "data.output_size"

    def make_source(self, top, dtype):
        raise NotImplementedError

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        # batches made from now on go to the device the net runs on, in the prefetch thread;
        # one made on the other side (before a mode switch) is copied here
        self.stager.device = backend.current_device() if context.is_gpu() else None
        try:
            tops, self._state, device = self.prefetcher.get()
        except CaffeError as e:
            raise self.error(str(e)) from None
        for blob, arr in zip(top, tops):
            if blob.shape != arr.shape:
                blob.reshape(arr.shape)
            if device is None:
                blob.data[...] = arr
            else:   # a device-to-device copy into the top's own memory (Caffe's Forward_gpu)
                blob.blob.at(context.GPU, True, False).data[...] = arr

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
