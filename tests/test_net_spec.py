"""caffe.net_spec (NetSpec, caffe.layers as L, caffe.params as P) and caffe.coord_map, against the
text and names pycaffe's net_spec.py produces for the same code."""
import copy

import pytest
from google.protobuf import text_format
from google.protobuf.internal import api_implementation

import caffe
from caffe import layers as L, params as P
from caffe.coord_map import coord_map_from_to, crop
from caffecli.proto import caffe_pb2


def small_net():
    n = caffe.NetSpec()
    n.data, n.label = L.DummyData(shape=[dict(dim=[8, 1, 6, 6]), dict(dim=[8])],
                                  transform_param=dict(scale=0.5), ntop=2)
    n.conv1 = L.Convolution(n.data, kernel_size=3, num_output=4,
                            param=[dict(lr_mult=1), dict(lr_mult=2, decay_mult=0)],
                            weight_filler=dict(type="xavier"))
    n.pool1 = L.Pooling(n.conv1, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.relu1 = L.ReLU(n.pool1, in_place=True)
    n.ip = L.InnerProduct(n.relu1, num_output=3, include=dict(phase=caffe.TRAIN))
    n.loss = L.SoftmaxWithLoss(n.ip, n.label, loss_weight=0.5)
    return n


# What pycaffe's NetSpec writes for small_net(): names from the NetSpec attributes, the ReLU
# in place over pool1 but named relu1, keywords routed to <type>_param or the layer.
SMALL_NET_TEXT = """\
layer {
  name: "data"
  type: "DummyData"
  top: "data"
  top: "label"
  transform_param {
    scale: 0.5
  }
  dummy_data_param {
    shape {
      dim: 8
      dim: 1
      dim: 6
      dim: 6
    }
    shape {
      dim: 8
    }
  }
}
layer {
  name: "conv1"
  type: "Convolution"
  bottom: "data"
  top: "conv1"
  param {
    lr_mult: 1
  }
  param {
    lr_mult: 2
    decay_mult: 0
  }
  convolution_param {
    num_output: 4
    kernel_size: 3
    weight_filler {
      type: "xavier"
    }
  }
}
layer {
  name: "pool1"
  type: "Pooling"
  bottom: "conv1"
  top: "pool1"
  pooling_param {
    pool: MAX
    kernel_size: 2
    stride: 2
  }
}
layer {
  name: "relu1"
  type: "ReLU"
  bottom: "pool1"
  top: "pool1"
}
layer {
  name: "ip"
  type: "InnerProduct"
  bottom: "pool1"
  top: "ip"
  include {
    phase: TRAIN
  }
  inner_product_param {
    num_output: 3
  }
}
layer {
  name: "loss"
  type: "SoftmaxWithLoss"
  bottom: "ip"
  bottom: "label"
  top: "loss"
  loss_weight: 0.5
}
"""


def test_netspec_text_is_pycaffes():
    proto = small_net().to_proto()
    assert isinstance(proto, caffe_pb2.NetParameter)
    expected = text_format.Parse(SMALL_NET_TEXT, caffe_pb2.NetParameter())
    assert proto == expected
    assert str(proto) == str(expected)
    if api_implementation.Type() == "upb":  # protobuf's own printing, as pycaffe's str() gives
        assert str(proto) == SMALL_NET_TEXT


def test_float_fields_print_as_protobuf_prints_them():
    n = caffe.NetSpec()
    n.data = L.DummyData(shape=dict(dim=[1]), transform_param=dict(scale=1. / 255))
    proto = n.to_proto()
    assert text_format.Parse(str(proto), caffe_pb2.NetParameter()) == proto
    if api_implementation.Type() == "upb":
        assert "scale: 0.00392156886\n" in str(proto)
        assert "scale: 0.003921569\n" in text_format.MessageToString(proto)


def test_anonymous_tops_get_type_and_counter_names():
    data, label = L.DummyData(shape=[dict(dim=[2, 3]), dict(dim=[2])], ntop=2)
    ip = L.InnerProduct(data, num_output=2)
    relu = L.ReLU(ip, in_place=True)
    loss = L.SoftmaxWithLoss(L.InnerProduct(relu, num_output=2), label)
    proto = loss.to_proto()
    assert [(l.name, list(l.bottom), list(l.top)) for l in proto.layer] == [
        ("DummyData1", [], ["DummyData1", "DummyData2"]),
        ("InnerProduct1", ["DummyData1"], ["InnerProduct1"]),
        ("ReLU1", ["InnerProduct1"], ["InnerProduct1"]),
        ("InnerProduct2", ["InnerProduct1"], ["InnerProduct2"]),
        ("SoftmaxWithLoss1", ["InnerProduct2", "DummyData2"], ["SoftmaxWithLoss1"])]


def test_zero_top_layers_are_named_by_the_netspec():
    n = caffe.NetSpec()
    n.data, n.data2 = L.DummyData(shape=dict(dim=3), ntop=2)
    n.silence_data = L.Silence(n.data, ntop=0)
    n.silence_data2 = L.Silence(n.data2, ntop=0)
    layers = n.to_proto().layer
    assert [(l.name, list(l.bottom), list(l.top)) for l in layers[1:]] == [
        ("silence_data", ["data"], []), ("silence_data2", ["data2"], [])]
    assert list(layers[0].dummy_data_param.shape[0].dim) == [3]  # one value, a repeated field


def test_layer_order_follows_assignment_and_dependencies():
    n = caffe.NetSpec()
    late = L.DummyData(shape=dict(dim=[1, 2]))
    n.b = L.ReLU(late)
    n.a = late
    assert [l.name for l in n.to_proto().layer] == ["a", "b"]
    assert list(n.tops) == ["b", "a"] and n["a"] is late and n.a is late


def test_inputs_must_be_tops():
    data = L.DummyData(ntop=2)
    with pytest.raises(TypeError, match=r"^Silence input 0 is not a Top \(type is <class "
                                        r"'tuple'>\)$"):
        L.Silence(data, ntop=0)
    assert isinstance(L.Silence(*data, ntop=0), caffe.net_spec.Function)


def test_unknown_fields_and_missing_tops():
    with pytest.raises(AttributeError, match="Deconvolution layer Deconvolution1: 'num_output'"):
        L.Deconvolution(L.DummyData(shape=dict(dim=[1])), num_output=2).to_proto()
    n = caffe.NetSpec()
    with pytest.raises(KeyError):
        n.missing
    assert not hasattr(n, "missing")
    assert copy.copy(n).tops == n.tops


def test_params_pseudo_module_reads_enums():
    assert P.Pooling.MAX == caffe_pb2.PoolingParameter.MAX
    assert P.Data.LMDB == caffe_pb2.DataParameter.LMDB
    assert caffe.net_spec.param_name_dict()["InnerProduct"] == "inner_product"


def test_netspec_net_builds_and_runs(tmp_path):
    n = caffe.NetSpec()
    n.data, n.label = L.DummyData(shape=[dict(dim=[2, 1, 8, 8]), dict(dim=[2])],
                                  data_filler=[dict(type="gaussian"), dict(type="constant")],
                                  ntop=2)
    n.conv = L.Convolution(n.data, kernel_size=3, num_output=2, weight_filler=dict(type="xavier"))
    n.relu = L.ReLU(n.conv, in_place=True)
    n.ip = L.InnerProduct(n.relu, num_output=3, weight_filler=dict(type="xavier"))
    n.loss = L.SoftmaxWithLoss(n.ip, n.label)
    path = tmp_path / "net.prototxt"
    path.write_text(str(n.to_proto()))
    net = caffe.Net(str(path), caffe.TRAIN)
    assert [l.type for l in net.layers] == ["DummyData", "Convolution", "ReLU", "InnerProduct",
                                            "SoftmaxWithLoss"]
    assert float(net.forward()["loss"]) > 0


# ---- coord_map ----------------------------------------------------------------------------------
def conv_pool_deconv(pool=2, dstride=2, pad=0, dpad=0):
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[2, 1, 100, 100]))
    n.conv = L.Convolution(n.data, num_output=10, kernel_size=3, stride=1, pad=pad)
    n.pool = L.Pooling(n.conv, pool=P.Pooling.MAX, kernel_size=pool, stride=pool, pad=0)
    n.deconv = L.Deconvolution(n.pool, convolution_param=dict(
        num_output=10, kernel_size=2 * dstride, stride=dstride, pad=dpad))
    return n


