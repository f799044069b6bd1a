"""Reading HDF5 datasets for HDF5Data, and Caffe's legacy 4-D shape for HDF5Output."""
import os

import numpy

from ..errors import CaffeError
from ..util.hdf5_class import note_dataset_class
from ..util.lazy import h5py


def load_hdf5_file(filename, names, dtype):
    """The datasets ``names`` of ``filename`` as arrays of ``dtype`` (rows on axis 0)."""
    if not os.path.isfile(filename):
        raise CaffeError("%s: HDF5 file not found" % filename)
    try:
        f = h5py.File(filename, "r")
    except OSError as e:
        raise CaffeError("%s: failed opening HDF5 file (%s)" % (filename, e)) from None
    arrays = []
    with f:
        for name in names:
            ds = f.get(name)
            if not isinstance(ds, h5py.Dataset):
                raise CaffeError("%s: failed to find HDF5 dataset %s" % (filename, name))
            if ds.dtype.kind not in "fiu":
                raise CaffeError("%s: dataset %s has unsupported type %s"
                                 % (filename, name, ds.dtype))
            if ds.ndim < 1:
                raise CaffeError("%s: dataset %s must have at least 1 axis" % (filename, name))
            note_dataset_class(ds.dtype.kind)
            arrays.append(numpy.asarray(ds[()], dtype=dtype))
    num = arrays[0].shape[0]
    for name, a in zip(names, arrays):
        if a.shape[0] != num:
            raise CaffeError("%s: dataset %s has %d rows, %s has %d"
                             % (filename, name, a.shape[0], names[0], num))
    return arrays


def legacy_shape(shape):
    """Caffe's (num, channels, height, width) view of a blob of at most 4 axes."""
    if len(shape) > 4:
        raise CaffeError("cannot use legacy accessors on a blob of %d axes" % len(shape))
    return tuple(shape) + (1,) * (4 - len(shape))
