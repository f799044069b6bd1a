"""Net wiring: state rules, splits, in-place, loss weights, backward inference, sharing, weights."""
import gc
import weakref

import numpy
import pytest

from caffecli import context, glog
from caffecli.context import CPU
from caffecli.errors import CaffeError
from caffecli.layer import Layer
from caffecli import Net, TEST, TRAIN
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from caffecli.registry import register_layer
from caffecli.syncedmem import SyncedMemory

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode


@register_layer("TestHalfSumSqLoss")
class HalfSumSqLoss(Layer):
    """loss = 0.5 * sum(x^2): a loss for wiring tests that needs no other helper's layers."""
    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1
    is_loss = True

    def reshape(self, bottom, top):
        top[0].reshape(())

    def forward(self, bottom, top):
        top[0].data[...] = 0.5 * (bottom[0].data ** 2).sum()

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            bottom[0].diff[...] = bottom[0].data * top[0].diff


def net_from(text, phase=TRAIN, **kw):
    return Net(parse_text(text, caffe_pb2.NetParameter()), phase, log=False, **kw)


BASE = '''
name: "t"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 1 } } }
'''


def test_phase_level_stage_rules():
    text = BASE + '''
layer { name: "tr" type: "ReLU" bottom: "y" top: "a" include { phase: TRAIN } }
layer { name: "te" type: "ReLU" bottom: "y" top: "b" include { phase: TEST } }
layer { name: "lv" type: "ReLU" bottom: "y" top: "c" include { min_level: 2 } }
layer { name: "st" type: "ReLU" bottom: "y" top: "d" include { stage: "deploy" } }
layer { name: "ns" type: "ReLU" bottom: "y" top: "e" exclude { stage: "deploy" } }
'''
    n = net_from(text, TRAIN)
    assert "tr" in n.layer_names and "te" not in n.layer_names
    assert "lv" not in n.layer_names and "st" not in n.layer_names and "ns" in n.layer_names
    n = net_from(text, TEST, level=3, stages=["deploy"])
    assert {"te", "lv", "st"} <= set(n.layer_names) and "ns" not in n.layer_names


def test_split_inserted_on_fanout_and_gradients_add():
    text = BASE + '''
layer { name: "l1" type: "TestHalfSumSqLoss" bottom: "y" top: "loss1" }
layer { name: "l2" type: "TestHalfSumSqLoss" bottom: "y" top: "loss2" loss_weight: 2 }
'''
    n = net_from(text)
    assert "y_ip_0_split" in n.layer_names
    assert n.has_blob("y_ip_0_split_0") and n.has_blob("y_ip_0_split_1")
    n.blobs["x"].data[...] = numpy.arange(6).reshape(2, 3)
    loss = n.forward_pass()
    y = n.blobs["y"].data
    assert loss == pytest.approx(3 * 0.5 * float((y ** 2).sum()), rel=1e-5)
    n.backward_pass()
    assert numpy.allclose(n.blobs["y"].diff, 3 * y, rtol=1e-5)


def test_inplace_and_outputs_sorted():
    text = BASE + '''
layer { name: "r" type: "ReLU" bottom: "y" top: "y" }
layer { name: "z" type: "ReLU" bottom: "x" top: "a_out" }
'''
    n = net_from(text)
    assert n.blob_names.count("y") == 1
    assert n.output_names == ["a_out", "y"]
    assert n.input_names == ["x"]


def test_need_backward_inference():
    text = BASE + '''
layer { name: "frozen" type: "InnerProduct" bottom: "x" top: "f" param { lr_mult: 0 }
        inner_product_param { num_output: 2 bias_term: false } }
layer { name: "l1" type: "TestHalfSumSqLoss" bottom: "y" top: "loss1" }
layer { name: "l2" type: "TestHalfSumSqLoss" bottom: "f" top: "loss2" }
'''
    n = net_from(text)
    need = {r.name: r.need_backward for r in n.records}
    assert need["ip"] and need["l1"] and not need["frozen"] and not need["in"]
    # force_backward makes every layer (and the input) take part
    n = net_from("force_backward: true\n" + text)
    assert all(r.need_backward for r in n.records)
    assert n.blob_records[n.blob_names_index["x"]].need_backward


def test_no_loss_path_needs_no_backward():
    n = net_from(BASE + 'layer { name: "r" type: "ReLU" bottom: "y" top: "z" }')
    assert not any(r.need_backward for r in n.records)