def test_coord_map_through_conv_pool_deconv():
    n = conv_pool_deconv()
    assert coord_map_from_to(n.deconv, n.data) == (1, 1, 0)
    n = conv_pool_deconv(pool=4, dstride=4)
    assert coord_map_from_to(n.deconv, n.data) == (1, 1, -1)
    n = conv_pool_deconv(pad=3)
    assert coord_map_from_to(n.deconv, n.data)[2] == -3  # conv padding shifts by -pad


def test_crop_builds_an_aligning_crop_layer():
    n = conv_pool_deconv(pad=2)
    n.crop = crop(n.deconv, n.data)
    layer = n.crop.to_proto().layer[-1]
    assert layer.type == "Crop" and list(layer.bottom) == ["Deconvolution1", "Input1"]
    assert layer.crop_param.axis == 2 and list(layer.crop_param.offset) == [2]
    assert coord_map_from_to(n.crop, n.data) == (1, 1, 0)


def test_coord_map_errors():
    n = conv_pool_deconv()
    n.ip = L.InnerProduct(n.deconv, num_output=10)
    with pytest.raises(RuntimeError, match="connected by spatial layers"):
        coord_map_from_to(n.ip, n.data)
    for net, message in ((conv_pool_deconv(pool=3, dstride=2), "scale mismatch"),
                         (conv_pool_deconv(dpad=10), "negative offset")):
        with pytest.raises(AssertionError, match=message):
            crop(net.deconv, net.data)
