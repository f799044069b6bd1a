"""Upgrades of legacy nets and solvers (Caffe's upgrade_proto.cpp): V0, V1, inputs, solver_type."""
import os

import numpy
import pytest

from caffecli.errors import CaffeError
from caffecli import Net
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text, read_net_param, read_solver_param, write_binary
from caffecli.proto.upgrade import (net_needs_upgrade, upgrade_net_as_needed,
                                    upgrade_snapshot_prefix, upgrade_solver_as_needed)
from golden import Case, case_names


def upgraded(text, source="test.prototxt"):
    return upgrade_net_as_needed(parse_text(text, caffe_pb2.NetParameter()), source)


def shape_of(input_layer, i=0):
    return list(input_layer.input_param.shape[i].dim)


# ---- golden legacy nets: the NetParameter itself -----------------------------------------
LEGACY = case_names({"legacy"})


@pytest.mark.parametrize("name", LEGACY or ["<none>"])
def test_legacy_case_upgrades_to_current_format(name):
    case = Case(name) if name != "<none>" else pytest.skip("no golden corpus")
    param = read_net_param(case.path("net.prototxt"))
    assert len(param.layers) == 0 and len(param.input) == 0 and len(param.input_dim) == 0
    assert not net_needs_upgrade(param)
    first = param.layer[0]
    assert (first.name, first.type) == ("input", "Input")
    assert list(first.top) == case.meta["inputs"]
    types = {lp.type for lp in param.layer}
    assert set(case.meta["layer_types"]) - {"Input"} <= types
    for lp in param.layer:
        assert lp.type and lp.type[0].isupper(), lp


def test_v0_net_upgrade(logs):
    text = open(Case("legacy__v0_layers").path("net.prototxt")).read()
    p = upgraded(text, "v0.prototxt")
    assert [(lp.name, lp.type) for lp in p.layer] == [
        ("input", "Input"), ("conv", "Convolution"), ("relu", "ReLU"), ("pool", "Pooling"),
        ("ip", "InnerProduct")]
    assert shape_of(p.layer[0]) == [2, 3, 6, 6]
    conv = p.layer[1].convolution_param
    assert conv.num_output == 4 and list(conv.kernel_size) == [3]
    assert conv.weight_filler.std == 0.5 and conv.bias_filler.value == pytest.approx(0.2)
    pool = p.layer[3].pooling_param
    assert (pool.pool, pool.kernel_size, pool.stride) == (caffe_pb2.PoolingParameter.MAX, 2, 2)
    assert p.layer[4].inner_product_param.num_output == 3
    assert p.force_backward
    out = logs.getvalue()
    for line in ("upgrade_proto.cpp:28] Attempting to upgrade input file specified using "
                 "deprecated V0LayerParameter: v0.prototxt",
                 "upgrade_proto.cpp:36] Successfully upgraded file specified using deprecated "
                 "V0LayerParameter",
                 "upgrade_proto.cpp:55] Attempting to upgrade input file specified using "
                 "deprecated V1LayerParameter: v0.prototxt",
                 "upgrade_proto.cpp:69] Attempting to upgrade input file specified using "
                 "deprecated input fields: v0.prototxt"):
        assert line in out


def test_v0_padding_layer_folds_into_conv_and_pool():
    p = upgraded('''
      input: "data" input_dim: 1 input_dim: 1 input_dim: 5 input_dim: 5
      layers { layer { name: "pad1" type: "padding" pad: 2 } bottom: "data" top: "pad1" }
      layers { layer { name: "conv1" type: "conv" num_output: 2 kernelsize: 3 stride: 2
                       group: 1 biasterm: false } bottom: "pad1" top: "conv1" }
      layers { layer { name: "pad2" type: "padding" pad: 1 } bottom: "conv1" top: "pad2" }
      layers { layer { name: "pool1" type: "pool" pool: AVE kernelsize: 3 stride: 1 }
               bottom: "pad2" top: "pool1" }''')
    assert [lp.name for lp in p.layer] == ["input", "conv1", "pool1"]
    conv, pool = p.layer[1], p.layer[2]
    assert list(conv.bottom) == ["data"] and list(pool.bottom) == ["conv1"]
    cp = conv.convolution_param
    assert (list(cp.pad), list(cp.kernel_size), list(cp.stride), cp.bias_term) == (
        [2], [3], [2], False)
    pp = pool.pooling_param
    assert (pp.pad, pp.kernel_size, pp.pool) == (1, 3, caffe_pb2.PoolingParameter.AVE)


