"""Caffe's V0 net format (UpgradeV0Net in upgrade_proto.cpp): V0 layer connections to V1 layers,
padding layers folded into the next convolution or pooling, with Caffe's log lines."""
from .. import glog
from ..errors import CaffeError
from . import caffe_pb2

V1 = caffe_pb2.V1LayerParameter

# V0 type string -> V1 enum (UpgradeV0LayerType).
V0_TYPES = {
    "accuracy": V1.ACCURACY, "bnll": V1.BNLL, "concat": V1.CONCAT, "conv": V1.CONVOLUTION,
    "data": V1.DATA, "dropout": V1.DROPOUT, "euclidean_loss": V1.EUCLIDEAN_LOSS,
    "flatten": V1.FLATTEN, "hdf5_data": V1.HDF5_DATA, "hdf5_output": V1.HDF5_OUTPUT,
    "im2col": V1.IM2COL, "images": V1.IMAGE_DATA, "infogain_loss": V1.INFOGAIN_LOSS,
    "innerproduct": V1.INNER_PRODUCT, "lrn": V1.LRN,
    "multinomial_logistic_loss": V1.MULTINOMIAL_LOGISTIC_LOSS, "pool": V1.POOLING,
    "relu": V1.RELU, "sigmoid": V1.SIGMOID, "softmax": V1.SOFTMAX,
    "softmax_loss": V1.SOFTMAX_LOSS, "split": V1.SPLIT, "tanh": V1.TANH,
    "window_data": V1.WINDOW_DATA,
}


# (V0 field, {v0 layer type: (V1 sub-message, field there, how)}); how is "set", "add"
# (repeated) or "copy" (message). A type not listed logs Caffe's "Unknown parameter" error.
_CONV_IP = {"conv": "convolution_param", "innerproduct": "inner_product_param"}


_DATA_SRC = {"data": "data_param", "hdf5_data": "hdf5_data_param",
             "images": "image_data_param", "window_data": "window_data_param"}


def _route(mapping, field, how="set"):
    return {t: (msg, field, how) for t, msg in mapping.items()}


V0_FIELDS = [
    ("num_output", _route(_CONV_IP, "num_output")),
    ("biasterm", _route(_CONV_IP, "bias_term")),
    ("weight_filler", _route(_CONV_IP, "weight_filler", "copy")),
    ("bias_filler", _route(_CONV_IP, "bias_filler", "copy")),
    ("pad", {"conv": ("convolution_param", "pad", "add"),
             "pool": ("pooling_param", "pad", "set")}),
    ("kernelsize", {"conv": ("convolution_param", "kernel_size", "add"),
                    "pool": ("pooling_param", "kernel_size", "set")}),
    ("group", {"conv": ("convolution_param", "group", "set")}),
    ("stride", {"conv": ("convolution_param", "stride", "add"),
                "pool": ("pooling_param", "stride", "set")}),
    ("pool", {"pool": ("pooling_param", "pool", "set")}),
    ("dropout_ratio", {"dropout": ("dropout_param", "dropout_ratio", "set")}),
    ("local_size", {"lrn": ("lrn_param", "local_size", "set")}),
    ("alpha", {"lrn": ("lrn_param", "alpha", "set")}),
    ("beta", {"lrn": ("lrn_param", "beta", "set")}),
    ("k", {"lrn": ("lrn_param", "k", "set")}),
    ("source", dict(_route(_DATA_SRC, "source"),
                    infogain_loss=("infogain_loss_param", "source", "set"))),
    ("scale", None),        # None: always into transform_param (see _V0_TRANSFORM)
    ("meanfile", None),
    ("batchsize", _route(_DATA_SRC, "batch_size")),
    ("cropsize", None),
    ("mirror", None),
    ("rand_skip", {"data": ("data_param", "rand_skip", "set"),
                   "images": ("image_data_param", "rand_skip", "set")}),
    ("shuffle_images", {"images": ("image_data_param", "shuffle", "set")}),
    ("new_height", {"images": ("image_data_param", "new_height", "set")}),
    ("new_width", {"images": ("image_data_param", "new_width", "set")}),
    ("concat_dim", {"concat": ("concat_param", "concat_dim", "set")}),
    ("det_fg_threshold", {"window_data": ("window_data_param", "fg_threshold", "set")}),
    ("det_bg_threshold", {"window_data": ("window_data_param", "bg_threshold", "set")}),
    ("det_fg_fraction", {"window_data": ("window_data_param", "fg_fraction", "set")}),
    ("det_context_pad", {"window_data": ("window_data_param", "context_pad", "set")}),
    ("det_crop_mode", {"window_data": ("window_data_param", "crop_mode", "set")}),
    ("hdf5_output_param", {"hdf5_output": ("hdf5_output_param", None, "copy")}),
]


