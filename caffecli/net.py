"""Net, the engine: builds the layer graph from a NetParameter and runs forward/backward over it.

Follows Caffe's net.cpp: NetStateRule filtering, automatic splits, in-place tops, loss weights,
need-backward inference, parameter sharing by name, and the set-up log lines. Each layer, blob
and parameter is one small record; the pycaffe surface lives in caffecli.pycaffe.
"""
import collections

import numpy

from . import context, glog
from .blob import Blob, shape_string
from .errors import CaffeError
from .proto import caffe_pb2
from .proto.io import net_to_text, read_net_param
from .proto.upgrade import upgrade_net_as_needed
from .registry import create_layer
from .util.filter_net import filter_net
from .util.insert_splits import insert_splits
from .util.paths import is_path, as_path

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


class LayerRecord:
    """One layer and its wiring: bottom/top blobs (and their ids), what needs backward."""

    __slots__ = ("layer", "name", "bottoms", "tops", "bottom_ids", "top_ids",
                 "bottom_need_backward", "need_backward", "param_ids")

    def __init__(self, layer, name):
        self.layer, self.name = layer, name
        self.bottoms, self.tops, self.bottom_ids, self.top_ids = [], [], [], []
        self.bottom_need_backward, self.param_ids = [], []
        self.need_backward = False


class BlobRecord:
    """One named blob of the net, its loss weight and whether a gradient reaches it."""

    __slots__ = ("name", "blob", "need_backward", "loss_weight")

    def __init__(self, name, blob):
        self.name, self.blob, self.need_backward, self.loss_weight = name, blob, False, 0.0


class ParamRecord:
    """One parameter blob of one layer; ``owner`` is the net param id it shares, or -1."""

    __slots__ = ("blob", "layer_id", "index", "display_name", "owner", "learnable_id")

    def __init__(self, blob, layer_id, index, display_name):
        self.blob, self.layer_id, self.index = blob, layer_id, index
        self.display_name, self.owner, self.learnable_id = display_name, -1, -1


class Learnable:
    """A parameter the solver updates (owners only), with its lr and decay multipliers."""

    __slots__ = ("blob", "lr_mult", "decay_mult", "has_lr", "has_decay")

    def __init__(self, blob, spec):
        self.blob, self.lr_mult, self.decay_mult = blob, spec.lr_mult, spec.decay_mult
        self.has_lr, self.has_decay = spec.HasField("lr_mult"), spec.HasField("decay_mult")