def test_weight_sharing_and_multipliers():
    text = '''
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "a" type: "InnerProduct" bottom: "x" top: "ya"
        param { name: "w" lr_mult: 2 decay_mult: 0.5 } param { name: "b" }
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }
layer { name: "b" type: "InnerProduct" bottom: "x" top: "yb"
        param { name: "w" } param { name: "b" } inner_product_param { num_output: 3 } }
'''
    n = net_from(text)
    assert len(n.learnable_params) == 2
    assert n.params_lr[0] == 2 and n.params_weight_decay[0] == 0.5
    wa, wb = n.params["a"][0], n.params["b"][0]
    assert wa.shares_data_with(wb)
    assert numpy.array_equal(wa.data, wb.data)
    bad = text.replace("num_output: 3 } }\n", "num_output: 4 } }\n", 1).replace(
        'param { name: "w" } param { name: "b" } inner_product_param { num_output: 3 }',
        'param { name: "w" } param { name: "b" } inner_product_param { num_output: 5 }')
    with pytest.raises(CaffeError, match="Cannot share param 'w'"):
        net_from(bad)


def test_missing_bottom_names_layer():
    with pytest.raises(CaffeError,
                       match=r"Unknown bottom blob 'nope' \(layer 'r', bottom index 0\)"):
        net_from(BASE + 'layer { name: "r" type: "ReLU" bottom: "nope" top: "z" }')


def test_unknown_type_lists_known():
    with pytest.raises(CaffeError, match="Unknown layer type: Bogus.*known types:.*InnerProduct"):
        net_from(BASE + 'layer { name: "r" type: "Bogus" bottom: "y" top: "z" }')


def test_duplicate_top():
    with pytest.raises(CaffeError, match="produced by multiple sources"):
        net_from(BASE + 'layer { name: "r" type: "ReLU" bottom: "x" top: "y" }')


def test_weights_roundtrip_and_mismatch(tmp_path):
    n = net_from(BASE)
    path = str(tmp_path / "w.caffemodel")
    n.save(path)
    m = net_from(BASE)
    m.copy_trained_layers_from(path)
    assert numpy.array_equal(m.params["ip"][0].data, n.params["ip"][0].data)
    h5 = str(tmp_path / "w.caffemodel.h5")
    n.save(h5)
    k = net_from(BASE)
    k.copy_trained_layers_from(h5)
    assert numpy.array_equal(k.params["ip"][1].data, n.params["ip"][1].data)
    other = net_from(BASE.replace("num_output: 2", "num_output: 4"))
    with pytest.raises(CaffeError, match=r"layer 'ip'; shape mismatch.*Source param shape is "
                                         r"2 3 \(6\); target param shape is 4 3 \(12\)"):
        other.copy_trained_layers_from(path)
    with pytest.raises(CaffeError, match="not found"):
        other.copy_trained_layers_from(str(tmp_path / "missing.caffemodel"))
    empty = n.to_proto()   # a blob with its shape but no values: Caffe's FromProto CHECK
    del empty.layer[1].blobs[0].data[:]
    with pytest.raises(CaffeError, match=r"layer ip param 0: blob proto has 0 data values"):
        net_from(BASE).copy_from_net_param(empty)


def test_share_trained_layers_with():
    a, b = net_from(BASE), net_from(BASE, TEST)
    b.share_trained_layers_with(a)
    a.params["ip"][0].data[...] = 7
    assert numpy.all(b.params["ip"][0].data == 7)


def test_setup_log_lines(capsys):
    glog.set_stream(None)
    Net(parse_text(BASE + 'layer { name: "r" type: "ReLU" bottom: "y" top: "y" }',
                   caffe_pb2.NetParameter()), TRAIN)
    err = capsys.readouterr().err.splitlines()
    msgs = [line.split("] ", 1)[1] for line in err if "] " in line]
    assert "Creating Layer ip" in msgs and "ip <- x" in msgs and "ip -> y" in msgs
    assert "r -> y (in-place)" in msgs
    assert "Top shape: 2 2 (4)" in msgs
    assert "Memory required for data: %d" % ((6 + 4 + 4) * 4) in msgs
    assert msgs[-1] == "Network initialization done."
    assert err[0][0] == "I" and " net.cpp:53] " in err[0]


