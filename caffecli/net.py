"""Net: builds a DAG of layers from a NetParameter and runs forward/backward over it.

Follows Caffe's net.cpp: NetStateRule filtering, automatic splits, in-place tops, loss
weights, need-backward inference, parameter sharing by name, and the set-up log lines.
"""

import numpy

from . import backend, glog
from .blob import Blob
from .errors import CaffeError
from .paths import as_path, is_path
from .proto import caffe_pb2
from .proto.io import read_net_param, net_to_text
from .registry import create_layer
from .util.insert_splits import insert_splits
from .pycaffe.net_mixin import PycaffeNetMixin

TRAIN = caffe_pb2.TRAIN
TEST = caffe_pb2.TEST


def state_meets_rule(state, rule, layer_name, log=True):
    """Whether NetState ``state`` satisfies NetStateRule ``rule`` (Caffe's StateMeetsRule)."""
    def say(msg):
        if log:
            glog.info("net.cpp:%d" % 325, msg)
    if rule.HasField("phase") and rule.phase != state.phase:
        say("The NetState phase (%d) differed from the phase (%d) specified by a rule in "
            "layer %s" % (state.phase, rule.phase, layer_name))
        return False
    if rule.HasField("min_level") and state.level < rule.min_level:
        say("The NetState level (%d) is above the min_level (%d) specified by a rule in "
            "layer %s" % (state.level, rule.min_level, layer_name))
        return False
    if rule.HasField("max_level") and state.level > rule.max_level:
        say("The NetState level (%d) is above the max_level (%d) specified by a rule in "
            "layer %s" % (state.level, rule.max_level, layer_name))
        return False
    for s in rule.stage:
        if s not in state.stage:
            say("The NetState did not contain stage '%s' specified by a rule in layer %s"
                % (s, layer_name))
            return False
    for s in rule.not_stage:
        if s in state.stage:
            say("The NetState contained a not_stage '%s' specified by a rule in layer %s"
                % (s, layer_name))
            return False
    return True


def filter_net(param, log=True):
    """A copy of ``param`` keeping only the layers its state's include/exclude rules admit."""
    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    del out.layer[:]
    for lp in param.layer:
        if len(lp.include) and len(lp.exclude):
            raise CaffeError("Layer %s: specify either include rules or exclude rules; not both."
                             % lp.name)
        included = len(lp.include) == 0
        for rule in lp.exclude:
            if included and state_meets_rule(param.state, rule, lp.name, log):
                included = False
        for rule in lp.include:
            if not included and state_meets_rule(param.state, rule, lp.name, log):
                included = True
        if included:
            out.layer.add().CopyFrom(lp)
    return out