def test_v0_padding_into_other_layer_fails_naming_file():
    with pytest.raises(CaffeError, match="bad.prototxt.*non-convolutional"):
        upgraded('''input: "d"
          layers { layer { name: "p" type: "padding" pad: 1 } bottom: "d" top: "p" }
          layers { layer { name: "r" type: "relu" } bottom: "p" top: "r" }''', "bad.prototxt")


def test_v0_unknown_type_fails_naming_file():
    with pytest.raises(CaffeError, match="old.prototxt.*Unknown layer name: frobnicate"):
        upgraded('layers { layer { name: "x" type: "frobnicate" } }', "old.prototxt")


def test_v0_data_layer_fields_and_incompatible_param(logs):
    p = upgraded('''layers { layer { name: "d" type: "data" source: "db" batchsize: 8
        scale: 0.5 meanfile: "m.bp" cropsize: 4 mirror: true rand_skip: 3 } top: "data" }
      layers { layer { name: "r" type: "relu" num_output: 3 } bottom: "data" top: "data" }
      layers { layer { name: "n" type: "lrn" local_size: 3 alpha: 0.1 beta: 0.7 k: 2 }
               bottom: "data" top: "n" }
      layers { layer { name: "dr" type: "dropout" dropout_ratio: 0.3 } bottom: "n" top: "n" }''')
    d = p.layer[0]
    assert d.type == "Data"
    assert (d.data_param.source, d.data_param.batch_size, d.data_param.rand_skip) == ("db", 8, 3)
    t = d.transform_param
    assert (t.scale, t.mean_file, t.crop_size, t.mirror) == (0.5, "m.bp", 4, True)
    assert p.layer[1].type == "ReLU"
    assert "Unknown parameter num_output for layer type relu" in logs.getvalue()
    assert "had one or more problems upgrading V0NetParameter" in logs.getvalue()
    lrn = p.layer[2].lrn_param
    assert (lrn.local_size, lrn.beta, lrn.k) == (3, pytest.approx(0.7), 2)
    assert p.layer[3].dropout_param.dropout_ratio == pytest.approx(0.3)


def test_v1_net_upgrade_param_specs():
    text = open(Case("legacy__v1_layers_input_dim").path("net.prototxt")).read()
    p = upgraded(text)
    assert [lp.type for lp in p.layer] == ["Input", "Convolution", "ReLU", "Pooling",
                                          "InnerProduct", "SoftmaxWithLoss"]
    inp = p.layer[0]
    assert list(inp.top) == ["data", "label"]
    assert shape_of(inp, 0) == [2, 3, 6, 6] and shape_of(inp, 1) == [2, 1, 1, 1]
    conv = p.layer[1]
    assert [(s.lr_mult, s.decay_mult) for s in conv.param] == [(1, 1), (2, 0)]
    assert conv.param[1].HasField("decay_mult")
    ip = p.layer[4]
    assert [s.lr_mult for s in ip.param] == [1, 2]
    assert not ip.param[0].HasField("decay_mult")
    assert list(p.layer[5].bottom) == ["ip1", "label"]