def test_loss_layer_without_a_top_gets_an_anonymous_one():
    """Caffe's LossLayer::AutoTopBlobs: the loss counts in the net's loss and its gradients,
    under the blob name "(automatic)", and is no net output (no other layer can read it)."""
    labels = ('layer { name: "lab" type: "Input" top: "lab" input_param { shape { dim: 2 } } }\n'
              'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "y" bottom: "lab" %s }\n')
    named, anonymous = net_from(BASE + labels % 'top: "loss"'), net_from(BASE + labels % "")
    anonymous.copy_from_net_param(named.to_proto())
    for net in (named, anonymous):
        net.blob_by_name("x").data[...] = numpy.arange(6).reshape(2, 3) / 6.0
        net.blob_by_name("lab").data[...] = [0, 1]
    losses = [net.forward_pass() for net in (named, anonymous)]
    assert losses[0] > 0 and losses[1] == pytest.approx(losses[0], rel=1e-6)
    for net in (named, anonymous):
        net.clear_param_diffs()
        net.backward_pass()
    numpy.testing.assert_allclose(anonymous.layer_by_name("ip").blobs[0].diff,
                                  named.layer_by_name("ip").blobs[0].diff, rtol=1e-6)
    assert "(automatic)" in anonymous.blob_names and anonymous.output_names == []
    assert named.output_names == ["loss"]


def test_stages_given_to_net_add_to_the_files():
    """Caffe's Net(file, phase, level, stages) adds the stages to the file's NetState."""
    text = ('state { stage: "a" }\n' + BASE +
            'layer { name: "ra" type: "ReLU" bottom: "y" top: "ya" include { stage: "a" } }\n'
            'layer { name: "rb" type: "ReLU" bottom: "y" top: "yb" include { stage: "b" } }\n')
    net = net_from(text, TEST, stages=["b"])
    assert {"ra", "rb"} <= set(net.layer_names)


def test_duplicate_layer_names_copy_and_share_into_the_first():
    """Caffe copies weights and shares layers by a linear search: the first of two layers
    with one name gets them (its name map, for layer_by_name, holds the last)."""
    twice = BASE + ('layer { name: "ip" type: "InnerProduct" bottom: "y" top: "z" '
                    'inner_product_param { num_output: 2 } }\n')
    source = net_from(BASE)
    source.layer_by_name("ip").blobs[0].data[...] = 3.0
    net = net_from(twice)
    net.copy_from_net_param(source.to_proto())
    first, second = [r.layer for r in net.records if r.name == "ip"]
    assert (first.blobs[0].data == 3).all() and not (second.blobs[0].data == 3).any()
    assert net.layer_by_name("ip") is second
    shared = net_from(twice)
    shared.share_trained_layers_with(source)
    source.layer_by_name("ip").blobs[0].data[...] = 5.0   # seen through shared storage only
    assert [bool((r.layer.blobs[0].data == 5).all())
            for r in shared.records if r.name == "ip"] == [True, False]


def test_batchnorm_on_the_input_needs_backward_as_in_caffe():
    """Caffe decides need_backward from the net's copy of the specs, where BatchNorm has none
    (lr_mult 1 by default): it runs BatchNorm's backward, which writes the bottom diff whatever
    propagate_down says; the lr_mult 0 it pins in its own copy still keeps the statistics."""
    text = ('%s\nlayer { name: "in" type: "Input" top: "x" top: "t" input_param { shape '
            '{ dim: 4 dim: 3 } shape { dim: 4 dim: 2 } } }\n'
            'layer { name: "bn" type: "BatchNorm" bottom: "x" top: "b" }\n'
            'layer { name: "ip" type: "InnerProduct" bottom: "b" top: "y" inner_product_param '
            '{ num_output: 2 weight_filler { type: "gaussian" std: 1 } } }\n'
            'layer { name: "loss" type: "EuclideanLoss" bottom: "y" bottom: "t" }\n')
    diffs = []
    for force in ("", "force_backward: true"):
        net = net_from(text % force)
        rng = numpy.random.RandomState(1)
        net.blob_by_name("x").data[...] = rng.randn(4, 3)
        net.blob_by_name("t").data[...] = rng.randn(4, 2)
        net.layer_by_name("ip").blobs[0].data[...] = numpy.arange(6).reshape(2, 3) / 5.0
        assert net.records[1].need_backward
        net.forward_pass()
        net.backward_pass()
        diffs.append(net.blob_by_name("x").diff.copy())
        assert [net.params_lr[i] for i in range(3)] == [0, 0, 0]
    assert abs(diffs[0]).sum() > 0
    numpy.testing.assert_array_equal(diffs[0], diffs[1])


