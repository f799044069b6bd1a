"""Net, the engine: a layer graph (net_graph.py builds it, as Caffe's Net::Init) run forward
and backward, with Caffe's debug lines and its ways of copying and sharing trained weights.
The pycaffe surface over it lives in caffecli.pycaffe.
"""
import collections

import numpy

from . import context, fusion, glog, replay
from .context import CPU
from .blob import Blob, shape_string
from .errors import CaffeError

from .proto import caffe_pb2
from .proto.io import read_net_param
from .proto.upgrade import upgrade_net_as_needed
from .net_graph import GRAPH_FIELDS, GraphBuilder
from .util.paths import as_path, is_path
from .weights import load_weights, save_weights

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


class Net:
    """A built network: layers, blobs and learnable parameters, in Caffe's order."""

    def __init__(self, param, phase=None, level=0, stages=(), weights=None,
                 dtype=numpy.float32, log=True):
        if is_path(param):
            self.source = as_path(param)
            param = read_net_param(self.source)
        else:
            # Caffe's Net(NetParameter) upgrades nothing; caffecli upgrades the old formats it
            # would read as no layers (a solver's inline V1 net), but not BatchNorm's three
            # param specs: that check stays true once upgraded (Caffe upgrades them as it
            # reads the file, once) and BatchNorm refuses a learned statistic itself
            self.source = "<net>"
            param = upgrade_net_as_needed(_copy(param), self.source, batch_norm=False)
        if phase is not None:
            param.state.phase = phase
            param.state.level = level
            param.state.stage.extend(stages)   # added to the file's, as Caffe's Net()
        self.dtype = numpy.dtype(dtype)
        self.log = log
        # Caffe's Net callbacks: each is called with the layer index around that layer's pass
        self.before_forward, self.after_forward = [], []
        self.before_backward, self.after_backward = [], []
        self.forward_only = None   # True: no backward follows a forward (see forward_pass)
        self._build(param)
        for w in (weights if isinstance(weights, (list, tuple)) else [weights] if weights else []):
            self.copy_trained_layers_from(w)

    # ---- construction (Caffe's Net::Init) ------------------------------------------------
    def _info(self, line, msg):
        if self.log:
            glog.info(line, msg)

    def _build(self, in_param):
        self.phase = in_param.state.phase
        graph = GraphBuilder(self.dtype, self.log).build(in_param)
        for name in GRAPH_FIELDS:
            setattr(self, name, getattr(graph, name))
        self.debug_info = self.param.debug_info
        self.fuse = True    # False: every layer runs by itself
        self.chains = fusion.find_chains(self.records)
        self._chain_ends = {first + len(c) - 1: c for first, c in self.chains.items()}

    # ---- running -------------------------------------------------------------------------
    def _check_not_empty(self):
        """Caffe aborts on running a net without layers ('Check failed: end < layers_.size()');
        its include/exclude rules left none for this state."""
        if not self.records:
            state = self.param.state
            raise CaffeError(
                "net '%s' has no layers to run in phase %s, level %d, stages [%s]: its "
                "include/exclude rules leave none" % (
                    self.param.name, caffe_pb2.Phase.Name(state.phase), state.level,
                    ", ".join(state.stage)))

    def forward_from_to(self, start=0, end=None, loss=0.0):
        """Run layers start..end inclusive; return ``loss`` plus their weighted losses."""
        self._check_not_empty()
        end = len(self.records) - 1 if end is None else end
        chains = self._runnable_chains()
        resume = start
        for i in range(start, end + 1):
            if i < resume:
                continue
            chain = chains.get(i)
            if chain is not None and i + len(chain) - 1 <= end and chain.forward():
                resume = i + len(chain)
                continue
            rec = self.records[i]
            for run in self.before_forward:
                run(i)
            loss += rec.layer.Forward(rec.bottoms, rec.tops)
            if self.debug_info:
                self._debug_forward(rec)
            for run in self.after_forward:
                run(i)
        return loss

    def _runnable_chains(self, by_last=False):
        """The fused chains (fusion.py) by first (or last) record, where nothing watches the
        layers one by one (debug_info, callbacks); else none."""
        if not self.fuse or self.debug_info or self.before_forward or self.after_forward \
                or self.before_backward or self.after_backward:
            return {}
        return self._chain_ends if by_last else self.chains

    def forward_pass(self):
        """Forward through the whole net; return the loss (outputs are in output_blobs).
        Where graphs are on and no backward follows (``forward_only``: a solver's test nets,
        ``caffecli test``; by default, a net that needs no backward), through a CUDA graph of
        the forward alone: an eager backward after replays could read layer state that eager
        passes in between replaced."""
        if context.is_gpu() and replay.enabled() and (
                self.forward_only if self.forward_only is not None
                else not any(rec.need_backward for rec in self.records)):
            step = self.__dict__.get("_forward_graph")
            if step is None:
                step = self._forward_graph = replay.GraphStep(self, backward=False)
            loss = step.run()
            if loss is not None:
                return loss
        return self.forward_from_to(0, len(self.records) - 1)

    def backward_from_to(self, start=None, end=0):
        self._check_not_empty()
        start = len(self.records) - 1 if start is None else start
        chains = self._runnable_chains(by_last=True)
        resume = start
        for i in range(start, end - 1, -1):
            if i > resume:
                continue
            chain = chains.get(i)
            if chain is not None and i - len(chain) + 1 >= end and chain.backward():
                resume = i - len(chain)
                continue
            rec = self.records[i]
            for run in self.before_backward:
                run(i)
            if rec.need_backward:
                rec.layer.Backward(rec.tops, rec.bottom_need_backward, rec.bottoms)
                if self.debug_info:
                    self._debug_backward(rec)
            for run in self.after_backward:
                run(i)

    def backward_pass(self):
        self.backward_from_to(len(self.records) - 1, 0)
        if self.debug_info:
            params = self.learnable_params
            norms = [sum(f(p) for p in params) for f in (Blob.asum_data, Blob.asum_diff,
                                                         Blob.sumsq_data, Blob.sumsq_diff)]
            glog.error("net.debug_backward_norms",
                       "    [Backward] All net params (data, diff): L1 norm = "
                       "(%s, %s); L2 norm = (%s, %s)" % (glog.fmt(norms[0]), glog.fmt(norms[1]),
                                                         glog.fmt(norms[2] ** 0.5),
                                                         glog.fmt(norms[3] ** 0.5)))

    def forward_backward(self):
        """One forward and backward pass (the solver's); through a CUDA graph when asked for
        (replay.py) and the net can be captured."""
        if context.is_gpu() and replay.enabled():
            step = self.__dict__.get("_graph_step")
            if step is None:
                step = self._graph_step = replay.GraphStep(self)
            loss = step.run()
            if loss is not None:
                return loss
        loss = self.forward_from_to(0, len(self.records) - 1)
        self.backward_pass()
        return loss

    def reshape(self):
        for rec in self.records:
            rec.layer.Reshape(rec.bottoms, rec.tops)

    def clear_param_diffs(self, lazy=False):
        """Zero every learnable diff on the mode's side (Caffe's ClearParamDiffs). ``lazy``, a
        solver's clear before its passes: on the host, the diffs that only layers writing
        their whole gradient use (``Layer.claims_cleared_diffs``: CaffeNet's fc6 and fc7,
        151 and 67 MB) wait for those layers to write their gradient in place of the zeros;
        ``settle_param_diffs`` after the passes zeroes those no layer wrote."""
        side = context.mode()
        lazy_ids = self._lazy_clear_ids() if lazy and side == CPU else ()
        for i, p in enumerate(self.learnable_params):
            if i in lazy_ids:
                p.clear_diff_lazily()
            else:
                p.at(side).diff[...] = 0

    def settle_param_diffs(self):
        """Write the zeros of a lazy clear that no layer claimed (a frozen layer's): from here
        on every diff holds its values in memory, as after Caffe's ClearParamDiffs."""
        for i in self._lazy_clear_ids():
            self.learnable_params[i].settle_diff()

    def _lazy_clear_ids(self):
        """The learnables each of whose layers (a shared one's too) writes its whole gradient
        where a clear is pending."""
        found = self.__dict__.get("_lazy_ids")
        if found is None:
            claims = {}
            for p in self.param_records:
                layer = self.records[p.layer_id].layer
                claims.setdefault(p.learnable_id, []).append(
                    p.index in type(layer).claims_cleared_diffs)
            found = self._lazy_ids = frozenset(i for i, c in claims.items() if all(c))
        return found

    def update(self):
        for p in self.learnable_params:
            p.update()

    def _debug_forward(self, rec):
        for top, tid in zip(rec.tops, rec.top_ids):
            glog.info("net.debug_forward_top", "    [Forward] Layer %s, top blob %s data: %s" % (
                rec.name, self.blob_records[tid].name, _mean_abs(top, "data")))
        for blob, pid in zip(rec.layer.blobs, rec.param_ids):
            glog.info("net.debug_forward_param",
                      "    [Forward] Layer %s, param blob %s data: %s" % (
                rec.name, self.param_records[pid].display_name, _mean_abs(blob, "data")))

    def _debug_backward(self, rec):
        for bottom, bid, need in zip(rec.bottoms, rec.bottom_ids, rec.bottom_need_backward):
            if need:
                glog.info("net.debug_backward_bottom",
                          "    [Backward] Layer %s, bottom blob %s diff: %s" % (
                    rec.name, self.blob_records[bid].name, _mean_abs(bottom, "diff")))
        for j, blob in enumerate(rec.layer.blobs):
            if rec.layer.param_propagate_down[j]:
                glog.info("net.debug_backward_param",
                          "    [Backward] Layer %s, param blob %d diff: %s" % (
                    rec.name, j, _mean_abs(blob, "diff")))

    # ---- weights -------------------------------------------------------------------------
    def copy_trained_layers_from(self, source):
        """Copy parameters by layer name from a .caffemodel(.h5) path or a NetParameter."""
        if is_path(source):
            load_weights(self, as_path(source))
        else:
            self.copy_from_net_param(source)

    def copy_from_net_param(self, param, source="<weights>", values=None):
        """Copy parameters by layer name from a NetParameter; ``values`` (a caffemodel's
        BlobValues) holds blob values cut out of ``param``, copied straight into the blobs."""
        param = upgrade_net_as_needed(param, source)
        seen = collections.Counter()
        for lp in param.layer:
            name = lp.name
            if isinstance(name, bytes):  # protobuf hands over a name that is not UTF-8 as bytes
                name = name.decode("utf-8", "replace")
            occurrence = seen[name]
            seen[name] += 1
            lid = self.first_layer_index(name)
            if lid is None:
                self._info("net.ignoring_source_layer", "Ignoring source layer " + name)
                continue
            target = self.records[lid].layer.blobs
            if len(target) != len(lp.blobs):
                raise CaffeError("%s: incompatible number of blobs for layer %s (net has %d, "
                                 "file has %d)" % (source, name, len(target), len(lp.blobs)))
            for j, (blob, proto) in enumerate(zip(target, lp.blobs)):
                if not blob.shape_equals(proto):
                    raise CaffeError(
                        "%s: cannot copy param %d weights from layer '%s'; shape mismatch.  "
                        "Source param shape is %s; target param shape is %s. To learn this "
                        "layer's parameters from scratch rather than copying from a saved "
                        "net, rename the layer." % (source, j, name,
                                                    shape_string(Blob.proto_shape(proto)),
                                                    blob.shape_string()))
                given = None if values is None else values.get(name, occurrence, j)
                try:
                    blob.from_proto(proto, reshape=False, values=given)
                except CaffeError as exc:
                    raise CaffeError("%s: layer %s param %d: %s" % (source, name, j, exc)) \
                        from None

    def share_trained_layers_with(self, other, log=True):
        """Make this net's parameters use ``other``'s storage (test nets share the train net's
        before each test, saying which of its layers this net lacks, as Caffe does)."""
        for rec in other.records:
            tid = self.first_layer_index(rec.name)
            if tid is None:
                if log:
                    glog.info("net.ignoring_shared_layer", "Ignoring source layer " + rec.name)
                continue
            src, dst = rec.layer.blobs, self.records[tid].layer.blobs
            if len(src) != len(dst):
                raise CaffeError("Incompatible number of blobs for layer %s" % rec.name)
            for j, (s, d) in enumerate(zip(src, dst)):
                if s.shape != d.shape:
                    raise CaffeError(
                        "Cannot share param %d weights from layer '%s'; shape mismatch.  Source "
                        "param shape is %s; target param shape is %s"
                        % (j, rec.name, s.shape_string(), d.shape_string()))
                d.share_data(s)

    def is_shared_param(self, layer_id, index):
        """Whether parameter ``index`` of layer ``layer_id`` is another layer's (shared)."""
        return self.param_records[self.records[layer_id].param_ids[index]].owner >= 0

    def to_proto(self, write_diff=False):
        """The net as a NetParameter with every layer's parameter blobs (a .caffemodel)."""
        out = caffe_pb2.NetParameter()
        out.name = self.name
        for rec in self.records:
            out.layer.add().CopyFrom(rec.layer.to_proto(write_diff))
        return out

    def save(self, path, write_diff=False):
        """Write the weights as a binary .caffemodel (atomically), or HDF5 for *.h5."""
        save_weights(self, as_path(path), write_diff)

    # ---- lookups -------------------------------------------------------------------------
    layers = property(lambda self: [r.layer for r in self.records])
    layer_names = property(lambda self: [r.name for r in self.records])
    blob_names = property(lambda self: [r.name for r in self.blob_records])
    learnable_params = property(lambda self: [p.blob for p in self.learnables])
    params_lr = property(lambda self: [p.lr_mult for p in self.learnables])
    params_weight_decay = property(lambda self: [p.decay_mult for p in self.learnables])
    output_blobs = property(lambda self: [self.blob_records[i].blob for i in self.output_ids])
    output_names = property(lambda self: [self.blob_records[i].name for i in self.output_ids])
    input_blobs = property(lambda self: [self.blob_records[i].blob for i in self.input_ids])
    input_names = property(lambda self: [self.blob_records[i].name for i in self.input_ids])
    blob_loss_weights = property(lambda self: [r.loss_weight for r in self.blob_records])

    def blob_by_name(self, name):
        if name not in self.blob_names_index:
            raise CaffeError("Unknown blob name " + name)
        return self.blob_records[self.blob_names_index[name]].blob

    def has_blob(self, name):
        return name in self.blob_names_index

    def first_layer_index(self, name):
        """The first layer named ``name``, or None: Caffe's linear searches (copying weights,
        sharing layers, pycaffe's start/end) find the first of duplicate names, where its
        name map (layer_names_index, layer_by_name, HDF5 weights) holds the last."""
        return self.first_layer_names_index.get(name)

    def layer_by_name(self, name):
        if name not in self.layer_names_index:
            raise CaffeError("Unknown layer name " + name)
        return self.records[self.layer_names_index[name]].layer


def _copy(param):
    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    return out


def _mean_abs(blob, role):
    asum = blob.asum_data() if role == "data" else blob.asum_diff()
    return glog.fmt(asum / max(blob.count(), 1))