def test_v1_names_share_mode_rules_losses_and_enums():
    p = upgraded('''name: "n"
      layers { name: "a" type: INNER_PRODUCT bottom: "x" top: "a" param: "w" param: "b"
               blob_share_mode: PERMISSIVE loss_weight: 0.5
               include { phase: TRAIN } inner_product_param { num_output: 2 } }
      layers { name: "e" type: EUCLIDEAN_LOSS bottom: "a" bottom: "y" top: "l"
               exclude { phase: TEST stage: "s" } }
      layers { name: "c" type: CONCAT bottom: "a" bottom: "a" top: "c"
               concat_param { concat_dim: 1 } }
      layers { name: "s" type: SIGMOID_CROSS_ENTROPY_LOSS bottom: "a" bottom: "y" top: "s" }
      layers { name: "ab" type: ABSVAL bottom: "a" top: "ab" }
      layers { name: "dc" type: DECONVOLUTION bottom: "a" top: "dc" }''')
    a = p.layer[0]
    assert [s.name for s in a.param] == ["w", "b"]
    assert a.param[0].share_mode == caffe_pb2.ParamSpec.PERMISSIVE
    assert not a.param[1].HasField("share_mode")
    assert list(a.loss_weight) == [0.5] and a.include[0].phase == caffe_pb2.TRAIN
    assert a.inner_product_param.num_output == 2
    e = p.layer[1]
    assert e.type == "EuclideanLoss" and e.exclude[0].stage == ["s"]
    assert p.layer[2].concat_param.concat_dim == 1
    assert [lp.type for lp in p.layer[2:]] == ["Concat", "SigmoidCrossEntropyLoss", "AbsVal",
                                              "Deconvolution"]


def test_v1_data_transformation_moves_into_transform_param(logs):
    p = upgraded('''
      layers { name: "d" type: DATA top: "data" top: "label"
               data_param { source: "db" batch_size: 4 scale: 0.25 mean_file: "m" crop_size: 3
                            mirror: true } }
      layers { name: "i" type: IMAGE_DATA top: "x" top: "y"
               image_data_param { source: "l.txt" crop_size: 2 } }''', "data.prototxt")
    d = p.layer[0]
    assert (d.transform_param.scale, d.transform_param.mean_file, d.transform_param.crop_size,
            d.transform_param.mirror) == (0.25, "m", 3, True)
    for f in ("scale", "mean_file", "crop_size", "mirror"):
        assert not d.data_param.HasField(f)
    assert d.data_param.batch_size == 4
    assert p.layer[1].transform_param.crop_size == 2
    assert not p.layer[1].image_data_param.HasField("crop_size")
    assert ("upgrade_proto.cpp:46] Attempting to upgrade input file specified using deprecated "
            "transformation parameters: data.prototxt") in logs.getvalue()


def test_both_layer_and_layers_is_refused():
    with pytest.raises(CaffeError, match="mixed.prototxt.*both 'layer' and 'layers'"):
        upgraded('layer { name: "a" type: "ReLU" } layers { name: "b" type: RELU }',
                 "mixed.prototxt")


def test_input_shape_fields_become_input_layer_first():
    p = upgraded('''input: "a" input_shape { dim: 2 dim: 3 }
                    input: "b" input_shape { dim: 4 }
                    layer { name: "r" type: "ReLU" bottom: "a" top: "r" }
                    layer { name: "s" type: "ReLU" bottom: "b" top: "s" }''')
    assert [lp.name for lp in p.layer] == ["input", "r", "s"]
    assert shape_of(p.layer[0], 0) == [2, 3] and shape_of(p.layer[0], 1) == [4]
    assert len(p.input) == len(p.input_shape) == 0


def test_input_without_dims_is_just_dropped():
    p = upgraded('input: "data" layer { name: "r" type: "ReLU" bottom: "data" top: "r" }')
    assert [lp.name for lp in p.layer] == ["r"] and len(p.input) == 0


def test_input_dim_count_mismatch_fails_naming_file():
    with pytest.raises(CaffeError, match="short.prototxt"):
        upgraded('input: "a" input_dim: 1 input_dim: 2', "short.prototxt")


def test_batchnorm_three_param_specs_are_frozen(logs):
    p = upgraded('''layer { name: "bn" type: "BatchNorm" bottom: "x" top: "x"
        param { lr_mult: 1 } param { lr_mult: 1 decay_mult: 3 } param { lr_mult: 1 } }
      layer { name: "bn2" type: "BatchNorm" bottom: "x" top: "y" param { lr_mult: 5 } }''')
    assert [(s.lr_mult, s.decay_mult) for s in p.layer[0].param] == [(0, 0)] * 3
    assert p.layer[1].param[0].lr_mult == 5
    assert "upgrade_proto.cpp:79] Attempting to upgrade batch norm layers" in logs.getvalue()