def test_backward_reads_a_bottom_an_in_place_layer_rewrote_after_the_forward_pass(
        conv_algorithm):
    """The ReLU writes in place into the Reshape's top, which shares x's storage: Caffe's
    convolution backward then reads the rewritten x for its weight gradient (what BVLC Caffe
    computes for this net: 6 8 12 14), so caffecli must not reuse the forward pass's columns."""
    net = Net(parse_text('''
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 dim: 3 dim: 3 } } }
layer { name: "conv" type: "Convolution" bottom: "x" top: "y"
        convolution_param { num_output: 1 kernel_size: 2 bias_term: false
                            weight_filler { type: "constant" value: 1 } } }
layer { name: "r" type: "Reshape" bottom: "x" top: "r" reshape_param { shape { dim: 0 dim: -1 } } }
layer { name: "relu" type: "ReLU" bottom: "r" top: "r" }
layer { name: "loss" type: "Reduction" bottom: "y" top: "loss" loss_weight: 1 }
''', caffe_pb2.NetParameter()), TRAIN, log=False)
    conv = net.layer_by_name("conv")
    assert conv.bottom_rewritten and not net.layer_by_name("relu").bottom_rewritten
    net.blob_by_name("x").data[...] = numpy.array([[1, -2, 3], [-4, 5, -6], [7, -8, 9]],
                                                  numpy.float32).reshape(1, 1, 3, 3)
    net.forward_pass()
    net.backward_pass()
    numpy.testing.assert_array_equal(net.blob_by_name("y").data.ravel(), [0, 0, 0, 0])
    numpy.testing.assert_array_equal(conv.blobs[0].diff.ravel(), [6, 8, 12, 14])


def test_a_dropped_net_frees_its_blobs_without_the_cyclic_collector():
    """Caffe's ~Net frees the blobs; here refcounts must do it (no cycle among a net's
    blobs, their views and its layers), or the memory of a net rebuilt in a loop piles up."""
    gc.collect()
    gc.disable()
    try:
        net = Net(parse_text(
            'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }'
            'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" '
            '        inner_product_param { num_output: 4 } }'
            'layer { name: "r" type: "ReLU" bottom: "y" top: "y" }', caffe_pb2.NetParameter()),
            TRAIN, log=False)
        net.forward_pass()
        net.backward_pass()
        blob = weakref.ref(net.blob_by_name("y"))
        param = weakref.ref(net.layer_by_name("ip").blobs[0])
        del net
        assert blob() is None and param() is None
    finally:
        gc.enable()


SHARED_IPS = ('name: "t"\n'
              'layer { name: "in" type: "Input" top: "x"\n'
              '        input_param { shape { dim: 2 dim: 3 } } }\n'
              'layer { name: "a" type: "InnerProduct" bottom: "x" top: "ya" param { name: "w" }\n'
              '        inner_product_param { num_output: 3 bias_term: false\n'
              '                              weight_filler { type: "gaussian" std: 1 } } }\n'
              'layer { name: "b" type: "InnerProduct" bottom: "ya" top: "yb" param { name: "w" }\n'
              '        inner_product_param { num_output: 3 bias_term: false } }\n'
              'layer { name: "f" type: "InnerProduct" bottom: "yb" top: "yf" param { lr_mult: 0 }\n'
              '        inner_product_param { num_output: 3 bias_term: false } }\n'
              'layer { name: "l" type: "TestHalfSumSqLoss" bottom: "yf" top: "l" }\n')


@pytest.mark.parametrize("lazy", [False, True])
def test_cleared_diffs_hold_the_gradient_however_the_clear_is_done(monkeypatch, lazy):
    """ClearParamDiffs then backward gives the gradient itself, eager or as a solver clears
    (lazily on the host, the first inner product writing its product where the zeros would
    be); a weight shared by two layers gets both terms, a second backward adds again, and a
    frozen layer's diff (lr_mult 0: no gradient) holds zeros once the clear is settled, read
    through an array taken before the clear too."""
    net = net_from(SHARED_IPS)
    x = numpy.arange(6, dtype=numpy.float64).reshape(2, 3) / 5 - 0.4
    net.blob_by_name("x").data[...] = x
    w, frozen = net.params["a"][0], net.params["f"][0]
    wd, wf = (numpy.asarray(b.data, numpy.float64) for b in (w, frozen))
    ya = x @ wd.T
    yb = ya @ wd.T
    dyb = (yb @ wf.T) @ wf
    want = dyb.T @ ya + (dyb @ wd).T @ x   # layer b's term, then layer a's
    w.diff[...] = 100.0                    # stale values the clear must hide
    frozen.diff[...] = 100.0
    held = frozen.diff                     # a view taken before the clear
    net.forward_pass()
    net.clear_param_diffs(lazy=lazy)
    claims = []
    monkeypatch.setattr(SyncedMemory, "claim_clear",
                        lambda m, claim=SyncedMemory.claim_clear: claims.append(claim(m))
                        or claims[-1])
    net.backward_pass()
    net.settle_param_diffs()
    host = context.mode() == CPU
    assert (held == 0).all() or not host   # (in GPU mode the host copy is stale, as Caffe's)
    assert (frozen.diff == 0).all()
    numpy.testing.assert_allclose(w.diff, want, rtol=1e-5, atol=1e-6)
    # on the host's lazy clear no zeros were written for w: layer b's product took them; an
    # eager clear leaves nothing to claim
    assert claims == ([True, False] if lazy and host else [False, False] if host else [])
    net.backward_pass()
    numpy.testing.assert_allclose(w.diff, 2 * want, rtol=1e-5, atol=1e-6)
    net.clear_param_diffs(lazy=lazy)
    assert (w.diff == 0).all()


