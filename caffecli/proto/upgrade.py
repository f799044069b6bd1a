"""Upgrades of old net and solver files (V0/V1 layers, legacy inputs, solver_type enum).

Follows Caffe's upgrade_proto.cpp step by step (same order, same log lines): V0 -> V1 (padding
layers folded into the next conv/pool), V1 data transformation fields -> transform_param,
V1 -> current ``layer`` messages with string types, net-level inputs -> an ``Input`` layer,
old three-param BatchNorm specs, and the solver's ``solver_type`` enum -> ``type`` string.
"""
import os

from .. import glog
from ..errors import CaffeError
from . import caffe_pb2
from .upgrade_v0 import upgrade_v0_net

V1 = caffe_pb2.V1LayerParameter

# V1 enum -> current string type (UpgradeV1LayerType).
V1_TYPE_NAMES = {
    V1.NONE: "", V1.ABSVAL: "AbsVal", V1.ACCURACY: "Accuracy", V1.ARGMAX: "ArgMax",
    V1.BNLL: "BNLL", V1.CONCAT: "Concat", V1.CONTRASTIVE_LOSS: "ContrastiveLoss",
    V1.CONVOLUTION: "Convolution", V1.DECONVOLUTION: "Deconvolution", V1.DATA: "Data",
    V1.DROPOUT: "Dropout", V1.DUMMY_DATA: "DummyData", V1.EUCLIDEAN_LOSS: "EuclideanLoss",
    V1.ELTWISE: "Eltwise", V1.EXP: "Exp", V1.FLATTEN: "Flatten", V1.HDF5_DATA: "HDF5Data",
    V1.HDF5_OUTPUT: "HDF5Output", V1.HINGE_LOSS: "HingeLoss", V1.IM2COL: "Im2col",
    V1.IMAGE_DATA: "ImageData", V1.INFOGAIN_LOSS: "InfogainLoss",
    V1.INNER_PRODUCT: "InnerProduct", V1.LRN: "LRN", V1.MEMORY_DATA: "MemoryData",
    V1.MULTINOMIAL_LOGISTIC_LOSS: "MultinomialLogisticLoss", V1.MVN: "MVN",
    V1.POOLING: "Pooling", V1.POWER: "Power", V1.RELU: "ReLU", V1.SIGMOID: "Sigmoid",
    V1.SIGMOID_CROSS_ENTROPY_LOSS: "SigmoidCrossEntropyLoss", V1.SILENCE: "Silence",
    V1.SOFTMAX: "Softmax", V1.SOFTMAX_LOSS: "SoftmaxWithLoss", V1.SPLIT: "Split",
    V1.SLICE: "Slice", V1.TANH: "TanH", V1.WINDOW_DATA: "WindowData",
    V1.THRESHOLD: "Threshold",
}


_SOLVER_TYPES = {
    caffe_pb2.SolverParameter.SGD: "SGD", caffe_pb2.SolverParameter.NESTEROV: "Nesterov",
    caffe_pb2.SolverParameter.ADAGRAD: "AdaGrad", caffe_pb2.SolverParameter.RMSPROP: "RMSProp",
    caffe_pb2.SolverParameter.ADADELTA: "AdaDelta", caffe_pb2.SolverParameter.ADAM: "Adam",
}


# ---- detection ------------------------------------------------------------------------
def net_needs_v0_to_v1_upgrade(param):
    return any(lc.HasField("layer") for lc in param.layers)


def net_needs_v1_to_v2_upgrade(param):
    return len(param.layers) > 0


def net_needs_data_upgrade(param):
    """V1 Data/ImageData/WindowData layers that still carry scale/mean/crop/mirror."""
    for lc in param.layers:
        sub = _DATA_TRANSFORM_LAYERS.get(lc.type)
        if sub and any(getattr(lc, sub).HasField(f) for f in _TRANSFORM_FIELDS):
            return True
    return False


def net_needs_input_upgrade(param):
    return len(param.input) > 0


def net_needs_batchnorm_upgrade(param):
    return any(lp.type == "BatchNorm" and len(lp.param) == 3 for lp in param.layer)


