"""Loading and saving trained weights: binary .caffemodel and HDF5 .caffemodel.h5 (Caffe's layout).

HDF5 layout (Caffe's ToHDF5): group ``data/<layer name>/<i>`` holds parameter blob i of that
layer; ``diff/...`` the same for gradients when written.
"""
import io
import os

import numpy

from .blob import shape_string
from .errors import CaffeError, first_line
from .proto.caffemodel import open_caffemodel
from .proto.io import write_binary, write_bytes_atomic
from .util.hdf5_class import note_dataset_class
from .util.lazy import h5py


def is_hdf5(path):
    try:
        with open(path, "rb") as f:
            return f.read(8) == b"\x89HDF\r\n\x1a\n"
    except FileNotFoundError:
        raise CaffeError("%s: weights file not found" % path) from None


def load_weights(net, path):
    """Copy the parameters in ``path`` into ``net`` by layer name, shape-checked."""
    if not os.path.exists(path):
        raise CaffeError("%s: weights file not found" % path)
    if os.path.isfile(path) and os.path.getsize(path) == 0:
        raise CaffeError("%s: weights file is empty (0 bytes)" % path)
    if is_hdf5(path):
        _load_hdf5(net, path)
    else:
        with open_caffemodel(path) as (param, values):
            net.copy_from_net_param(param, path, values)


def _load_hdf5(net, path):
    try:
        with h5py.File(path, "r") as f:
            data = f.get("data")
            if not isinstance(data, h5py.Group):
                raise CaffeError("%s: HDF5 weights file has no 'data' group" % path)
            for lname in data:
                _load_hdf5_layer(net, path, lname, data[lname])
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:  # corrupt HDF5
        raise CaffeError("%s: cannot read HDF5 weights (corrupt or truncated: %s)"
                         % (path, first_line(exc))) from None


def _load_hdf5_layer(net, path, lname, group):
    """Copy ``data/<lname>/<j>`` into layer ``lname``'s blob j (Caffe's CopyTrainedLayersFromHDF5)."""
    lid = net.layer_names_index.get(lname)
    if lid is None:
        net._info("net.ignoring_source_layer_h5", "Ignoring source layer " + lname)
        return
    if not isinstance(group, h5py.Group):
        raise CaffeError("%s: data/%s is not a group of parameter blobs" % (path, lname))
    target = net.layers[lid].blobs
    if len(group) > len(target):
        raise CaffeError("%s: incompatible number of blobs for layer %s (net has %d, "
                         "file has %d)" % (path, lname, len(target), len(group)))
    for j, blob in enumerate(target):
        key = str(j)
        if key not in group:
            # Caffe: a missing dataset is fine only for a shared, non-owned param.
            if net.is_shared_param(lid, j):
                continue
            raise CaffeError("%s: layer %s has no parameter blob %d" % (path, lname, j))
        dataset = group[key]
        if not isinstance(dataset, h5py.Dataset):
            raise CaffeError("%s: data/%s/%s is not a dataset" % (path, lname, key))
        arr = numpy.asarray(dataset[()])
        note_dataset_class(arr.dtype.kind)
        if arr.dtype.kind not in "fiu":
            raise CaffeError("%s: data/%s/%s holds %s, not numbers" % (path, lname, key,
                                                                      arr.dtype))
        if tuple(arr.shape) != blob.shape:
            raise CaffeError(
                "%s: cannot copy param %d weights from layer '%s'; shape mismatch.  "
                "Source param shape is %s; target param shape is %s"
                % (path, j, lname, shape_string(arr.shape), blob.shape_string()))
        blob.data = arr


def save_weights(net, path, write_diff=False):
    """Write ``net``'s parameters to ``path``: HDF5 when it ends in .h5, else binary proto."""
    if path.endswith(".h5"):
        save_hdf5(net, path, write_diff)
    else:
        write_binary(path, net.to_proto(write_diff))


def save_hdf5(net, path, write_diff=False):
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        data = f.create_group("data")
        diff = f.create_group("diff") if write_diff else None
        seen = set()
        for lid, (name, layer) in enumerate(zip(net.layer_names, net.layers)):
            if name in seen:   # (Caffe's H5Gcreate fails on a second group of one name)
                continue
            seen.add(name)
            g = data.create_group(name)   # every layer has its groups, as in Caffe's ToHDF5
            dg = diff.create_group(name) if diff is not None else None
            for j, blob in enumerate(layer.blobs):
                if not net.is_shared_param(lid, j):   # values once, by their owner
                    g.create_dataset(str(j), data=blob.cpu_data())
                if dg is not None:   # diffs for every layer's params, shared ones too
                    dg.create_dataset(str(j), data=blob.cpu_diff())
    write_bytes_atomic(path, buf.getvalue())