def test_batchnorm_upgrade_is_logged_once_for_a_net_file(tmp_path, logs):
    """Caffe upgrades BatchNorm's param specs as it reads the file; the upgraded net still has
    three specs, and building the net from it logs nothing more (Caffe's Net() does not
    upgrade; cifar10_full_sigmoid_train_test_bn.prototxt has such layers)."""
    path = tmp_path / "bn.prototxt"
    path.write_text('layer { name: "x" type: "Input" top: "x" '
                    '        input_param { shape { dim: 2 dim: 3 } } } '
                    'layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" '
                    '        param { lr_mult: 1 } param { lr_mult: 1 } param { lr_mult: 1 } }')
    net = Net(read_net_param(str(path)), caffe_pb2.TRAIN, log=False)
    assert logs.getvalue().count("Attempting to upgrade batch norm layers") == 1
    assert [s.lr_mult for s in net.layer_by_name("bn").layer_param.param] == [0, 0, 0]
    Net(str(path), caffe_pb2.TRAIN, log=False)
    assert logs.getvalue().count("Attempting to upgrade batch norm layers") == 2


def test_current_net_is_untouched(logs):
    text = 'name: "x" layer { name: "r" type: "ReLU" bottom: "a" top: "b" }'
    p = upgraded(text)
    assert p == parse_text(text, caffe_pb2.NetParameter())
    assert logs.getvalue() == ""


# ---- V1 caffemodel weights ----------------------------------------------------------------
NET = '''name: "w" layer { name: "in" type: "Input" top: "x"
                           input_param { shape { dim: 2 dim: 3 } } }
         layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
                 inner_product_param { num_output: 4 } }'''


def test_v1_caffemodel_weights_load_into_net(tmp_path):
    w = numpy.arange(12, dtype=numpy.float32).reshape(4, 3)
    b = numpy.array([1, 2, 3, 4], dtype=numpy.float32)
    model = caffe_pb2.NetParameter(name="old")
    v1 = model.layers.add(name="ip", type=caffe_pb2.V1LayerParameter.INNER_PRODUCT)
    v1.bottom.append("x")
    v1.top.append("y")
    for arr, legacy in ((w, (1, 1, 4, 3)), (b, (1, 1, 1, 4))):
        bp = v1.blobs.add()
        bp.num, bp.channels, bp.height, bp.width = legacy
        bp.data.extend(arr.ravel().tolist())
    other = model.layers.add(name="gone", type=caffe_pb2.V1LayerParameter.RELU)
    other.bottom.append("y")
    path = str(tmp_path / "old.caffemodel")
    write_binary(path, model)
    net = Net(parse_text(NET, caffe_pb2.NetParameter()), caffe_pb2.TEST, log=False)
    net.copy_trained_layers_from(path)
    layer = net.layer_by_name("ip")
    numpy.testing.assert_array_equal(layer.blobs[0].data, w)
    numpy.testing.assert_array_equal(layer.blobs[1].data, b)
    net.blob_by_name("x").data[...] = 1
    net.forward_pass()
    numpy.testing.assert_allclose(net.blob_by_name("y").data, [[4, 14, 24, 34]] * 2)


def test_v1_net_builds_and_runs():
    net = Net(upgraded('''input: "x" input_dim: 2 input_dim: 3 input_dim: 1 input_dim: 1
        layers { name: "ip" type: INNER_PRODUCT bottom: "x" top: "y" blobs_lr: 1 blobs_lr: 2
                 inner_product_param { num_output: 2 weight_filler { type: "constant" value: 1 } } }
        layers { name: "r" type: RELU bottom: "y" top: "y" }'''), caffe_pb2.TRAIN, log=False)
    assert net.layer_names == ["input", "ip", "r"]
    assert net.params_lr == [1, 2]
    net.blob_by_name("x").data[...] = 1
    net.forward_pass()
    numpy.testing.assert_allclose(net.blob_by_name("y").data, 3)