class Net:
    """A built network: layers, blobs and learnable parameters, in Caffe's order."""

    def __init__(self, param, phase=None, level=0, stages=(), weights=None,
                 dtype=numpy.float32, log=True):
        if is_path(param):
            self.source = as_path(param)
            param = read_net_param(self.source)
        else:
            self.source = "<net>"
            param = upgrade_net_as_needed(_copy(param), self.source)
        if phase is not None:
            param.state.phase = phase
            param.state.level = level
            if stages:
                del param.state.stage[:]
                param.state.stage.extend(stages)
        self.dtype = numpy.dtype(dtype)
        self.log = log
        self._build(param)
        for w in (weights if isinstance(weights, (list, tuple)) else [weights] if weights else []):
            self.copy_trained_layers_from(w)

    # ---- construction (Caffe's Net::Init) ------------------------------------------------
    def _info(self, line, msg):
        if self.log:
            glog.info("net.cpp:%d" % line, msg)

    def _build(self, in_param):
        self.phase = in_param.state.phase
        filtered = filter_net(in_param, self.log)
        self._info(53, "Initializing net from parameters: \n"
                   + net_to_text(filtered).rstrip("\n"))
        self.param = param = insert_splits(filtered)
        self.name = param.name
        self.records, self.blob_records, self.param_records, self.learnables = [], [], [], []
        self.input_ids, self.output_ids = [], []
        self.blob_names_index, self._param_names, self._available = {}, {}, set()
        self._memory = 0
        for layer_id, lp in enumerate(param.layer):
            self._add_layer(layer_id, lp)
        self._infer_backward(param.force_backward)
        for name in sorted(self._available):
            self._info(244, "This network produces output " + name)
            self.output_ids.append(self.blob_names_index[name])
        self.layer_names_index = {r.name: i for i, r in enumerate(self.records)}
        self._share_weights()
        self.debug_info = param.debug_info
        self._info(257, "Network initialization done.")

    def _add_layer(self, layer_id, lp):
        if not lp.HasField("phase"):
            lp.phase = self.phase
        if len(lp.propagate_down) and len(lp.propagate_down) != len(lp.bottom):
            raise CaffeError("Layer %s: propagate_down must be given either 0 or bottom_size "
                             "(%d) times" % (lp.name, len(lp.bottom)))
        if self.log:
            glog.info("layer_factory.hpp:77", "Creating layer " + lp.name)
        layer = create_layer(lp, self.dtype)
        rec = LayerRecord(layer, lp.name)
        self.records.append(rec)
        self._info(86, "Creating Layer " + lp.name)
        for j, name in enumerate(lp.bottom):
            self._append_bottom(rec, lp, j, name)
        for j in range(len(lp.top)):
            self._append_top(rec, lp, j, lp.top[j])
            if lp.type == "Input":
                self.input_ids.append(rec.top_ids[-1])
        if layer.auto_top_blobs:
            for j in range(len(lp.top), max(layer.min_top_blobs, layer.exact_num_top_blobs)):
                self._append_top(rec, lp, j, None)
        layer.SetUp(rec.bottoms, rec.tops)
        self._info(124, "Setting up " + lp.name)
        for j, (top, tid) in enumerate(zip(rec.tops, rec.top_ids)):
            self.blob_records[tid].loss_weight = layer.loss(j)
            self._info(131, "Top shape: " + top.shape_string())
            if layer.loss(j):
                self._info(134, "    with loss weight " + glog.fmt(layer.loss(j)))
            self._memory += top.count()
        self._info(139, "Memory required for data: %d" % (self._memory * 4))
        if len(lp.param) > len(layer.blobs):
            raise CaffeError("Too many params specified for layer %s (%d param specs, "
                             "%d parameter blobs)" % (lp.name, len(lp.param), len(layer.blobs)))
        for pid in range(len(layer.blobs)):
            learn = _param_spec(lp, pid).lr_mult != 0
            rec.need_backward |= learn
            layer.set_param_propagate_down(pid, learn)
            self._append_param(layer_id, pid)
        if rec.need_backward:
            for tid in rec.top_ids:
                self.blob_records[tid].need_backward = True

    def _append_bottom(self, rec, lp, j, name):
        if name not in self._available:
            raise CaffeError("Unknown bottom blob '%s' (layer '%s', bottom index %d)"
                             % (name, lp.name, j))
        bid = self.blob_names_index[name]
        self._info(408, "%s <- %s" % (lp.name, name))
        rec.bottoms.append(self.blob_records[bid].blob)
        rec.bottom_ids.append(bid)
        self._available.discard(name)
        need = self.blob_records[bid].need_backward
        rec.bottom_need_backward.append(bool(lp.propagate_down[j]) if len(lp.propagate_down)
                                        else need)
        rec.need_backward |= need

    def _append_top(self, rec, lp, j, name):
        """A top: the bottom it overwrites in place, or a new blob (``name`` None: an anonymous
        extra top a layer asked for, never a net output)."""
        if name is not None and j < len(lp.bottom) and name == lp.bottom[j]:
            self._info(369, "%s -> %s (in-place)" % (lp.name, name))
            bid = self.blob_names_index[name]
        elif name is not None and name in self.blob_names_index:
            raise CaffeError("Top blob '%s' produced by multiple sources (layer '%s')"
                             % (name, lp.name))
        else:
            self._info(382, "%s -> %s" % (lp.name, name or "(automatic)"))
            bid = len(self.blob_records)
            self.blob_records.append(BlobRecord(name or "(automatic)", Blob(dtype=self.dtype)))
            if name is not None:
                self.blob_names_index[name] = bid
        rec.tops.append(self.blob_records[bid].blob)
        rec.top_ids.append(bid)
        if name is not None:
            self._available.add(name)

    def _append_param(self, layer_id, index):
        rec = self.records[layer_id]
        spec = _param_spec(rec.layer.layer_param, index)
        p = ParamRecord(rec.layer.blobs[index], layer_id, index, spec.name or str(index))
        net_pid = len(self.param_records)
        self.param_records.append(p)
        rec.param_ids.append(net_pid)
        if not spec.name or spec.name not in self._param_names:
            if spec.name:
                self._param_names[spec.name] = net_pid
            p.learnable_id = len(self.learnables)
            self.learnables.append(Learnable(p.blob, spec))
            return
        p.owner = self._param_names[spec.name]
        owner = self.param_records[p.owner]
        owner_name = self.records[owner.layer_id].name
        self._info(498, "Sharing parameters '%s' owned by layer '%s', param index %d"
                   % (spec.name, owner_name, owner.index))
        permissive = spec.share_mode == caffe_pb2.ParamSpec.PERMISSIVE
        if permissive and p.blob.count() != owner.blob.count():
            raise CaffeError(
                "Cannot share param '%s' owned by layer '%s' with layer '%s'; count mismatch.  "
                "Owner layer param shape is %s; sharing layer shape is %s"
                % (spec.name, owner_name, rec.name, owner.blob.shape_string(),
                   p.blob.shape_string()))
        if not permissive and p.blob.shape != owner.blob.shape:
            raise CaffeError(
                "Cannot share param '%s' owned by layer '%s' with layer '%s'; shape mismatch.  "
                "Owner layer param shape is %s; sharing layer expects shape %s"
                % (spec.name, owner_name, rec.name, owner.blob.shape_string(),
                   p.blob.shape_string()))
        p.learnable_id = owner.learnable_id
        learnable = self.learnables[p.learnable_id]
        for field, has in (("lr_mult", "has_lr"), ("decay_mult", "has_decay")):
            if spec.HasField(field):
                if getattr(learnable, has) and getattr(spec, field) != getattr(learnable, field):
                    raise CaffeError("Shared param '%s' has mismatched %s." % (spec.name, field))
                setattr(learnable, has, True)
                setattr(learnable, field, getattr(spec, field))

    def _infer_backward(self, force_backward):
        """Which layers and bottoms need backward: those under a loss and not blocked
        (Caffe's second pass over the layers, in reverse)."""
        under_loss, skip_backp = set(), set()
        for rec in reversed(self.records):
            names = [self.blob_records[t].name for t in rec.top_ids]
            contributes = any(rec.layer.loss(j) or n in under_loss for j, n in enumerate(names))
            skip = all(n in skip_backp for n in names)
            if rec.need_backward and skip:
                rec.need_backward = False
                rec.bottom_need_backward = [False] * len(rec.bottoms)
            if not contributes:
                rec.need_backward = False
            if rec.need_backward:
                self._info(200, "%s needs backward computation." % rec.name)
            else:
                self._info(202, "%s does not need backward computation." % rec.name)
            for j, bid in enumerate(rec.bottom_ids):
                name = self.blob_records[bid].name
                if contributes:
                    under_loss.add(name)
                else:
                    rec.bottom_need_backward[j] = False
                if not rec.bottom_need_backward[j]:
                    skip_backp.add(name)
        if force_backward:
            for rec in self.records:
                rec.need_backward = True
                for j, bid in enumerate(rec.bottom_ids):
                    need = rec.bottom_need_backward[j] or rec.layer.allow_force_backward(j)
                    rec.bottom_need_backward[j] = need
                    self.blob_records[bid].need_backward |= need
                for pid in range(len(rec.layer.blobs)):
                    rec.layer.set_param_propagate_down(pid, True)

    def _share_weights(self):
        for p in self.param_records:
            if p.owner >= 0:
                p.blob.share_data(self.param_records[p.owner].blob)
                p.blob.share_diff(self.param_records[p.owner].blob)

    # ---- running -------------------------------------------------------------------------
    def forward_from_to(self, start=0, end=None):
        """Run layers start..end inclusive; return the summed weighted loss."""
        end = len(self.records) - 1 if end is None else end
        loss = 0.0
        for i in range(start, end + 1):
            rec = self.records[i]
            loss += rec.layer.Forward(rec.bottoms, rec.tops)
            if self.debug_info:
                self._debug_forward(rec)
        return loss

    def forward_pass(self):
        """Forward through the whole net; return the loss (outputs are in output_blobs)."""
        return self.forward_from_to(0, len(self.records) - 1)

    def backward_from_to(self, start=None, end=0):
        start = len(self.records) - 1 if start is None else start
        for i in range(start, end - 1, -1):
            rec = self.records[i]
            if rec.need_backward:
                rec.layer.Backward(rec.tops, rec.bottom_need_backward, rec.bottoms)
                if self.debug_info:
                    self._debug_backward(rec)

    def backward_pass(self):
        self.backward_from_to(len(self.records) - 1, 0)
        if self.debug_info:
            params = self.learnable_params
            norms = [sum(f(p) for p in params) for f in (Blob.asum_data, Blob.asum_diff,
                                                         Blob.sumsq_data, Blob.sumsq_diff)]
            glog.error("net.cpp:619", "    [Backward] All net params (data, diff): L1 norm = "
                       "(%s, %s); L2 norm = (%s, %s)" % (glog.fmt(norms[0]), glog.fmt(norms[1]),
                                                         glog.fmt(norms[2] ** 0.5),
                                                         glog.fmt(norms[3] ** 0.5)))

    def forward_backward(self):
        loss = self.forward_pass()
        self.backward_pass()
        return loss

    def reshape(self):
        for rec in self.records:
            rec.layer.Reshape(rec.bottoms, rec.tops)

    def clear_param_diffs(self):
        """Zero every learnable diff on the mode's side (Caffe's ClearParamDiffs)."""
        side = context.mode()
        for p in self.learnable_params:
            p.at(side).diff[...] = 0

    def update(self):
        for p in self.learnable_params:
            p.update()

    def _debug_forward(self, rec):
        for top, tid in zip(rec.tops, rec.top_ids):
            glog.info("net.cpp:577", "    [Forward] Layer %s, top blob %s data: %s" % (
                rec.name, self.blob_records[tid].name, _mean_abs(top, "data")))
        for blob, pid in zip(rec.layer.blobs, rec.param_ids):
            glog.info("net.cpp:588", "    [Forward] Layer %s, param blob %s data: %s" % (
                rec.name, self.param_records[pid].display_name, _mean_abs(blob, "data")))

    def _debug_backward(self, rec):
        for bottom, bid, need in zip(rec.bottoms, rec.bottom_ids, rec.bottom_need_backward):
            if need:
                glog.info("net.cpp:603", "    [Backward] Layer %s, bottom blob %s diff: %s" % (
                    rec.name, self.blob_records[bid].name, _mean_abs(bottom, "diff")))
        for j, blob in enumerate(rec.layer.blobs):
            if rec.layer.param_propagate_down[j]:
                glog.info("net.cpp:614", "    [Backward] Layer %s, param blob %d diff: %s" % (
                    rec.name, j, _mean_abs(blob, "diff")))

    # ---- weights -------------------------------------------------------------------------
    def copy_trained_layers_from(self, source):
        """Copy parameters by layer name from a .caffemodel(.h5) path or a NetParameter."""
        if is_path(source):
            from .weights import load_weights  # weights.py reads nets: imported when used
            load_weights(self, as_path(source))
        else:
            self.copy_from_net_param(source)

    def copy_from_net_param(self, param, source="<weights>", values=None):
        """Copy parameters by layer name from a NetParameter; ``values`` (a caffemodel's
        BlobValues) holds blob values cut out of ``param``, copied straight into the blobs."""
        param = upgrade_net_as_needed(param, source)
        seen = collections.Counter()
        for lp in param.layer:
            occurrence = seen[lp.name]
            seen[lp.name] += 1
            lid = self.layer_names_index.get(lp.name)
            if lid is None:
                self._info(769, "Ignoring source layer " + lp.name)
                continue
            target = self.records[lid].layer.blobs
            if len(target) != len(lp.blobs):
                raise CaffeError("%s: incompatible number of blobs for layer %s (net has %d, "
                                 "file has %d)" % (source, lp.name, len(target), len(lp.blobs)))
            for j, (blob, proto) in enumerate(zip(target, lp.blobs)):
                if not blob.shape_equals(proto):
                    raise CaffeError(
                        "%s: cannot copy param %d weights from layer '%s'; shape mismatch.  "
                        "Source param shape is %s; target param shape is %s. To learn this "
                        "layer's parameters from scratch rather than copying from a saved "
                        "net, rename the layer." % (source, j, lp.name,
                                                    shape_string(Blob.proto_shape(proto)),
                                                    blob.shape_string()))
                given = None if values is None else values.get(lp.name, occurrence, j)
                blob.from_proto(proto, reshape=False, values=given)

    def share_trained_layers_with(self, other):
        """Make this net's parameters use ``other``'s storage (test nets share the train net's)."""
        for rec in other.records:
            tid = self.layer_names_index.get(rec.name)
            if tid is None:
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
        from .weights import save_weights
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

    def layer_by_name(self, name):
        if name not in self.layer_names_index:
            raise CaffeError("Unknown layer name " + name)
        return self.records[self.layer_names_index[name]].layer


def _copy(param):
    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    return out


def _param_spec(lp, index):
    return lp.param[index] if index < len(lp.param) else caffe_pb2.ParamSpec()


def _mean_abs(blob, role):
    asum = blob.asum_data() if role == "data" else blob.asum_diff()
    return glog.fmt(asum / max(blob.count(), 1))
