"""The net's layer graph and how it is built from a NetParameter (Caffe's Net::Init):
NetStateRule filtering, automatic splits, in-place tops, loss weights, need-backward inference
and parameter sharing by name, with Caffe's set-up log lines. Each layer, blob and parameter is
one small record."""
from . import glog
from .blob import Blob, shape_string
from .errors import CaffeError
from .proto import caffe_pb2
from .proto.io import net_to_text
from .registry import create_layer
from .util.filter_net import filter_net
from .util.insert_splits import insert_splits


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


# what a built graph hands its Net
GRAPH_FIELDS = ("param", "name", "records", "blob_records", "param_records", "learnables",
                "input_ids", "output_ids", "blob_names_index", "layer_names_index",
                "first_layer_names_index")


class GraphBuilder:
    """Fills a net's records from a NetParameter, layer by layer, setting each layer up."""

    def __init__(self, dtype, log):
        self.dtype, self.log = dtype, log

    def _info(self, line, msg):
        if self.log:
            glog.info(line, msg)

    def build(self, in_param):
        """The records of the net ``in_param`` describes (self, filled in)."""
        self.phase = in_param.state.phase
        filtered = filter_net(in_param, self.log)
        self._info("net.init", "Initializing net from parameters: \n"
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
        self._mark_rewritten_bottoms()
        for name in sorted(self._available):
            self._info("net.output", "This network produces output " + name)
            self.output_ids.append(self.blob_names_index[name])
        self.layer_names_index = {r.name: i for i, r in enumerate(self.records)}
        self.first_layer_names_index = {}   # of duplicate names, the first (Caffe's searches)
        for i, rec in enumerate(self.records):
            self.first_layer_names_index.setdefault(rec.name, i)
        self._share_weights()
        self._info("net.done", "Network initialization done.")
        return self

    def _add_layer(self, layer_id, lp):
        if not lp.HasField("phase"):
            lp.phase = self.phase
        if len(lp.propagate_down) and len(lp.propagate_down) != len(lp.bottom):
            raise CaffeError("Layer %s: propagate_down must be given either 0 or bottom_size "
                             "(%d) times" % (lp.name, len(lp.bottom)))
        layer = create_layer(lp, self.dtype, log=self.log)
        rec = LayerRecord(layer, lp.name)
        self.records.append(rec)
        self._info("net.creating_layer", "Creating Layer " + lp.name)
        for j, name in enumerate(lp.bottom):
            self._append_bottom(rec, lp, j, name)
        for j in range(len(lp.top)):
            self._append_top(rec, lp, j, lp.top[j])
            if lp.type == "Input":
                self.input_ids.append(rec.top_ids[-1])
        if layer.auto_top_blobs:
            for j in range(len(lp.top), max(layer.min_top_blobs, layer.exact_num_top_blobs)):
                self._append_top(rec, lp, j, None)
        # the net's own copy of the specs decides what learns: a layer's SetUp may add specs to
        # its copy (BatchNorm pins lr_mult 0 there, which the solver then reads)
        lr_mults = [spec.lr_mult for spec in lp.param]
        in_place = [(top, top.shape, tid) for top, tid in zip(rec.tops, rec.top_ids)
                    if tid in rec.bottom_ids]
        layer.SetUp(rec.bottoms, rec.tops)
        for top, shape, tid in in_place:    # Caffe goes on with the bottom's values cut or stale
            if top.shape != shape:
                raise CaffeError(
                    "Layer %s (%s) cannot compute in place: it reshapes its bottom and top "
                    "'%s' from %s to %s; give the top a name of its own" % (
                        lp.name, lp.type, self.blob_records[tid].name, shape_string(shape),
                        top.shape_string()))
        self._info("net.setting_up", "Setting up " + lp.name)
        for j, (top, tid) in enumerate(zip(rec.tops, rec.top_ids)):
            self.blob_records[tid].loss_weight = layer.loss(j)
            self._info("net.top_shape", "Top shape: " + top.shape_string())
            if layer.loss(j):
                self._info("net.with_loss_weight",
                           "    with loss weight " + glog.fmt(layer.loss(j)))
            self._memory += top.count()
        self._info("net.memory", "Memory required for data: %d" % (self._memory * 4))
        if len(lr_mults) > len(layer.blobs):
            raise CaffeError("Too many params specified for layer %s (%d param specs, "
                             "%d parameter blobs)" % (lp.name, len(lr_mults), len(layer.blobs)))
        for pid in range(len(layer.blobs)):
            learn = (lr_mults[pid] if pid < len(lr_mults) else 1.0) != 0
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
        self._info("net.bottom", "%s <- %s" % (lp.name, name))
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
            self._info("net.top_in_place", "%s -> %s (in-place)" % (lp.name, name))
            bid = self.blob_names_index[name]
        elif name is not None and name in self.blob_names_index:
            raise CaffeError("Top blob '%s' produced by multiple sources (layer '%s')"
                             % (name, lp.name))
        else:
            self._info("net.top", "%s -> %s" % (lp.name, name or "(automatic)"))
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
        self._info("net.sharing", "Sharing parameters '%s' owned by layer '%s', param index %d"
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
                self._info("net.needs_backward", "%s needs backward computation." % rec.name)
            else:
                self._info("net.no_backward", "%s does not need backward computation." % rec.name)
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

    def _mark_rewritten_bottoms(self):
        """Caffe's backward reads a bottom's data as it is then. An in-place layer later in the
        forward pass that writes into storage the bottom shares (through Split, Reshape,
        Flatten, ...) changes it; layers that keep forward-time copies for their backward
        (convolution's columns) are told to read the bottom again."""
        group = list(range(len(self.blob_records)))

        def find(i):
            while group[i] != i:
                group[i] = group[group[i]]
                i = group[i]
            return i

        for rec in self.records:
            if rec.bottom_ids and rec.layer.tops_alias_bottom(len(rec.bottom_ids),
                                                              len(rec.top_ids)):
                for t in rec.top_ids:
                    group[find(t)] = find(rec.bottom_ids[0])
        last_write = {}   # storage -> the last layer writing into it in place
        for i, rec in enumerate(self.records):
            for b, t in zip(rec.bottom_ids, rec.top_ids):
                if b == t:
                    last_write[find(t)] = i
        for i, rec in enumerate(self.records):
            rec.layer.bottom_rewritten = any(last_write.get(find(b), -1) > i
                                             for b in rec.bottom_ids)

    def _share_weights(self):
        for p in self.param_records:
            if p.owner >= 0:
                p.blob.share_data(self.param_records[p.owner].blob)
                p.blob.share_diff(self.param_records[p.owner].blob)

    # ---- running -------------------------------------------------------------------------


def _param_spec(lp, index):
    return lp.param[index] if index < len(lp.param) else caffe_pb2.ParamSpec()