# ---- solvers ------------------------------------------------------------------------------
def solver(text, source="solver.prototxt"):
    return upgrade_solver_as_needed(parse_text(text, caffe_pb2.SolverParameter()), source)


@pytest.mark.parametrize("enum,name", [("SGD", "SGD"), ("NESTEROV", "Nesterov"),
                                       ("ADAGRAD", "AdaGrad"), ("RMSPROP", "RMSProp"),
                                       ("ADADELTA", "AdaDelta"), ("ADAM", "Adam")])
def test_solver_type_enum_becomes_string(enum, name, logs):
    s = solver("base_lr: 0.1 solver_type: %s" % enum, "s.prototxt")
    assert s.type == name and not s.HasField("solver_type")
    out = logs.getvalue()
    assert ("upgrade_proto.cpp:1084] Attempting to upgrade input file specified using "
            "deprecated 'solver_type' field (enum)': s.prototxt") in out
    assert "upgrade_proto.cpp:1091] Successfully upgraded file specified using deprecated " \
           "'solver_type' field (enum) to 'type' field (string)." in out


def test_solver_with_both_type_fields_fails_naming_file():
    with pytest.raises(CaffeError, match="both.prototxt.*cannot be both specified"):
        solver('solver_type: ADAM type: "Adam"', "both.prototxt")


def test_current_solver_untouched(logs):
    s = solver('type: "Adam" base_lr: 0.1')
    assert s.type == "Adam" and logs.getvalue() == ""


def test_read_solver_param_upgrades(tmp_path):
    path = tmp_path / "s.prototxt"
    path.write_text("solver_type: NESTEROV\nbase_lr: 0.01\n")
    assert read_solver_param(str(path)).type == "Nesterov"


def test_snapshot_prefix_defaults(tmp_path, logs):
    s = upgrade_snapshot_prefix(caffe_pb2.SolverParameter(), "dir/solver.prototxt")
    assert s.snapshot_prefix == "dir/solver"
    assert "snapshot_prefix was not specified and is set to dir/solver" in logs.getvalue()
    s = caffe_pb2.SolverParameter(snapshot_prefix=str(tmp_path))
    upgrade_snapshot_prefix(s, "x/lenet_solver.prototxt")
    assert s.snapshot_prefix == os.path.join(str(tmp_path), "lenet_solver")
    s = caffe_pb2.SolverParameter(snapshot_prefix="snaps/lenet")
    assert upgrade_snapshot_prefix(s, "a.prototxt").snapshot_prefix == "snaps/lenet"


def test_v0_padded_conv_net_matches_modern_net():
    """A V0 padding layer folded into the conv gives the same numbers as pad: in the conv."""
    from caffecli import registry
    if "Convolution" not in registry.layer_types():
        pytest.skip("Convolution not implemented yet")
    old = Net(upgraded('''input: "x" input_dim: 1 input_dim: 2 input_dim: 4 input_dim: 4
      layers { layer { name: "pad" type: "padding" pad: 1 } bottom: "x" top: "xp" }
      layers { layer { name: "conv" type: "conv" num_output: 3 kernelsize: 3
               weight_filler { type: "constant" value: 0.5 } } bottom: "xp" top: "y" }'''),
              caffe_pb2.TEST, log=False)
    new = Net(parse_text('''layer { name: "in" type: "Input" top: "x"
                                    input_param { shape { dim: 1 dim: 2 dim: 4 dim: 4 } } }
      layer { name: "conv" type: "Convolution" bottom: "x" top: "y" convolution_param {
              num_output: 3 kernel_size: 3 pad: 1 weight_filler { type: "constant" value: 0.5 } } }''',
                         caffe_pb2.NetParameter()), caffe_pb2.TEST, log=False)
    x = numpy.arange(32, dtype=numpy.float32).reshape(1, 2, 4, 4)
    for net in (old, new):
        net.blob_by_name("x").data[...] = x
        net.forward_pass()
    assert old.blob_by_name("y").shape == (1, 3, 4, 4)
    numpy.testing.assert_array_equal(old.blob_by_name("y").data, new.blob_by_name("y").data)
