"""pycaffe's ``caffe.Net``: a facade over the engine's Net with pycaffe's names and semantics.

As BVLC's python/caffe/pycaffe.py: ``blobs``/``params`` are ordered dicts of Blobs whose
``data``/``diff`` are host arrays; ``forward``/``backward`` take layer names for start/end and
return {blob name: array}. What pycaffe does not name is the engine's (``net.records``, ...).
"""
import collections

import numpy

from .. import backend, glog
from ..errors import CaffeError
from ..net import Net as EngineNet
from ..proto import caffe_pb2
from ..proto.io import write_binary
from ..util.paths import as_path, is_path
from ..weights import is_hdf5, save_hdf5
from .net_batches import BatchedRuns


class EngineView:
    """A pycaffe object over an engine one (``self._engine``): what pycaffe does not name
    is read from the engine."""

    @property
    def engine(self):
        return self._engine

    def __getattr__(self, name):
        if name == "_engine":
            raise AttributeError(name)
        return getattr(self._engine, name)


class Net(EngineView, BatchedRuns):
    """``Net(network_file, phase, level=0, stages=(), weights=None)`` or pycaffe's older
    ``Net(network_file, weights, phase)``; ``Net.wrap(engine_net)`` shows an engine net this
    way. caffecli's additions: ``network_file`` may be a NetParameter, ``dtype`` (float64 for
    gradient checks) and ``log=False`` (no set-up lines)."""

    def __init__(self, network_file, *args, level=0, stages=(), weights=None,
                 dtype=numpy.float32, log=True, **kwargs):
        phase = kwargs.pop("phase", None)
        if kwargs:
            raise TypeError("Net() got unexpected keyword arguments: %s" % ", ".join(kwargs))
        args = list(args)
        if args and is_path(args[0]):           # Net(model, weights, phase)
            weights = args.pop(0)
            _warn_legacy_constructor(network_file, weights, args[0] if args else phase)
        if args:
            phase = args.pop(0)
        if args:
            raise TypeError("Net() takes a model, an optional weights file and a phase")
        if phase not in (caffe_pb2.TRAIN, caffe_pb2.TEST):
            raise TypeError("Net() needs a phase: caffe.TRAIN or caffe.TEST (got %r)" % (phase,))
        self._engine = EngineNet(network_file, phase=phase, level=level,
                                 stages=tuple(stages or ()), weights=weights, dtype=dtype,
                                 log=log)

    @classmethod
    def wrap(cls, engine):
        """The pycaffe view of an existing engine net (a solver's net, for example)."""
        net = cls.__new__(cls)
        net._engine = engine
        return net

    # ---- containers ----------------------------------------------------------------------
    @property
    def blobs(self):
        """Ordered blob name -> Blob (``data``/``diff`` are host arrays, written through)."""
        if "_blobs_dict" not in self.__dict__:
            self._blobs_dict = collections.OrderedDict(
                (r.name, r.blob) for r in self._engine.blob_records)
        return self._blobs_dict

    @property
    def params(self):
        """Ordered layer name -> its parameter blobs (layers that have some)."""
        if "_params_dict" not in self.__dict__:
            self._params_dict = collections.OrderedDict(
                (r.name, r.layer.blobs) for r in self._engine.records if r.layer.blobs)
        return self._params_dict

    @property
    def layers(self):
        return self._engine.layers

    @property
    def fuse(self):
        """Whether in-place BatchNorm -> Scale (-> ReLU) chains and Eltwise SUM -> ReLU pairs
        run as one pass each way (caffecli/fusion.py); False runs every layer by itself."""
        return self._engine.fuse

    @fuse.setter
    def fuse(self, value):
        self._engine.fuse = bool(value)

    @property
    def layer_dict(self):
        return collections.OrderedDict((r.name, r.layer) for r in self._engine.records)

    @property
    def blob_loss_weights(self):
        """Ordered blob name -> its loss weight (0 for blobs that are not losses)."""
        return collections.OrderedDict(zip(self._engine.blob_names,
                                           self._engine.blob_loss_weights))

    @property
    def _blobs(self):
        return [r.blob for r in self._engine.blob_records]

    def _top_ids(self, layer):
        return list(self._engine.records[layer].top_ids)

    def _bottom_ids(self, layer):
        return list(self._engine.records[layer].bottom_ids)

    @property
    def _blob_names(self):
        return self._engine.blob_names

    @property
    def _layer_names(self):
        return self._engine.layer_names

    @property
    def _blob_loss_weights(self):
        return self._engine.blob_loss_weights

    @property
    def _inputs(self):
        return list(self._engine.input_ids)

    @property
    def _outputs(self):
        return list(self._engine.output_ids)

    @property
    def inputs(self):
        """Names of the input blobs (tops of Input layers), in order."""
        return self._engine.input_names

    @property
    def outputs(self):
        """Names of the output blobs (produced and never consumed), in Caffe's order."""
        return self._engine.output_names

    @property
    def top_names(self):
        names = self._engine.blob_names
        return collections.OrderedDict(
            (r.name, [names[i] for i in r.top_ids]) for r in self._engine.records)

    @property
    def bottom_names(self):
        names = self._engine.blob_names
        return collections.OrderedDict(
            (r.name, [names[i] for i in r.bottom_ids]) for r in self._engine.records)

    # ---- running -------------------------------------------------------------------------
    def _layer_index(self, name):
        index = self._engine.first_layer_index(name)   # pycaffe's list.index
        if index is None:
            raise ValueError("no layer named %r in net %s" % (name, self._engine.name))
        return index

    def _forward(self, start, end):
        if start == 0 and end == len(self._engine.records) - 1:
            return self._engine.forward_pass()    # a CUDA graph's where graphs are on
        return self._engine.forward_from_to(start, end)

    def _backward(self, start, end):
        self._engine.backward_from_to(start, end)

    def _feed(self, arrays, names, role, what):
        if set(arrays) != set(names):
            raise Exception("%s arguments do not match net %s." % (what, role))
        for name, array in arrays.items():
            blob = self.blobs[name]
            if array.shape[0] != blob.shape[0]:
                raise Exception("%s is not batch sized" % ("Input" if role == "inputs"
                                                           else "Diff"))
            getattr(blob, "data" if role == "inputs" else "diff")[...] = backend.to_host(array)

    def forward(self, blobs=None, start=None, end=None, **kwargs):
        """Copy ``kwargs`` arrays into the inputs, run layers ``start``..``end`` (names,
        inclusive) and return {name: data} for the outputs (or ``end``'s tops) plus ``blobs``."""
        blobs = list(blobs or [])
        start_ind = self._layer_index(start) if start is not None else 0
        if end is not None:
            end_ind = self._layer_index(end)
            outputs = set(self.top_names[end] + blobs)
        else:
            end_ind = len(self._engine.records) - 1
            outputs = set(self.outputs + blobs)
        if kwargs:
            self._feed(kwargs, self.inputs, "inputs", "Input blob")
        self._forward(start_ind, end_ind)
        return {out: self.blobs[out].data for out in outputs}

    def backward(self, diffs=None, start=None, end=None, **kwargs):
        """Copy ``kwargs`` arrays into the outputs' diffs, run backward from ``start`` down to
        ``end`` and return {name: diff} for the inputs (or ``end``'s bottoms) plus ``diffs``."""
        diffs = list(diffs or [])
        start_ind = self._layer_index(start) if start is not None \
            else len(self._engine.records) - 1
        if end is not None:
            end_ind = self._layer_index(end)
            outputs = set(self.bottom_names[end] + diffs)
        else:
            end_ind = 0
            outputs = set(self.inputs + diffs)
        if kwargs:
            self._feed(kwargs, self.outputs, "outputs", "Top diff")
        self._backward(start_ind, end_ind)
        return {out: self.blobs[out].diff for out in outputs}

    def set_input_arrays(self, data, labels):
        """Hand arrays to a MemoryData first layer (kept by reference, as Caffe's Reset): data
        N x C x H x W and labels N (or N x 1 x 1 x 1), C-contiguous float32, N a multiple of
        the batch size."""
        if labels.ndim == 1:
            labels = numpy.ascontiguousarray(labels[:, None, None, None])
        return self._set_input_arrays(data, labels)

    def _set_input_arrays(self, data, labels):
        first = self.layers[0] if self.layers else None
        if first is None or first.type != "MemoryData":
            raise CaffeError("set_input_arrays may only be called if the first layer is a "
                             "MemoryDataLayer (net %s starts with %s)"
                             % (self._engine.name, first.type if first else "no layer"))
        _check_memory_array(data, "data array", first.item_shape)
        _check_memory_array(labels, "labels array", (1, 1, 1))
        if data.shape[0] != labels.shape[0]:
            raise CaffeError("data and labels must have the same first dimension")
        if data.shape[0] % first.batch_size:
            raise CaffeError("first dimensions of input arrays must be a multiple of batch size")
        first.reset(data, labels.reshape(-1))

    # ---- callbacks (Caffe's Net::Callback), each called with the layer index -------------
    def before_forward(self, run):
        self._engine.before_forward.append(run)

    def after_forward(self, run):
        self._engine.after_forward.append(run)

    def before_backward(self, run):
        self._engine.before_backward.append(run)

    def after_backward(self, run):
        """``run(layer)`` after each layer's backward; a ``caffe.NCCL`` here averages each
        layer's gradients as soon as they are ready (layer_wise_reduce)."""
        self._engine.after_backward.append(run)

    def reshape(self):
        self._engine.reshape()

    # ---- weights -------------------------------------------------------------------------
    def copy_from(self, path):
        """Load trained weights (.caffemodel or .caffemodel.h5) by layer name."""
        self._engine.copy_trained_layers_from(path)

    def share_with(self, other):
        """Use ``other``'s parameter storage for layers of the same name."""
        self._engine.share_trained_layers_with(getattr(other, "_engine", other))

    def save(self, path):
        """Write the weights as a binary .caffemodel, whatever the name (Caffe's Net_Save)."""
        write_binary(as_path(path), self._engine.to_proto())

    def save_hdf5(self, path):
        """Write the weights in Caffe's HDF5 layout, whatever the name (Caffe's ToHDF5)."""
        save_hdf5(self._engine, as_path(path))

    def load_hdf5(self, path):
        """Copy weights by layer name from an HDF5 file written by save_hdf5 or Caffe."""
        path = as_path(path)
        if not is_hdf5(path):
            raise CaffeError("%s: not an HDF5 weights file" % path)
        self._engine.copy_trained_layers_from(path)


def _warn_legacy_constructor(model, weights, phase):
    """pycaffe's deprecation lines for Net(model, weights, phase)."""
    glog.warning("_caffe.deprecated_net",
                 "DEPRECATION WARNING - deprecated use of Python interface")
    glog.warning("_caffe.deprecated_use", 'Use this instead (with the named "weights" parameter):')
    glog.warning("_caffe.deprecated_net_weights",
                 "Net('%s', %s, weights='%s')" % (model, phase, weights))


def _check_memory_array(array, what, item_shape):
    """pycaffe's CheckContiguousArray: a C-contiguous 4-D float32 array of N x ``item_shape``."""
    if not (isinstance(array, numpy.ndarray) and array.flags.c_contiguous):
        raise CaffeError(what + " must be C contiguous")
    if array.ndim != 4:
        raise CaffeError(what + " must be 4-d")
    if array.dtype != numpy.float32:
        raise CaffeError(what + " must be float32")
    for name, got, want in zip(("number of channels", "height", "width"), array.shape[1:],
                               item_shape):
        if got != want:
            raise CaffeError("%s has wrong %s (%d, the layer has %d)" % (what, name, got, want))
