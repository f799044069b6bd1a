"""MemoryData: batches cut from arrays the program supplies (Caffe's memory_data_layer.cpp).

``set_input_arrays(data, labels)`` / ``reset`` hand over N items (N a multiple of batch_size;
no transform, as Caffe's Reset); ``add_datum_vector`` transforms Datums first. Forward walks
the items batch by batch and wraps around.
"""
import numpy

from .. import backend, glog
from ..data import datum as datum_mod
from ..data.transformer import DataTransformer
from ..layer import Layer
from ..registry import register_layer


@register_layer("MemoryData")
class MemoryDataLayer(Layer):
    """Batches of user-supplied host arrays (the next layer takes them to the device)."""

    device_code = False
    exact_num_bottom_blobs = 0
    exact_num_top_blobs = 2

    def setup(self, bottom, top):
        p = self.layer_param.memory_data_param
        self.batch_size, self.channels = int(p.batch_size), int(p.channels)
        self.height, self.width = int(p.height), int(p.width)
        if self.batch_size * self.channels * self.height * self.width <= 0:
            raise self.error("batch_size, channels, height, and width must be specified and "
                             "positive in memory_data_param")
        self.transformer = DataTransformer(self.layer_param.transform_param, self.phase,
                                           what="Layer %s (MemoryData)" % self.name)
        top[0].reshape((self.batch_size, self.channels, self.height, self.width))
        top[1].reshape((self.batch_size,))
        self.data = self.labels = None
        self.n = self.pos = 0
        self.has_new_data = False

    @property
    def item_shape(self):
        return (self.channels, self.height, self.width)

    def reset(self, data, labels, n=None):
        """Use ``data`` (N x C x H x W) and ``labels`` (N) from the next forward pass on."""
        data = numpy.asarray(backend.to_host(data))
        labels = numpy.asarray(backend.to_host(labels))
        n = data.shape[0] if n is None else int(n)
        if data.ndim != 4 or tuple(data.shape[1:]) != self.item_shape:
            raise self.error("data array has shape %s, expected N x %d x %d x %d"
                             % (data.shape, self.channels, self.height, self.width))
        if labels.size != data.shape[0] or labels.shape[0] != data.shape[0]:
            raise self.error("labels array has shape %s for %d data items"
                             % (labels.shape, data.shape[0]))
        if n <= 0 or n % self.batch_size:
            raise self.error("the number of items (%d) must be a positive multiple of the "
                             "batch size %d" % (n, self.batch_size))
        if self.layer_param.HasField("transform_param"):   # a memory array is used as it is
            glog.warning("memory_data.no_transform",
                         "MemoryData does not transform array data on Reset()")
        self.data = numpy.ascontiguousarray(data[:n])
        self.labels = numpy.ascontiguousarray(labels.reshape(-1)[:n])
        self.n, self.pos = n, 0

    def set_input_arrays(self, data, labels):
        """pycaffe's Net.set_input_arrays for this layer (labels N or N x 1 x 1 x 1)."""
        self.reset(data, labels)

    def add_datum_vector(self, datums):
        """Transform Datums (Caffe's AddDatumVector) and use them as the next data."""
        if self.has_new_data:
            raise self.error("can't add data until current data has been consumed")
        if not datums or len(datums) % self.batch_size:
            raise self.error("the added data must be a non-empty multiple of the batch size")
        arrays = [datum_mod.to_array(d) for d in datums]
        dtype = numpy.float32
        data = self.transformer.transform(numpy.stack(arrays), dtype)
        self.reset(data, numpy.asarray([d.label for d in datums], dtype=dtype))
        self.has_new_data = True

    def set_batch_size(self, new_size):
        if self.has_new_data:
            raise self.error("can't change batch_size until current data has been consumed")
        self.batch_size = int(new_size)

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        if self.data is None:
            raise self.error("MemoryData needs to be initialized by calling set_input_arrays "
                             "(reset) first")
        b = self.batch_size
        top[0].reshape((b,) + self.item_shape)
        top[1].reshape((b, 1, 1, 1))
        top[0].data[...] = self.data[self.pos:self.pos + b]
        top[1].data[...] = self.labels[self.pos:self.pos + b].reshape(b, 1, 1, 1)
        self.pos = (self.pos + b) % self.n
        if self.pos == 0:
            self.has_new_data = False

    def get_data_state(self):
        return {"pos": int(self.pos)}

    def set_data_state(self, state):
        self.pos = int(state["pos"])
