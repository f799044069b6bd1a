"""HDF5Output: writes its two bottoms as datasets ``data`` and ``label`` (Caffe's
hdf5_output_layer)."""
from .. import glog
from ..layer import Layer
from ..registry import register_layer
from ..util.lazy import h5py
from ._hdf5 import legacy_shape


@register_layer("HDF5Output")
class HDF5OutputLayer(Layer):
    """Writes bottom 0 as ``data`` and bottom 1 as ``label`` (4-D, as Caffe) to file_name.

    The file is truncated at setup; each forward pass rewrites both datasets with its batch."""

    device_code = False
    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 0

    def setup(self, bottom, top):
        self.file_name = self.layer_param.hdf5_output_param.file_name
        if not self.file_name:
            raise self.error("hdf5_output_param.file_name is not set")
        try:
            h5py.File(self.file_name, "w").close()
        except OSError as e:
            raise self.error("failed to open HDF5 file %s (%s)" % (self.file_name, e)) from None

    def reshape(self, bottom, top):
        pass   # nothing to shape (the batch sizes are checked when written, as in Caffe)

    def forward(self, bottom, top):
        if bottom[0].num != bottom[1].num:
            raise self.error("data and label must have the same batch size (%s vs %s)"
                             % (bottom[0].shape_string(), bottom[1].shape_string()))
        glog.info("hdf5_output.saving", "Saving HDF5 file " + self.file_name)
        with h5py.File(self.file_name, "a") as f:
            for name, blob in (("data", bottom[0]), ("label", bottom[1])):
                if name in f:
                    del f[name]
                arr = blob.data.reshape(legacy_shape(blob.shape))
                f.create_dataset(name, data=arr)
        glog.info("hdf5_output.saved", "Successfully saved %d rows" % bottom[0].shape[0])

    def backward(self, top, propagate_down, bottom):
        pass