def net_needs_upgrade(param):
    return (net_needs_v0_to_v1_upgrade(param) or net_needs_v1_to_v2_upgrade(param)
            or net_needs_data_upgrade(param) or net_needs_input_upgrade(param)
            or net_needs_batchnorm_upgrade(param))


# ---- V1 data transformation fields ----------------------------------------------------
_DATA_TRANSFORM_LAYERS = {V1.DATA: "data_param", V1.IMAGE_DATA: "image_data_param",
                          V1.WINDOW_DATA: "window_data_param"}
_TRANSFORM_FIELDS = ("scale", "mean_file", "crop_size", "mirror")


def upgrade_net_data_transformation(param):
    """Move scale/mean_file/crop_size/mirror of V1 data layers into transform_param."""
    for lc in param.layers:
        sub = _DATA_TRANSFORM_LAYERS.get(lc.type)
        if not sub:
            continue
        msg = getattr(lc, sub)
        for f in _TRANSFORM_FIELDS:
            if msg.HasField(f):
                setattr(lc.transform_param, f, getattr(msg, f))
                msg.ClearField(f)


# ---- V1 -> current --------------------------------------------------------------------
_V1_SUBPARAMS = [f.name for f in V1.DESCRIPTOR.fields
                 if f.name.endswith("_param") and f.name in
                 caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name]


def upgrade_v1_layer(v1, source):
    """One V1LayerParameter as a LayerParameter; returns (layer, fully_compatible)."""
    out = caffe_pb2.LayerParameter()
    ok = True
    out.bottom.extend(v1.bottom)
    out.top.extend(v1.top)
    if v1.HasField("name"):
        out.name = v1.name
    for r in v1.include:
        out.include.add().CopyFrom(r)
    for r in v1.exclude:
        out.exclude.add().CopyFrom(r)
    if v1.HasField("type"):
        if v1.type not in V1_TYPE_NAMES:
            raise CaffeError("%s: Unknown V1LayerParameter layer type: %d" % (source, v1.type))
        out.type = V1_TYPE_NAMES[v1.type]
    for b in v1.blobs:
        out.blobs.add().CopyFrom(b)

    def spec(i):
        while len(out.param) <= i:
            out.param.add()
        return out.param[i]
    for i, name in enumerate(v1.param):
        spec(i).name = name
    for i, mode in enumerate(v1.blob_share_mode):
        spec(i).share_mode = (caffe_pb2.ParamSpec.STRICT if mode == V1.STRICT
                              else caffe_pb2.ParamSpec.PERMISSIVE)
    for i, lr in enumerate(v1.blobs_lr):
        spec(i).lr_mult = lr
    for i, decay in enumerate(v1.weight_decay):
        spec(i).decay_mult = decay
    out.loss_weight.extend(v1.loss_weight)
    for name in _V1_SUBPARAMS:
        if v1.HasField(name):
            getattr(out, name).CopyFrom(getattr(v1, name))
    if v1.HasField("layer"):
        glog.error("upgrade_proto.v0_layers_ignored",
                   "Input NetParameter has V0 layer -- ignoring.")
        ok = False
    return out, ok


def upgrade_v1_net(param, source):
    """A V1 net (layers { type: ENUM }) as a current net; returns (net, fully_compatible)."""
    if len(param.layer) > 0:
        raise CaffeError(
            "%s: Refusing to upgrade inconsistent NetParameter input; the definition includes "
            "both 'layer' and 'layers' fields. The current format defines 'layer' fields with "
            "string type like layer { type: 'Layer' ... } and not layers { type: LAYER ... }. "
            "Manually switch the definition to 'layer' format to continue." % source)
    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    del out.layers[:]
    del out.layer[:]
    ok = True
    for i, v1 in enumerate(param.layers):
        layer, good = upgrade_v1_layer(v1, source)
        out.layer.add().CopyFrom(layer)
        if not good:
            glog.error("upgrade_proto.input_layer_failed", "Upgrade of input layer %d failed." % i)
            ok = False
    return out, ok


