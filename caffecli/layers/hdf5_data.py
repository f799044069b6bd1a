"""HDF5Data: rows of the datasets named after the tops, from the files a text file lists.

It reads in Forward without a thread, crossing file boundaries row by row as Caffe does: at the
end of a file it loads the next one, at the end of the list it loops to the first. In TRAIN,
data-parallel ranks deal the rows as Caffe's HDF5DataLayer::Skip does: rank r of n keeps the rows
whose running offset is r modulo n, counting on across files and the loop.
"""
import os

import numpy

from .. import caffe_rng, context, glog
from ..errors import CaffeError
from ..layer import Layer
from ..proto import caffe_pb2
from ..registry import register_layer
from ._hdf5 import load_hdf5_file


@register_layer("HDF5Data")
class HDF5DataLayer(Layer):
    """Rows of the listed HDF5 files, read on the host (the next layer takes them to the device)."""

    device_code = False
    exact_num_bottom_blobs = 0
    min_top_blobs = 1

    def setup(self, bottom, top):
        if self.layer_param.HasField("transform_param"):
            raise self.error("HDF5Data does not transform data")
        p = self.layer_param.hdf5_data_param
        self.batch_size = int(p.batch_size)
        if self.batch_size <= 0:
            raise self.error("hdf5_data_param.batch_size must be positive")
        self.shuffle = bool(p.shuffle)
        self.names = list(self.layer_param.top)
        self.dtype = numpy.dtype(top[0].dtype)
        glog.info("hdf5_data.loading_list", "Loading list of HDF5 filenames from: " + p.source)
        if not os.path.isfile(p.source):
            raise self.error("failed to open source file %s" % p.source)
        with open(p.source) as f:
            self.filenames = f.read().split()
        glog.info("hdf5_data.files", "Number of HDF5 files: %d" % len(self.filenames))
        if not self.filenames:
            raise self.error("must have at least 1 HDF5 filename listed in %s" % p.source)
        self.file_perm = numpy.arange(len(self.filenames))
        if self.shuffle:
            caffe_rng.c_rand.random_shuffle(self.file_perm)
        self.current_file = 0
        self._load(self.current_file)
        self.current_row = 0
        self.row_shapes = [a.shape[1:] for a in self.arrays]
        self.rank, self.count = context.data_share(self.phase == caffe_pb2.TRAIN)
        self.offset = 0
        self._skip_others()
        for t, a in zip(top, self.arrays):
            t.reshape((self.batch_size,) + a.shape[1:])

    def _load(self, file_pos, data_perm=None):
        name = self.filenames[self.file_perm[file_pos]]
        try:
            self.arrays = load_hdf5_file(name, self.names, self.dtype)
        except CaffeError as e:
            raise self.error(str(e)) from None
        shapes = getattr(self, "row_shapes", None)
        if shapes is not None:
            for n, a, s in zip(self.names, self.arrays, shapes):
                if a.shape[1:] != s:
                    raise self.error("%s: dataset %s rows have shape %s, the first file's %s"
                                     % (name, n, a.shape[1:], s))
        rows = self.arrays[0].shape[0]
        if rows == 0:
            raise self.error("%s: dataset %s has no rows" % (name, self.names[0]))
        if data_perm is not None:
            self.data_perm = numpy.asarray(data_perm, dtype=numpy.int64)
        else:
            self.data_perm = numpy.arange(rows)
            if self.shuffle:
                caffe_rng.c_rand.random_shuffle(self.data_perm)

    def _end_of_file(self):
        """Caffe's Next() at the last row: next file (or loop), reshuffle as configured."""
        if len(self.filenames) > 1:
            self.current_file += 1
            if self.current_file == len(self.filenames):
                self.current_file = 0
                if self.shuffle:
                    caffe_rng.c_rand.random_shuffle(self.file_perm)
            self._load(self.current_file)
        self.current_row = 0
        if self.shuffle:
            caffe_rng.c_rand.random_shuffle(self.data_perm)

    def reshape(self, bottom, top):
        pass

    def _advance(self, n):
        """Move ``n`` rows on (Caffe's Next() n times), across file ends."""
        while n:
            step = min(n, self.arrays[0].shape[0] - self.current_row)
            self.current_row += step
            self.offset += step
            n -= step
            if self.current_row == self.arrays[0].shape[0]:
                self._end_of_file()

    def _skip_others(self):
        """Move to this rank's next row, so a saved state (the root's too) points at it."""
        self._advance((self.rank - self.offset) % self.count)

    def forward(self, bottom, top):
        filled, count = 0, self.count
        while filled < self.batch_size:
            # this rank's rows left in the file: current_row, current_row + count, ...
            left = -(-(self.arrays[0].shape[0] - self.current_row) // count)
            k = min(self.batch_size - filled, left)
            last = self.current_row + count * (k - 1)
            idx = self.data_perm[self.current_row:last + 1:count]
            for t, a in zip(top, self.arrays):
                t.data[filled:filled + k] = a[idx]
            filled += k
            self._advance(last + 1 - self.current_row)
            self._skip_others()

    def get_data_state(self):
        return {"file": int(self.current_file), "row": int(self.current_row),
                "offset": int(self.offset), "file_perm": self.file_perm.copy(),
                "data_perm": self.data_perm.copy()}

    def set_data_state(self, state):
        perm = numpy.asarray(state["file_perm"], dtype=numpy.int64)
        if perm.shape != self.file_perm.shape:
            raise self.error("saved state lists %d files, the source has %d"
                             % (perm.size, self.file_perm.size))
        self.file_perm = perm
        self.current_file = int(state["file"])
        self._load(self.current_file, state["data_perm"])
        self.current_row = int(state["row"])
        self.offset = int(state.get("offset", 0))
        self._skip_others()