_V0_TRANSFORM = {"scale": "scale", "meanfile": "mean_file", "cropsize": "crop_size",
                 "mirror": "mirror"}


_V0_POOL = {caffe_pb2.V0LayerParameter.MAX: caffe_pb2.PoolingParameter.MAX,
            caffe_pb2.V0LayerParameter.AVE: caffe_pb2.PoolingParameter.AVE,
            caffe_pb2.V0LayerParameter.STOCHASTIC: caffe_pb2.PoolingParameter.STOCHASTIC}


# ---- V0 -> V1 -------------------------------------------------------------------------
def upgrade_v0_padding_layers(param, source):
    """Drop V0 'padding' layers, giving their pad to the conv/pool layer that reads them."""
    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    del out.layers[:]
    last_top = {name: -1 for name in param.input}
    for i, lc in enumerate(param.layers):
        v0 = lc.layer
        if v0.type != "padding":
            out.layers.add().CopyFrom(lc)
        for j, blob in enumerate(lc.bottom):
            if blob not in last_top:
                raise CaffeError("%s: Unknown blob input %s to layer %d" % (source, blob, j))
            src_idx = last_top[blob]
            if src_idx == -1:
                continue
            src = param.layers[src_idx]
            if src.layer.type != "padding":
                continue
            if v0.type not in ("conv", "pool"):
                raise CaffeError("%s: Padding layer input to non-convolutional / non-pooling "
                                 "layer type %s" % (source, v0.type))
            if len(lc.bottom) != 1 or len(src.bottom) != 1 or len(src.top) != 1:
                raise CaffeError("%s: a padding layer and the conv/pool layer it feeds must each "
                                 "have one bottom and one top (layer %s)" % (source, v0.name))
            target = out.layers[len(out.layers) - 1]
            target.layer.pad = src.layer.pad
            target.bottom[j] = src.bottom[0]
        for blob in lc.top:
            last_top[blob] = i
    return out


def upgrade_v0_layer(v0_conn, source):
    """One V0 layer connection as a V1LayerParameter; returns (layer, fully_compatible)."""
    out = caffe_pb2.V1LayerParameter()
    ok = True
    out.bottom.extend(v0_conn.bottom)
    out.top.extend(v0_conn.top)
    if not v0_conn.HasField("layer"):
        return out, ok
    v0 = v0_conn.layer
    if v0.HasField("name"):
        out.name = v0.name
    kind = v0.type
    if v0.HasField("type"):
        if kind not in V0_TYPES:
            raise CaffeError("%s: Unknown layer name: %s" % (source, kind))
        out.type = V0_TYPES[kind]
    for b in v0.blobs:
        out.blobs.add().CopyFrom(b)
    out.blobs_lr.extend(v0.blobs_lr)
    out.weight_decay.extend(v0.weight_decay)
    for field, routes in V0_FIELDS:
        if not v0.HasField(field):
            continue
        value = getattr(v0, field)
        if routes is None:
            setattr(out.transform_param, _V0_TRANSFORM[field], value)
            continue
        route = routes.get(kind)
        if route is None:
            glog.error("upgrade_proto.v0_unknown_%s" % field, "Unknown parameter %s for layer type %s"
                       % ("shuffle" if field == "shuffle_images" else field, kind))
            ok = False
            continue
        msg_name, target, how = route
        msg = getattr(out, msg_name)
        if field == "pool":
            if value not in _V0_POOL:
                glog.error("upgrade_proto.unknown_pool", "Unknown pool method %d" % value)
                ok = False
                continue
            value = _V0_POOL[value]
        if how == "copy":
            (getattr(msg, target) if target else msg).CopyFrom(value)
        elif how == "add":
            getattr(msg, target).append(value)
        else:
            setattr(msg, target, value)
    return out, ok


def upgrade_v0_net(param, source):
    """A V0 net (layers { layer { ... } }) as a V1 net; returns (net, fully_compatible)."""
    padded = upgrade_v0_padding_layers(param, source)
    out = caffe_pb2.NetParameter()
    ok = True
    if padded.HasField("name"):
        out.name = padded.name
    for lc in padded.layers:
        layer, good = upgrade_v0_layer(lc, source)
        out.layers.add().CopyFrom(layer)
        ok &= good
    out.input.extend(padded.input)
    out.input_dim.extend(padded.input_dim)
    if padded.HasField("force_backward"):
        out.force_backward = padded.force_backward
    return out, ok