# ---- legacy inputs and BatchNorm ------------------------------------------------------
def upgrade_net_input(param, source="<net>"):
    """Net-level input/input_shape/input_dim -> an Input layer named 'input', placed first.

    An input without shape or dims (old .caffemodel files) is simply dropped."""
    n = len(param.input)
    has_shape, has_dim = len(param.input_shape) > 0, len(param.input_dim) > 0
    if has_shape or has_dim:
        if has_shape and len(param.input_shape) < n:
            raise CaffeError("%s: %d inputs but only %d input_shape entries"
                             % (source, n, len(param.input_shape)))
        if not has_shape and len(param.input_dim) < 4 * n:
            raise CaffeError("%s: %d inputs need %d input_dim values (4 per input), got %d"
                             % (source, n, 4 * n, len(param.input_dim)))
        layer = caffe_pb2.LayerParameter(name="input", type="Input")
        for i, name in enumerate(param.input):
            layer.top.append(name)
            shape = layer.input_param.shape.add()
            if has_shape:
                shape.CopyFrom(param.input_shape[i])
            else:
                shape.dim.extend(param.input_dim[4 * i:4 * i + 4])
        rest = [caffe_pb2.LayerParameter() for _ in param.layer]
        for r, lp in zip(rest, param.layer):
            r.CopyFrom(lp)
        del param.layer[:]
        param.layer.add().CopyFrom(layer)
        for r in rest:
            param.layer.add().CopyFrom(r)
    param.ClearField("input")
    param.ClearField("input_shape")
    param.ClearField("input_dim")


def upgrade_net_batchnorm(param):
    """Old BatchNorm layers declared 3 param specs: freeze them (lr_mult = decay_mult = 0)."""
    for lp in param.layer:
        if lp.type == "BatchNorm" and len(lp.param) == 3:
            for spec in lp.param:
                spec.lr_mult = 0.0
                spec.decay_mult = 0.0


# ---- entry points ---------------------------------------------------------------------
def upgrade_net_as_needed(param, source="<net>", batch_norm=True):
    """Upgrade ``param`` in place (and return it) as Caffe's UpgradeNetAsNeeded does; without
    ``batch_norm``, BatchNorm's three param specs are left as they are."""
    if net_needs_v0_to_v1_upgrade(param):
        glog.info("upgrade_proto.v0_attempt",
                  "Attempting to upgrade input file specified using deprecated "
                  "V0LayerParameter: " + source)
        upgraded, ok = upgrade_v0_net(param, source)
        param.CopyFrom(upgraded)
        if ok:
            glog.info("upgrade_proto.v0_done",
                      "Successfully upgraded file specified using deprecated "
                      "V0LayerParameter")
        else:
            glog.error("upgrade_proto.v0_problems", "Warning: had one or more problems upgrading "
                       "V0NetParameter to NetParameter (see above); continuing anyway.")
        glog.warning("upgrade_proto.v0_note", "Note that future Caffe releases will not support "
                     "V0NetParameter; use ./build/tools/upgrade_net_proto_text for prototxt "
                     "and ./build/tools/upgrade_net_proto_binary for model weights upgrade this "
                     "and any other net protos to the new format.")
    if net_needs_data_upgrade(param):
        glog.info("upgrade_proto.transform_attempt",
                  "Attempting to upgrade input file specified using deprecated "
                  "transformation parameters: " + source)
        upgrade_net_data_transformation(param)
        glog.info("upgrade_proto.transform_done",
                  "Successfully upgraded file specified using deprecated data "
                  "transformation parameters.")
        glog.warning("upgrade_proto.transform_note",
                     "Note that future Caffe releases will only support "
                     "transform_param messages for transformation fields.")
    if net_needs_v1_to_v2_upgrade(param):
        glog.info("upgrade_proto.v1_attempt",
                  "Attempting to upgrade input file specified using deprecated "
                  "V1LayerParameter: " + source)
        upgraded, ok = upgrade_v1_net(param, source)
        param.CopyFrom(upgraded)
        if ok:
            glog.info("upgrade_proto.v1_done",
                      "Successfully upgraded file specified using deprecated "
                      "V1LayerParameter")
        else:
            glog.error("upgrade_proto.v1_problems", "Warning: had one or more problems upgrading "
                       "V1LayerParameter (see above); continuing anyway.")
    if net_needs_input_upgrade(param):
        glog.info("upgrade_proto.input_attempt",
                  "Attempting to upgrade input file specified using deprecated "
                  "input fields: " + source)
        upgrade_net_input(param, source)
        glog.info("upgrade_proto.input_done",
                  "Successfully upgraded file specified using deprecated "
                  "input fields.")
        glog.warning("upgrade_proto.input_note",
                     "Note that future Caffe releases will only support "
                     "input layers and not input fields.")
    if batch_norm and net_needs_batchnorm_upgrade(param):
        glog.info("upgrade_proto.batchnorm_attempt",
                  "Attempting to upgrade batch norm layers using deprecated "
                  "params: " + source)
        upgrade_net_batchnorm(param)
        glog.info("upgrade_proto.batchnorm_done",
                  "Successfully upgraded batch norm layers using deprecated "
                  "params.")
    return param