class Net(PycaffeNetMixin):
    """A built network: layers, blobs and learnable parameters, in Caffe's order.

    Engine methods follow Caffe (forward_pass, backward_pass, forward_from_to, ...); the
    pycaffe surface (forward(**inputs), backward(), blobs, params, ...) comes from the mixin.
    """

    def __init__(self, param, phase=None, level=0, stages=(), weights=None,
                 dtype=numpy.float32, log=True):
        if is_path(phase):  # pycaffe's Net(model, weights, phase)
            weights, phase = phase, level if isinstance(level, int) and level in (TRAIN, TEST) \
                else None
            level = 0
        if is_path(param):
            source = as_path(param)
            param = read_net_param(source)
        else:
            source = "<net>"
            p = caffe_pb2.NetParameter()
            p.CopyFrom(param)
            from .proto.upgrade import upgrade_net_as_needed
            param = upgrade_net_as_needed(p, source)
        if phase is not None:
            param.state.phase = phase
            param.state.level = level
            if stages:
                del param.state.stage[:]
                param.state.stage.extend(stages)
        self.source = source
        self.dtype = numpy.dtype(dtype)
        self.log = log
        self._init(param)
        if weights:
            for w in (weights if isinstance(weights, (list, tuple)) else [weights]):
                self.copy_trained_layers_from(w)

    # ---- construction ------------------------------------------------------------------
    def _info(self, line, msg):
        if self.log:
            glog.info("net.cpp:%d" % line, msg)

    def _init(self, in_param):
        self.phase = in_param.state.phase
        filtered = filter_net(in_param, self.log)
        self._info(53, "Initializing net from parameters: \n"
                   + net_to_text(filtered).rstrip("\n"))
        param = insert_splits(filtered)
        self.name = param.name
        self.param = param
        self.layers = []
        self.layer_names = []
        self._blobs = []            # Blob objects by blob id
        self.blob_names = []
        self.bottom_vecs, self.top_vecs = [], []
        self.bottom_id_vecs, self.top_id_vecs = [], []
        self.bottom_need_backward = []
        self.blob_need_backward = []
        self.blob_loss_weights = []
        self.layer_need_backward = []
        self.param_blobs = []          # every parameter blob, owners and sharers
        self.param_id_vecs = []
        self.param_owners = []
        self.param_display_names = []
        self.param_layer_indices = []
        self.learnable_params = []
        self.learnable_param_ids = []
        self.params_lr, self.params_weight_decay = [], []
        self.has_params_lr, self.has_params_decay = [], []
        self._param_names_index = {}
        self.input_blob_indices, self.output_blob_indices = [], []
        name_to_idx = {}
        available = set()
        memory = 0
        for layer_id, lp in enumerate(param.layer):
            if not lp.HasField("phase"):
                lp.phase = self.phase
            if len(lp.propagate_down) and len(lp.propagate_down) != len(lp.bottom):
                raise CaffeError("Layer %s: propagate_down must be given either 0 or bottom_size "
                                 "(%d) times" % (lp.name, len(lp.bottom)))
            if self.log:
                glog.info("layer_factory.hpp:77", "Creating layer " + lp.name)
            layer = create_layer(lp)
            layer.net_dtype = self.dtype
            self.layers.append(layer)
            self.layer_names.append(lp.name)
            self._info(86, "Creating Layer " + lp.name)
            self.bottom_vecs.append([])
            self.top_vecs.append([])
            self.bottom_id_vecs.append([])
            self.top_id_vecs.append([])
            self.bottom_need_backward.append([])
            self.param_id_vecs.append([])
            need_backward = False
            for j, name in enumerate(lp.bottom):
                if name not in available:
                    raise CaffeError("Unknown bottom blob '%s' (layer '%s', bottom index %d)"
                                     % (name, lp.name, j))
                bid = name_to_idx[name]
                self._info(408, "%s <- %s" % (lp.name, name))
                self.bottom_vecs[-1].append(self._blobs[bid])
                self.bottom_id_vecs[-1].append(bid)
                available.discard(name)
                nb = self.blob_need_backward[bid]
                if len(lp.propagate_down):
                    nb = bool(lp.propagate_down[j])
                self.bottom_need_backward[-1].append(nb)
                need_backward |= self.blob_need_backward[bid]
            for j in range(len(lp.top)):
                self._append_top(lp, layer_id, j, available, name_to_idx)
                if lp.type == "Input":
                    self.input_blob_indices.append(len(self._blobs) - 1)
            if layer.auto_top_blobs:
                needed = max(layer.min_top_blobs, layer.exact_num_top_blobs)
                for j in range(len(lp.top), needed):
                    self._append_top(lp, layer_id, j, None, None)
            layer.setup(self.bottom_vecs[-1], self.top_vecs[-1])
            self._info(124, "Setting up " + lp.name)
            for j, top in enumerate(self.top_vecs[-1]):
                tid = self.top_id_vecs[-1][j]
                while len(self.blob_loss_weights) <= tid:
                    self.blob_loss_weights.append(0.0)
                self.blob_loss_weights[tid] = layer.loss(j)
                self._info(131, "Top shape: " + top.shape_string())
                if layer.loss(j):
                    self._info(134, "    with loss weight " + glog.fmt(layer.loss(j)))
                memory += top.count()
            self._info(139, "Memory required for data: %d" % (memory * 4))
            n_params = len(layer.blobs)
            if len(lp.param) > n_params:
                raise CaffeError("Too many params specified for layer %s (%d param specs, "
                                 "%d parameter blobs)" % (lp.name, len(lp.param), n_params))
            for pid in range(n_params):
                spec = lp.param[pid] if pid < len(lp.param) else caffe_pb2.ParamSpec()
                pnb = spec.lr_mult != 0
                need_backward |= pnb
                layer.set_param_propagate_down(pid, pnb)
            for pid in range(n_params):
                self._append_param(layer_id, pid)
            self.layer_need_backward.append(need_backward)
            if need_backward:
                for tid in self.top_id_vecs[-1]:
                    self.blob_need_backward[tid] = True
        self._infer_backward(param)
        for name in sorted(available):
            self._info(244, "This network produces output " + name)
            self.output_blob_indices.append(name_to_idx[name])
        self.blob_names_index = {n: i for i, n in enumerate(self.blob_names)}
        self.layer_names_index = {n: i for i, n in enumerate(self.layer_names)}
        self._share_weights()
        self.debug_info = param.debug_info
        self._info(257, "Network initialization done.")

    def _append_top(self, lp, layer_id, top_id, available, name_to_idx):
        name = lp.top[top_id] if top_id < len(lp.top) else "(automatic)"
        if name_to_idx is not None and top_id < len(lp.bottom) and name == lp.bottom[top_id]:
            self._info(369, "%s -> %s (in-place)" % (lp.name, name))
            bid = name_to_idx[name]
            self.top_vecs[layer_id].append(self._blobs[bid])
            self.top_id_vecs[layer_id].append(bid)
        elif name_to_idx is not None and name in name_to_idx:
            raise CaffeError("Top blob '%s' produced by multiple sources (layer '%s')"
                             % (name, lp.name))
        else:
            self._info(382, "%s -> %s" % (lp.name, name))
            blob = Blob(dtype=self.dtype)
            bid = len(self._blobs)
            self._blobs.append(blob)
            self.blob_names.append(name)
            self.blob_need_backward.append(False)
            if name_to_idx is not None:
                name_to_idx[name] = bid
            self.top_id_vecs[layer_id].append(bid)
            self.top_vecs[layer_id].append(blob)
        if available is not None:
            available.add(name)

    def _append_param(self, layer_id, param_id):
        lp = self.layers[layer_id].layer_param
        spec = lp.param[param_id] if param_id < len(lp.param) else caffe_pb2.ParamSpec()
        pname = spec.name
        self.param_display_names.append(pname or str(param_id))
        net_pid = len(self.param_blobs)
        blob = self.layers[layer_id].blobs[param_id]
        self.param_blobs.append(blob)
        self.param_id_vecs[layer_id].append(net_pid)
        self.param_layer_indices.append((layer_id, param_id))
        if not pname or pname not in self._param_names_index:
            self.param_owners.append(-1)
            if pname:
                self._param_names_index[pname] = net_pid
            self.learnable_param_ids.append(len(self.learnable_params))
            self.learnable_params.append(blob)
            self.has_params_lr.append(spec.HasField("lr_mult"))
            self.has_params_decay.append(spec.HasField("decay_mult"))
            self.params_lr.append(spec.lr_mult)
            self.params_weight_decay.append(spec.decay_mult)
            return
        owner_pid = self._param_names_index[pname]
        self.param_owners.append(owner_pid)
        owner_layer, owner_param = self.param_layer_indices[owner_pid]
        self._info(498, "Sharing parameters '%s' owned by layer '%s', param index %d"
                   % (pname, self.layer_names[owner_layer], owner_param))
        owner_blob = self.layers[owner_layer].blobs[owner_param]
        if spec.share_mode == caffe_pb2.ParamSpec.PERMISSIVE:
            if blob.count() != owner_blob.count():
                raise CaffeError(
                    "Cannot share param '%s' owned by layer '%s' with layer '%s'; count "
                    "mismatch.  Owner layer param shape is %s; sharing layer shape is %s"
                    % (pname, self.layer_names[owner_layer], lp.name,
                       owner_blob.shape_string(), blob.shape_string()))
        elif blob.shape != owner_blob.shape:
            raise CaffeError(
                "Cannot share param '%s' owned by layer '%s' with layer '%s'; shape mismatch.  "
                "Owner layer param shape is %s; sharing layer expects shape %s"
                % (pname, self.layer_names[owner_layer], lp.name, owner_blob.shape_string(),
                   blob.shape_string()))
        lid = self.learnable_param_ids[owner_pid]
        self.learnable_param_ids.append(lid)
        if spec.HasField("lr_mult"):
            if self.has_params_lr[lid] and spec.lr_mult != self.params_lr[lid]:
                raise CaffeError("Shared param '%s' has mismatched lr_mult." % pname)
            self.has_params_lr[lid] = True
            self.params_lr[lid] = spec.lr_mult
        if spec.HasField("decay_mult"):
            if self.has_params_decay[lid] and spec.decay_mult != self.params_weight_decay[lid]:
                raise CaffeError("Shared param '%s' has mismatched decay_mult." % pname)
            self.has_params_decay[lid] = True
            self.params_weight_decay[lid] = spec.decay_mult

    def _infer_backward(self, param):
        under_loss, skip_backp = set(), set()
        for lid in range(len(self.layers) - 1, -1, -1):
            layer = self.layers[lid]
            contributes, skip = False, True
            for j, tid in enumerate(self.top_id_vecs[lid]):
                name = self.blob_names[tid]
                if layer.loss(j) or name in under_loss:
                    contributes = True
                if name not in skip_backp:
                    skip = False
                if contributes and not skip:
                    break
            if self.layer_need_backward[lid] and skip:
                self.layer_need_backward[lid] = False
                self.bottom_need_backward[lid] = [False] * len(self.bottom_vecs[lid])
            if not contributes:
                self.layer_need_backward[lid] = False
            if self.layer_need_backward[lid]:
                self._info(200, "%s needs backward computation." % self.layer_names[lid])
            else:
                self._info(202, "%s does not need backward computation." % self.layer_names[lid])
            for j, bid in enumerate(self.bottom_id_vecs[lid]):
                name = self.blob_names[bid]
                if contributes:
                    under_loss.add(name)
                else:
                    self.bottom_need_backward[lid][j] = False
                if not self.bottom_need_backward[lid][j]:
                    skip_backp.add(name)
        if param.force_backward:
            for lid, layer in enumerate(self.layers):
                self.layer_need_backward[lid] = True
                for j, bid in enumerate(self.bottom_id_vecs[lid]):
                    nb = self.bottom_need_backward[lid][j] or layer.allow_force_backward(j)
                    self.bottom_need_backward[lid][j] = nb
                    self.blob_need_backward[bid] = self.blob_need_backward[bid] or nb
                for pid in range(len(layer.blobs)):
                    layer.set_param_propagate_down(pid, True)

    def _share_weights(self):
        for pid, owner in enumerate(self.param_owners):
            if owner < 0:
                continue
            self.param_blobs[pid].share_data(self.param_blobs[owner])
            self.param_blobs[pid].share_diff(self.param_blobs[owner])

    # ---- running -----------------------------------------------------------------------
    def forward_from_to(self, start=0, end=None):
        """Run layers start..end inclusive; return the summed weighted loss."""
        if end is None:
            end = len(self.layers) - 1
        loss = 0.0
        for i in range(start, end + 1):
            loss += self.layers[i].forward(self.bottom_vecs[i], self.top_vecs[i])
            if self.debug_info:
                self._forward_debug_info(i)
        return loss

    def forward_pass(self):
        """Forward through the whole net; return the loss (outputs are in output_blobs)."""
        return self.forward_from_to(0, len(self.layers) - 1)

    def backward_from_to(self, start=None, end=0):
        if start is None:
            start = len(self.layers) - 1
        for i in range(start, end - 1, -1):
            if self.layer_need_backward[i]:
                self.layers[i].backward(self.top_vecs[i], self.bottom_need_backward[i],
                                        self.bottom_vecs[i])
                if self.debug_info:
                    self._backward_debug_info(i)

    def backward_pass(self):
        self.backward_from_to(len(self.layers) - 1, 0)
        if self.debug_info:
            ad = sum(p.asum_data() for p in self.learnable_params)
            af = sum(p.asum_diff() for p in self.learnable_params)
            sd = sum(p.sumsq_data() for p in self.learnable_params)
            sf = sum(p.sumsq_diff() for p in self.learnable_params)
            glog.error("net.cpp:619", "    [Backward] All net params (data, diff): L1 norm = "
                       "(%s, %s); L2 norm = (%s, %s)" % (glog.fmt(ad), glog.fmt(af),
                                                         glog.fmt(sd ** 0.5), glog.fmt(sf ** 0.5)))

    def forward_backward(self):
        loss = self.forward_pass()
        self.backward_pass()
        return loss

    def reshape(self):
        for i, layer in enumerate(self.layers):
            layer.reshape(self.bottom_vecs[i], self.top_vecs[i])

    def clear_param_diffs(self):
        for p in self.learnable_params:
            p.diff[...] = 0

    def update(self):
        for p in self.learnable_params:
            p.update()

    def _forward_debug_info(self, lid):
        for j, top in enumerate(self.top_vecs[lid]):
            glog.info("net.cpp:577", "    [Forward] Layer %s, top blob %s data: %s" % (
                self.layer_names[lid], self.blob_names[self.top_id_vecs[lid][j]],
                glog.fmt(top.asum_data() / max(top.count(), 1))))
        for pid, blob in enumerate(self.layers[lid].blobs):
            name = self.param_display_names[self.param_id_vecs[lid][pid]]
            glog.info("net.cpp:588", "    [Forward] Layer %s, param blob %s data: %s" % (
                self.layer_names[lid], name, glog.fmt(blob.asum_data() / max(blob.count(), 1))))

    def _backward_debug_info(self, lid):
        for j, bottom in enumerate(self.bottom_vecs[lid]):
            if not self.bottom_need_backward[lid][j]:
                continue
            glog.info("net.cpp:603", "    [Backward] Layer %s, bottom blob %s diff: %s" % (
                self.layer_names[lid], self.blob_names[self.bottom_id_vecs[lid][j]],
                glog.fmt(bottom.asum_diff() / max(bottom.count(), 1))))
        for pid, blob in enumerate(self.layers[lid].blobs):
            if not self.layers[lid].param_propagate_down[pid]:
                continue
            glog.info("net.cpp:614", "    [Backward] Layer %s, param blob %d diff: %s" % (
                self.layer_names[lid], pid, glog.fmt(blob.asum_diff() / max(blob.count(), 1))))

    def update_debug_info(self, param_id):
        blob = self.param_blobs[param_id]
        owner = self.param_owners[param_id]
        lname = self.layer_names[self.param_layer_indices[param_id][0]]
        name = self.param_display_names[param_id]
        diff = glog.fmt(blob.asum_diff() / max(blob.count(), 1))
        if owner < 0:
            glog.info("net.cpp:636", "    [Update] Layer %s, param %s data: %s; diff: %s" % (
                lname, name, glog.fmt(blob.asum_data() / max(blob.count(), 1)), diff))
        else:
            oname = self.layer_names[self.param_layer_indices[owner][0]]
            glog.info("net.cpp:647", "    [Update] Layer %s, param blob %s (owned by layer %s, "
                      "param %s) diff: %s" % (lname, name, oname,
                                              self.param_display_names[owner], diff))

    # ---- weights -----------------------------------------------------------------------
    def copy_trained_layers_from(self, source):
        """Copy parameters by layer name from a .caffemodel(.h5) path or a NetParameter."""
        if is_path(source):
            from .weights import load_weights
            load_weights(self, as_path(source))
            return
        self.copy_from_net_param(source)

    def copy_from_net_param(self, param, source="<weights>"):
        from .proto.upgrade import upgrade_net_as_needed
        param = upgrade_net_as_needed(param, source)
        for lp in param.layer:
            lid = self.layer_names_index.get(lp.name)
            if lid is None:
                self._info(769, "Ignoring source layer " + lp.name)
                continue
            target = self.layers[lid].blobs
            if len(target) != len(lp.blobs):
                raise CaffeError("%s: incompatible number of blobs for layer %s (net has %d, "
                                 "file has %d)" % (source, lp.name, len(target), len(lp.blobs)))
            for j, (blob, proto) in enumerate(zip(target, lp.blobs)):
                if not blob.shape_equals(proto):
                    raise CaffeError(
                        "%s: cannot copy param %d weights from layer '%s'; shape mismatch.  "
                        "Source param shape is %s; target param shape is %s. To learn this "
                        "layer's parameters from scratch rather than copying from a saved "
                        "net, rename the layer." % (
                            source, j, lp.name, _proto_shape_string(proto), blob.shape_string()))
                blob.from_proto(proto, reshape=False)

    def share_trained_layers_with(self, other):
        """Make this net's parameters use ``other``'s storage (test nets share the train net's)."""
        for lid, name in enumerate(other.layer_names):
            tid = self.layer_names_index.get(name)
            if tid is None:
                continue
            src, dst = other.layers[lid].blobs, self.layers[tid].blobs
            if len(src) != len(dst):
                raise CaffeError("Incompatible number of blobs for layer %s" % name)
            for j, (s, d) in enumerate(zip(src, dst)):
                if s.shape != d.shape:
                    raise CaffeError(
                        "Cannot share param %d weights from layer '%s'; shape mismatch.  Source "
                        "param shape is %s; target param shape is %s"
                        % (j, name, s.shape_string(), d.shape_string()))
                d.share_data(s)

    def to_proto(self, write_diff=False):
        """The net as a NetParameter with every layer's parameter blobs (a .caffemodel)."""
        out = caffe_pb2.NetParameter()
        out.name = self.name
        for layer in self.layers:
            out.layer.add().CopyFrom(layer.to_proto(write_diff))
        return out

    def save(self, path, write_diff=False):
        """Write the weights as a binary .caffemodel (atomically), or HDF5 for *.h5."""
        from .weights import save_weights
        save_weights(self, as_path(path), write_diff)

    # ---- lookups -----------------------------------------------------------------------
    def blob_by_name(self, name):
        if name not in self.blob_names_index:
            raise CaffeError("Unknown blob name " + name)
        return self._blobs[self.blob_names_index[name]]

    def has_blob(self, name):
        return name in self.blob_names_index

    def layer_by_name(self, name):
        if name not in self.layer_names_index:
            raise CaffeError("Unknown layer name " + name)
        return self.layers[self.layer_names_index[name]]

    @property
    def output_blobs(self):
        return [self._blobs[i] for i in self.output_blob_indices]

    @property
    def input_blobs(self):
        return [self._blobs[i] for i in self.input_blob_indices]

    @property
    def output_names(self):
        return [self.blob_names[i] for i in self.output_blob_indices]

    @property
    def input_names(self):
        return [self.blob_names[i] for i in self.input_blob_indices]

    @property
    def all_blobs(self):
        return list(self._blobs)

    def to_backend(self):
        """Move every blob to the active backend (after switching CPU/GPU mode)."""
        seen = set()
        for b in list(self._blobs) + self.param_blobs:
            if id(b) not in seen:
                seen.add(id(b))
                b.to_backend()
        self._share_weights()


def _proto_shape_string(proto):
    from .blob import shape_string
    return shape_string(Blob.proto_shape(proto))