def test_a_solver_clears_lazily_only_what_its_layers_write_whole():
    """Inner products' weights, every layer sharing one an inner product; not their biases,
    other layers' parameters, or a weight an inner product shares with a convolution."""
    frozen = '"yf" param { lr_mult: 0 }\n        inner_product_param { num_output: 3'
    text = (SHARED_IPS.replace(frozen + " bias_term: false", frozen)   # f gets a bias
            + 'layer { name: "in4" type: "Input" top: "x4" '
              'input_param { shape { dim: 1 dim: 1 dim: 1 dim: 1 } } }\n'
              'layer { name: "c" type: "Convolution" bottom: "x4" top: "yc" '
              'param { name: "k" share_mode: PERMISSIVE }\n'
              '        convolution_param { num_output: 1 kernel_size: 1 bias_term: false } }\n'
              'layer { name: "d" type: "InnerProduct" bottom: "yc" top: "yd" '
              'param { name: "k" share_mode: PERMISSIVE }\n'
              '        inner_product_param { num_output: 1 bias_term: false } }\n')
    net = net_from(text)
    assert len(net.params["f"]) == 2
    ids = {id(p): i for i, p in enumerate(net.learnable_params)}
    lazy = set()
    for name in ("a", "f", "c"):
        for j, blob in enumerate(net.params[name]):
            if ids.get(id(getattr(blob, "blob", blob))) in net._lazy_clear_ids():
                lazy.add("%s/%d" % (name, j))
    assert lazy == {"a/0", "f/0"}


SKIP_NET = """
layer { name: "data" type: "Input" top: "data"
        input_param { shape { dim: 2 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "gaussian" } } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" } } }
"""


def test_a_reshape_that_finds_the_last_shapes_skips_the_hook_but_not_a_new_shape(monkeypatch):
    """Layers whose reshape follows from shapes alone skip it when the bottoms and tops have
    the shapes the last one left, and reshape again when a bottom or a top changed."""
    net = net_from(SKIP_NET)
    layers = {rec.layer.name: rec.layer for rec in net.records}
    calls = []
    for name in ("conv", "pool", "ip"):
        layer = layers[name]
        hook = type(layer).reshape
        monkeypatch.setattr(layer, "reshape", lambda b, t, h=hook, l=layer: (
            calls.append(l.name), h(l, b, t))[1], raising=False)
    net.forward_pass()
    assert calls == []                        # the set-up's shapes: nothing to do again
    net.input_blobs[0].reshape((3, 3, 8, 8))
    net.forward_pass()
    assert calls == ["conv", "pool", "ip"]
    assert net.blob_by_name("pool").shape == (3, 4, 3, 3)
    assert net.blob_by_name("ip").shape == (3, 5)
    del calls[:]
    net.forward_pass()
    assert calls == []
    net.blob_by_name("pool").reshape((1, 1))   # a top changed behind the layer's back
    net.forward_pass()
    assert calls == ["pool"] and net.blob_by_name("pool").shape == (3, 4, 3, 3)


def test_a_skipped_reshape_still_drops_the_forward_columns_of_a_convolution():
    """Reshape between forward and backward: the weight gradient is computed from the bottom
    as it is then (the columns cached by the forward are dropped), skipped hook or not."""
    net = net_from(SKIP_NET)
    x = net.input_blobs[0]
    x.data[...] = numpy.random.RandomState(0).rand(*x.shape)
    net.forward_pass()
    conv = next(rec for rec in net.records if rec.layer.name == "conv")
    x.data[...] = numpy.random.RandomState(1).rand(*x.shape)
    net.reshape()
    assert not conv.layer._cached
    conv.tops[0].diff[...] = 1
    conv.layer.Backward(conv.tops, [False], conv.bottoms)
    want = numpy.zeros_like(conv.layer.blobs[0].diff)
    for o in range(4):
        for c in range(3):
            for i in range(3):
                for j in range(3):
                    want[o, c, i, j] = x.data[:, c, i:i + 6, j:j + 6].sum()
    numpy.testing.assert_allclose(conv.layer.blobs[0].diff, want, rtol=1e-5)