def upgrade_solver_type(param, source="<solver>"):
    """solver_type enum -> type string; False when there was nothing to upgrade."""
    if param.HasField("solver_type") and param.HasField("type"):
        raise CaffeError("%s: Failed to upgrade solver: old solver_type field (enum) and new "
                         "type field (string) cannot be both specified in solver proto text."
                         % source)
    if not param.HasField("solver_type"):
        glog.error("upgrade_proto.solver_type_current", "Warning: solver type already up to date. ")
        return False
    if param.solver_type not in _SOLVER_TYPES:
        raise CaffeError("%s: Unknown SolverParameter solver_type: %d"
                         % (source, param.solver_type))
    param.type = _SOLVER_TYPES[param.solver_type]
    param.ClearField("solver_type")
    return True


def upgrade_solver_as_needed(param, source="<solver>"):
    """Upgrade a SolverParameter in place (and return it) as Caffe's UpgradeSolverAsNeeded,
    then reject values no solver can run with."""
    if param.HasField("solver_type"):
        glog.info("upgrade_proto.solver_attempt",
                  "Attempting to upgrade input file specified using deprecated "
                  "'solver_type' field (enum)': " + source)
        if upgrade_solver_type(param, source):
            glog.info("upgrade_proto.solver_done",
                      "Successfully upgraded file specified using deprecated "
                      "'solver_type' field (enum) to 'type' field (string).")
            glog.warning("upgrade_proto.solver_note",
                         "Note that future Caffe releases will only support "
                         "'type' field (string) for a solver's type.")
        else:
            glog.error("upgrade_proto.solver_problems",
                       "Warning: had one or more problems upgrading "
                       "SolverType (see above).")
    check_solver_values(param, source)
    return param


def check_solver_values(param, source):
    """Caffe divides by iter_size (a 0 trains to nan) and never checks it; we do."""
    if param.iter_size < 1:
        raise CaffeError("%s: iter_size must be at least 1 (got %d)" % (source, param.iter_size))


def upgrade_snapshot_prefix(param, source):
    """Default snapshot_prefix to the solver file's path without extension, or put the file's
    stem under a directory prefix (Caffe's UpgradeSnapshotPrefixProperty)."""
    if not param.HasField("snapshot_prefix"):
        param.snapshot_prefix = os.path.splitext(source)[0]
        glog.info("upgrade_proto.prefix_default", "snapshot_prefix was not specified and is set to "
                  + param.snapshot_prefix)
    elif os.path.isdir(param.snapshot_prefix):
        stem = os.path.splitext(os.path.basename(source))[0]
        param.snapshot_prefix = os.path.join(param.snapshot_prefix, stem)
        glog.info("upgrade_proto.prefix_directory",
                  "snapshot_prefix was a directory and is replaced to "
                  + param.snapshot_prefix)
    return param
