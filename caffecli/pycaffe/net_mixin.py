"""pycaffe's Net surface (net.blobs, net.params, net.forward(**inputs), ...) as a mixin of Net.

Behaves as BVLC's python/caffe/pycaffe.py: forward/backward take layer names for start/end and
return {blob name: array}; arrays handed back are numpy (host) arrays, as pycaffe's are.
"""
import collections

import numpy

from .. import backend
from ..errors import CaffeError


class PyBlob:
    """A Blob as pycaffe shows it: ``data``/``diff`` are host (numpy) arrays, written in place."""

    __slots__ = ("_blob",)

    def __init__(self, blob):
        object.__setattr__(self, "_blob", blob)

    @property
    def data(self):
        return self._blob.host_data

    @data.setter
    def data(self, value):
        self._blob.host_data[...] = value

    @property
    def diff(self):
        return self._blob.host_diff

    @diff.setter
    def diff(self, value):
        self._blob.host_diff[...] = value

    def reshape(self, *shape):
        self._blob.reshape(*shape)

    def __getattr__(self, name):
        return getattr(self._blob, name)

    def __repr__(self):
        return "PyBlob(%s)" % self._blob.shape_string()


class PycaffeNetMixin:
    """Methods pycaffe users call on caffe.Net; the engine's own methods live in net.Net."""

    # ---- containers --------------------------------------------------------------------
    @property
    def blobs(self):
        """Ordered blob name -> blob, whose ``data``/``diff`` are host arrays (on the GPU, host
        writes reach the device before the next forward)."""
        return collections.OrderedDict(zip(self.blob_names, map(PyBlob, self._blobs)))

    @property
    def params(self):
        """Ordered layer name -> list of parameter Blobs (layers with parameters only)."""
        return collections.OrderedDict(
            (n, [PyBlob(b) for b in l.blobs])
            for n, l in zip(self.layer_names, self.layers) if l.blobs)

    @property
    def layer_dict(self):
        """Ordered layer name -> layer."""
        return collections.OrderedDict(zip(self.layer_names, self.layers))

    @property
    def _blob_names(self):
        return list(self.blob_names)

    @property
    def _layer_names(self):
        return list(self.layer_names)

    @property
    def _inputs(self):
        return list(self.input_blob_indices)

    @property
    def _outputs(self):
        return list(self.output_blob_indices)

    @property
    def inputs(self):
        """Names of the input blobs (tops of Input layers), in order."""
        return self.input_names

    @property
    def outputs(self):
        """Names of the output blobs (produced and never consumed), in Caffe's order."""
        return self.output_names

    @property
    def top_names(self):
        return collections.OrderedDict(
            (n, [self.blob_names[i] for i in ids])
            for n, ids in zip(self.layer_names, self.top_id_vecs))

    @property
    def bottom_names(self):
        return collections.OrderedDict(
            (n, [self.blob_names[i] for i in ids])
            for n, ids in zip(self.layer_names, self.bottom_id_vecs))

    # ---- running -----------------------------------------------------------------------
    def _layer_index(self, name):
        if name not in self.layer_names_index:
            raise KeyError("no layer named %r (layers: %s)" % (name, ", ".join(self.layer_names)))
        return self.layer_names_index[name]

    def _forward(self, start, end):
        return self.forward_from_to(start, end)

    def _backward(self, start, end):
        self.backward_from_to(start, end)

    def forward(self, blobs=None, start=None, end=None, **kwargs):
        """Forward from layer ``start`` to ``end`` (names, inclusive) after copying ``kwargs``
        arrays into the input blobs; return {name: data} for the outputs (or ``end``) plus
        ``blobs``."""
        blobs = list(blobs or [])
        start_ind = self._layer_index(start) if start is not None else 0
        if end is not None:
            end_ind = self._layer_index(end)
            outputs = set([end] + blobs)
        else:
            end_ind = len(self.layers) - 1
            outputs = set(self.outputs + blobs)
        if kwargs:
            if set(kwargs) != set(self.inputs):
                raise Exception("Input blob arguments do not match net inputs.")
            for name, array in kwargs.items():
                blob = self.blob_by_name(name)
                if array.shape[0] != blob.shape[0]:
                    raise Exception("Input is not batch sized")
                blob.data[...] = backend.to_device(array)
        self._forward(start_ind, end_ind)
        return {out: self.blob_by_name(out).host_data for out in outputs}

    def backward(self, diffs=None, start=None, end=None, **kwargs):
        """Backward from layer ``start`` down to ``end`` after copying ``kwargs`` arrays into
        the output blobs' diffs; return {name: diff} for the inputs (or ``end``) plus ``diffs``."""
        diffs = list(diffs or [])
        start_ind = self._layer_index(start) if start is not None else len(self.layers) - 1
        if end is not None:
            end_ind = self._layer_index(end)
            outputs = set([end] + diffs)
        else:
            end_ind = 0
            outputs = set(self.inputs + diffs)
        if kwargs:
            if set(kwargs) != set(self.outputs):
                raise Exception("Top diff arguments do not match net outputs.")
            for name, array in kwargs.items():
                blob = self.blob_by_name(name)
                if array.shape[0] != blob.shape[0]:
                    raise Exception("Diff is not batch sized")
                blob.diff[...] = backend.to_device(array)
        self._backward(start_ind, end_ind)
        return {out: self.blob_by_name(out).host_diff for out in outputs}

    def set_input_arrays(self, data, labels):
        """Feed a MemoryData first layer (pycaffe's Net.set_input_arrays): 4-D float32
        C-contiguous data and labels of shape N or N x 1 x 1 x 1."""
        first = self.layers[0] if self.layers else None
        if first is None or first.type != "MemoryData":
            raise CaffeError("set_input_arrays may only be called if the first layer is a "
                             "MemoryData layer (net %s starts with %s)"
                             % (self.name, first.type if first else "no layer"))
        for what, array in (("data", data), ("labels", labels)):
            if not (isinstance(array, numpy.ndarray) and array.dtype == numpy.float32
                    and array.flags.c_contiguous):
                raise CaffeError("set_input_arrays: %s must be a C-contiguous float32 numpy "
                                 "array" % what)
        if data.ndim != 4:
            raise CaffeError("set_input_arrays: data must be 4-D, got shape %s" % (data.shape,))
        first.set_input_arrays(data, labels)

    def forward_all(self, blobs=None, **kwargs):
        """Run forward over inputs of any length in batch-sized chunks; return the full
        outputs (plus ``blobs``) concatenated, padding of the last chunk dropped."""
        all_outs = {out: [] for out in set(self.outputs + list(blobs or []))}
        for batch in self._batches(kwargs):
            outs = self.forward(blobs=blobs, **{k: v for k, v in batch.items()})
            for out, arr in outs.items():
                all_outs[out].extend(arr.copy())
        n = len(next(iter(kwargs.values()))) if kwargs else None
        result = {}
        for out, rows in all_outs.items():
            arr = numpy.asarray(rows)
            result[out] = arr[:n] if n is not None else arr
        return result

    def _batches(self, inputs):
        """Chunks of ``inputs`` the size of the net's batch, the last one zero-padded."""
        if not inputs:
            yield {}
            return
        num = len(next(iter(inputs.values())))
        batch = self.blob_by_name(next(iter(inputs))).shape[0]
        for b in range(0, num, batch):
            chunk = {}
            for name, arr in inputs.items():
                part = numpy.asarray(arr[b:b + batch])
                if len(part) < batch:
                    pad = numpy.zeros((batch - len(part),) + part.shape[1:], dtype=part.dtype)
                    part = numpy.concatenate([part, pad])
                chunk[name] = part
            yield chunk

    # ---- weights -----------------------------------------------------------------------
    def copy_from(self, path):
        """Load trained weights (.caffemodel or .caffemodel.h5) by layer name."""
        self.copy_trained_layers_from(path)

    def share_with(self, other):
        """Use ``other``'s parameter storage for layers with the same name."""
        self.share_trained_layers_with(other)
