"""pycaffe's Net surface (net.blobs, net.params, net.forward(**inputs), ...) as a mixin of Net."""
import collections


class PycaffeNetMixin:
    """Methods pycaffe users call on caffe.Net; the engine's own methods live in net.Net."""

    @property
    def blobs(self):
        """Ordered blob name -> Blob."""
        return collections.OrderedDict(zip(self.blob_names, self._blobs))

    @property
    def params(self):
        """Ordered layer name -> list of parameter Blobs (layers with parameters only)."""
        return collections.OrderedDict(
            (n, l.blobs) for n, l in zip(self.layer_names, self.layers) if l.blobs)
