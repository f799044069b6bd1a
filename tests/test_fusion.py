"""Fused chains (caffecli/fusion.py): BatchNorm (with global or the batch's statistics) -> Scale
(-> ReLU) on one blob, and Eltwise SUM -> ReLU in place, run as one kernel each way, with the
values of the layers run one by one, and every case that must fall back to them."""
import numpy
import pytest

from caffecli import TEST, TRAIN, context, fusion
from caffecli.net import Net
from caffecli.kernels import channel_jit, jit, relu_jit
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode (no chain there)

R = numpy.random.RandomState(11)


def conv(name, bottom, top):
    return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" convolution_param '
            '{ num_output: 4 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.5 } '
            'bias_filler { type: "gaussian" } } }' % (name, bottom, top))


def norm(name, blob, stats="use_global_stats: true", extra=""):
    return ('layer { name: "%s" type: "BatchNorm" bottom: "%s" top: "%s" '
            'batch_norm_param { %s } %s }' % (name, blob, blob, stats, extra))


def scale(name, blob, bias=True, extra=""):
    return ('layer { name: "%s" type: "Scale" bottom: "%s" top: "%s" %s scale_param { '
            'bias_term: %s filler { type: "gaussian" } bias_filler { type: "gaussian" } } }'
            % (name, blob, blob, extra, "true" if bias else "false"))


def relu(name, blob, slope=0.0, extra=""):
    return ('layer { name: "%s" type: "ReLU" bottom: "%s" top: "%s" relu_param { '
            'negative_slope: %r } %s }' % (name, blob, blob, slope, extra))


HEAD = ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 '
        'dim: 5 dim: 6 } } }')
TAIL = ('layer { name: "loss" type: "Reduction" bottom: "%s" top: "loss" loss_weight: 1 '
        'reduction_param { operation: SUMSQ } }')


# a chain of three (slope 0.1), then one of two (no bias), as ResNet's branches
def resnet_like(slope=0.1):
    return [HEAD, conv("c1", "data", "a"), norm("bn1", "a"), scale("sc1", "a"),
            relu("r1", "a", slope), conv("c2", "a", "b"), norm("bn2", "b"),
            scale("sc2", "b", bias=False), TAIL % "b"]


NET = resnet_like()


def build(layers, phase=TEST, dtype=numpy.float32, like=None):
    """The net of ``layers``; its parameters and BatchNorm statistics from ``like`` (or
    random), so two builds compute the same."""
    net = Net(parse_text(" ".join(layers), caffe_pb2.NetParameter()), phase, dtype=dtype, log=False)
    for i, rec in enumerate(net.records):
        for j, blob in enumerate(rec.layer.blobs):
            if like is not None:
                blob.data[...] = like.records[i].layer.blobs[j].data
            elif rec.layer.type == "BatchNorm":
                blob.data[...] = [R.randn(*blob.shape), R.rand(*blob.shape) + 0.1,
                                  [2.5]][j]
    if like is None:
        net.input_blobs[0].data[...] = R.randn(*net.input_blobs[0].shape)
        net.input_blobs[0].data.flat[:4] = [0.0, -0.0, 0.0, -1.0]   # zeros reach the ReLU
    else:
        net.input_blobs[0].data[...] = like.input_blobs[0].data
    return net


def step(net):
    net.clear_param_diffs()
    net.forward_pass()
    net.backward_pass()


def assert_same(net, ref):
    """Every blob's data and diff and every parameter gradient the same bits (the fused Scale
    sums in Caffe's order, as the layer's)."""
    for a, b in zip(net.blob_records, ref.blob_records):
        for field in ("data", "diff"):
            x, y = getattr(a.blob, field), getattr(b.blob, field)
            assert x.tobytes() == y.tobytes(), (a.name, field)
    for a, b in zip(net.learnable_params, ref.learnable_params):
        assert a.diff.tobytes() == b.diff.tobytes()


def reference(layers, net, **kw):
    ref = build(layers, like=net, **kw)
    ref.fuse = False
    return ref


def fusing():
    """Whether chains run fused here: on the host, with compiled kernels."""
    return jit.usable(numpy.zeros(1)) and not context.is_gpu()


def count_calls(monkeypatch, module, names):
    """{name: calls so far} of ``module``'s functions ``names``, counted from now."""
    calls = dict.fromkeys(names, 0)
    for name in names:
        original = getattr(module, name)

        def counted(*args, _name=name, _original=original):
            calls[_name] += 1
            return _original(*args)
        monkeypatch.setattr(module, name, counted)
    return calls


def count_kernel_calls(monkeypatch):
    return count_calls(monkeypatch, channel_jit, ["chain_forward", "chain_backward"])


def stepped_alike(layers, dtype):
    """A net of ``layers`` and its layer-by-layer twin after two steps each, checked the same
    bits after each (the second accumulates nothing stale), BatchNorm's running sums too."""
    net = build(layers, dtype=dtype)
    ref = reference(layers, net, dtype=dtype)
    for _ in range(2):
        step(net)
        step(ref)
        assert_same(net, ref)
        for rec, twin in zip(net.records, ref.records):
            for blob, other in zip(rec.layer.blobs, twin.layer.blobs):
                assert blob.data.tobytes() == other.data.tobytes(), rec.name
    return net


def test_chains_found_where_resnet_has_them():
    net = build(NET)
    assert {i: [r.name for r in c.records] for i, c in net.chains.items()} == {
        2: ["bn1", "sc1", "r1"], 6: ["bn2", "sc2"]}


@pytest.mark.parametrize("dtype,slope", [(numpy.float32, 0.0), (numpy.float32, 0.1),
                                         (numpy.float64, 0.1)])
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
def test_fused_passes_compute_the_layers_values(dtype, slope, split, monkeypatch):
    """The chains' values are the layers', whole or split by channels across two threads."""
    if split:
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        monkeypatch.setattr(fusion, "CHAIN_FORWARD_MIN_PART", 1)
        monkeypatch.setattr(channel_jit, "SUMS_MIN_PART", 1)
    calls = count_kernel_calls(monkeypatch)
    net = stepped_alike(resnet_like(slope), dtype)
    a = net.blob_by_name("a")
    assert ((a.data == 0) if slope == 0 else (a.data < 0)).any() and (a.data > 0).any()
    assert (a.diff == 0).any() == (slope == 0)
    fused = (4 if fusing() else 0) * (2 if split else 1)   # split: two parts a chain
    assert calls == {"chain_forward": fused, "chain_backward": fused}


def head(items, channels, height, width):
    return ('layer { name: "data" type: "Input" top: "data" input_param { shape { dim: %d '
            'dim: %d dim: %d dim: %d } } }' % (items, channels, height, width))


@pytest.mark.parametrize("dtype,slope,shape", [
    (numpy.float32, 0.0, (2, 3, 24, 24)),   # rows of 576 values (plain_row_sums)
    (numpy.float32, 0.1, (5, 3, 16, 16)),  # five items: a block of four and one
    (numpy.float64, 0.1, (9, 3, 11, 11)),  # nine items, rows of 121
    (numpy.float32, 0.1, (4, 3, 16, 16)),  # four items, fifty: the gemv's own item orders
    (numpy.float32, 0.0, (50, 2, 5, 5)),
    (numpy.float32, 0.1, (256, 2, 2, 2)),  # rows of 4 (scale_row_sums)
    (numpy.float32, 0.0, (2, 3, 5, 6)),     # 60 values a channel: the layers one by one
])
@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
def test_fused_passes_on_the_batch_statistics_compute_the_layers_values(dtype, slope, shape,
                                                                        split, monkeypatch):
    """A BatchNorm on the batch's statistics -> Scale (-> ReLU) chain whose channels hold
    BATCH_MIN_CHANNEL_VALUES values or more runs each way in one kernel (chain_forward_batch,
    chain_backward_batch): the layers' values bit for bit (the running sums too), its BatchNorm
    sums in Caffe's gemv orders, whole or split by channels across two threads; a smaller one
    runs its layers."""
    if split:
        monkeypatch.setenv("OMP_NUM_THREADS", "2")
        monkeypatch.setattr(fusion, "CHAIN_FORWARD_MIN_PART", 1)
        monkeypatch.setattr(channel_jit, "SUMS_MIN_PART", 1)
    calls = count_calls(monkeypatch, channel_jit, ["chain_forward", "chain_backward",
                                                   "chain_forward_batch", "chain_backward_batch"])
    batch = "use_global_stats: false"
    layers = [head(*shape), conv("c1", "data", "a"), norm("bn1", "a", stats=batch),
              scale("sc1", "a"), relu("r1", "a", slope), conv("c2", "a", "b"),
              norm("bn2", "b", stats=batch), scale("sc2", "b", bias=False), TAIL % "b"]
    net = stepped_alike(layers, dtype)
    assert [len(c) for c in net.chains.values()] == [3, 2]
    assert net.layer_by_name("sc1").blobs[0].diff.any() and net.blob_by_name("a").diff.any()
    per_channel = shape[0] * shape[2] * shape[3]
    fused = 4 if fusing() and per_channel >= fusion.BATCH_MIN_CHANNEL_VALUES else 0
    fused *= 2 if split else 1   # two parts a chain
    assert calls == {"chain_forward": 0, "chain_backward": 0, "chain_forward_batch": fused,
                     "chain_backward_batch": fused}


def test_a_batch_statistics_chain_run_forward_by_its_layers_backs_up_fused(monkeypatch):
    """A forward that ends inside the chain runs its layers; the fused backward after it reads
    what they kept (the Scale's copy of BatchNorm's output) and gives their values."""
    calls = count_calls(monkeypatch, channel_jit, ["chain_forward_batch", "chain_backward_batch"])
    batch = "use_global_stats: false"
    layers = [head(2, 3, 24, 24), conv("c1", "data", "a"), norm("bn1", "a", stats=batch),
              scale("sc1", "a"), relu("r1", "a", 0.1), TAIL % "a"]
    net = build(layers)
    ref = reference(layers, net)
    step(ref)
    net.clear_param_diffs()
    net.forward_from_to(0, 2)          # ends inside the chain: its layers run
    net.forward_from_to(3, None)
    net.backward_pass()
    assert_same(net, ref)
    fused = 1 if fusing() else 0
    assert calls == {"chain_forward_batch": 0, "chain_backward_batch": fused}


def test_partial_ranges_and_watched_passes_run_the_layers(monkeypatch):
    calls = count_kernel_calls(monkeypatch)
    net = build(NET)
    ref = reference(NET, net)
    step(ref)
    net.clear_param_diffs()
    net.forward_from_to(0, 3)          # ends inside the first chain
    net.forward_from_to(4, None)
    net.backward_from_to(None, 3)      # starts the first chain's backward at its ReLU...
    net.backward_from_to(2, 0)         # ...and finishes it here
    assert_same(net, ref)
    assert calls["chain_backward"] == (1 if fusing() else 0)
    seen = []
    net.before_backward.append(seen.append)   # a callback sees every layer: no chain
    step(net)
    assert_same(net, ref)
    assert seen == list(range(len(net.records) - 1, -1, -1))


def test_frozen_scale_falls_back_to_the_layers():
    frozen = 'param { lr_mult: 0 } param { lr_mult: 0 }'
    layers = [HEAD, conv("c1", "data", "a"), norm("bn1", "a"), scale("sc1", "a", extra=frozen),
              relu("r1", "a"), TAIL % "a"]
    net = build(layers)
    assert list(net.chains) == [2]
    ref = reference(layers, net)
    step(net)
    step(ref)
    assert_same(net, ref)
    assert not net.layer_by_name("sc1").blobs[0].diff.any()
    assert net.layer_by_name("c1").blobs[0].diff.any()


def test_without_compiled_kernels_the_chain_runs_its_layers(monkeypatch):
    monkeypatch.setenv("CAFFECLI_JIT", "0")
    calls = count_kernel_calls(monkeypatch)
    net = build(NET)
    ref = reference(NET, net)
    step(net)
    step(ref)
    assert_same(net, ref)
    assert calls == {"chain_forward": 0, "chain_backward": 0}


@pytest.mark.parametrize("layers", [
    [HEAD, conv("c1", "data", "a"),                                    # not in place
     'layer { name: "bn1" type: "BatchNorm" bottom: "a" top: "n" '
     'batch_norm_param { use_global_stats: true } }', scale("sc1", "n")],
    [HEAD, conv("c1", "data", "a"), scale("sc1", "a"), norm("bn1", "a")],   # other order
    [HEAD, conv("c1", "data", "a"), norm("bn1", "a"), relu("r1", "a"), scale("sc1", "a")],
], ids=["not-in-place", "scale-first", "relu-between"])
def test_no_chain_where_the_layers_do_not_form_one(layers):
    assert build(layers, phase=TRAIN).chains == {}


def test_a_weighted_relu_stays_out_of_the_chain():
    layers = [HEAD, conv("c1", "data", "a"), norm("bn1", "a"), scale("sc1", "a"),
              relu("r1", "a", extra="loss_weight: 0.5")]
    net = build(layers)
    assert [len(c) for c in net.chains.values()] == [2]
    ref = reference(layers, net)
    net.forward_pass()
    ref.forward_pass()
    assert_same(net, ref)


def test_the_pycaffe_net_switches_fusion_off_in_its_engine(tmp_path):
    import caffecli
    path = tmp_path / "net.prototxt"
    path.write_text(" ".join(NET))
    net = caffecli.Net(str(path), caffecli.TEST)
    assert net.fuse and net._engine.chains
    net.fuse = False
    assert net._engine.fuse is False and net._engine._runnable_chains() == {}


def eltwise(name, bottoms, top, extra=""):
    return ('layer { name: "%s" type: "Eltwise" %s top: "%s" %s }'
            % (name, " ".join('bottom: "%s"' % b for b in bottoms), top, extra))


def residual(slope=0.0, sum_extra=""):
    """A shortcut block: a = conv(data), b = conv(a); s = relu(a + b) in place; two of them
    (the second's sum reads the first's through a Split)."""
    return [HEAD, conv("c1", "data", "a"), conv("c2", "a", "b"),
            eltwise("sum1", ["a", "b"], "s", sum_extra),
            relu("r1", "s", slope), conv("c3", "s", "c"),
            eltwise("sum2", ["s", "c"], "t"), relu("r2", "t", slope), TAIL % "t"]


def count_sum_calls(monkeypatch):
    return count_calls(monkeypatch, relu_jit, ["sum_forward", "split_backward"])


@pytest.mark.parametrize("dtype,slope", [(numpy.float32, 0.0), (numpy.float32, 0.1),
                                         (numpy.float64, 0.0)])
def test_fused_sums_compute_the_layers_values(dtype, slope, monkeypatch):
    calls = count_sum_calls(monkeypatch)
    net = stepped_alike(residual(slope), dtype)
    assert [[r.name for r in c.records] for c in net.chains.values()] == [
        ["sum1", "r1"], ["sum2", "r2"]]
    s = net.blob_by_name("s")
    assert ((s.data == 0) if slope == 0 else (s.data < 0)).any() and (s.data > 0).any()
    assert (net.blob_by_name("b").diff == 0).any() == (slope == 0)   # the sum's own bottom
    fused = 4 if fusing() else 0
    assert calls == {"sum_forward": fused, "split_backward": fused}


def test_a_sum_without_every_gradient_runs_its_layers_backward(monkeypatch):
    """The first conv frozen and the data needing none: the first sum's bottom a needs no
    gradient (nothing below it learns), b does, so that backward runs the layers; the second
    sum's both do, so it runs fused. The values stay the layers'."""
    calls = count_sum_calls(monkeypatch)
    frozen = "param { lr_mult: 0 } param { lr_mult: 0 }"
    layers = residual()
    layers[1] = layers[1].replace(" } } }", " } } %s }" % frozen)
    net = build(layers)
    assert [net.records[i].name for i in net.chains] == ["sum1", "sum2"]
    ref = reference(layers, net)
    step(net)
    step(ref)
    assert_same(net, ref)
    assert net.layer_by_name("c3").blobs[0].diff.any()
    assert calls["split_backward"] == (1 if fusing() else 0)   # sum2's only


@pytest.mark.parametrize("layers", [
    residual(sum_extra="eltwise_param { coeff: 1 coeff: 0.5 }"),
    residual(sum_extra="eltwise_param { operation: MAX }"),
    [HEAD, conv("c1", "data", "a"), conv("c2", "data", "b"), eltwise("sum1", ["a", "b"], "s"),
     relu("r1", "s", extra="loss_weight: 0.5")],
    [HEAD, conv("c1", "data", "a"), conv("c2", "a", "b"), conv("c3", "a", "c"),
     eltwise("sum1", ["a", "b", "c"], "s"), relu("r1", "s"), TAIL % "s"],
    [HEAD, conv("c1", "data", "a"), conv("c2", "data", "b"), eltwise("sum1", ["a", "b"], "a"),
     relu("r1", "a"), TAIL % "a"],
], ids=["coefficients", "max", "weighted-relu", "three-bottoms", "sum-in-place"])
def test_no_sum_chain_where_the_layers_do_not_form_one(layers):
    net = build(layers, phase=TRAIN)
    assert "sum1" not in [net.records[i].name for i in net.chains]
    ref = reference(layers, net, phase=TRAIN)
    step(net)
    step(ref)
    assert_same(net, ref)


def conv_relu(slope=0.0, kernel=3, outputs=4, bias=True, shape=(2, 3, 5, 6), extra=""):
    """data -> conv -> ReLU in place -> conv -> ReLU in place -> loss."""
    head = ('layer { name: "data" type: "Input" top: "data" input_param { shape { %s } } }'
            % " ".join("dim: %d" % d for d in shape))

    def c(name, bottom, top):
        return ('layer { name: "%s" type: "Convolution" bottom: "%s" top: "%s" '
                'convolution_param { num_output: %d kernel_size: %d pad: %d bias_term: %s '
                'weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" } '
                '%s } }' % (name, bottom, top, outputs, kernel, kernel // 2,
                            "true" if bias else "false", extra))
    return [head, c("c1", "data", "a"), relu("r1", "a", slope), c("c2", "a", "b"),
            relu("r2", "b", slope), TAIL % "b"]


def count_conv_relu_calls(monkeypatch):
    return count_calls(monkeypatch, relu_jit, ["split_images_first_relu", "split_bias_relu"])


@pytest.mark.parametrize("dtype,slope", [(numpy.float32, 0.0), (numpy.float32, 0.1),
                                         (numpy.float64, 0.1)])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("chunk,kernel,outputs,shape,last_pass", [
    (None, 3, 4, (2, 3, 5, 6), "split_images_first_relu"),   # one chunk of both images
    (None, 1, 4, (3, 3, 5, 6), "split_images_first_relu"),   # 1x1: the input is the columns
    (3 * 9 * 30, 3, 4, (3, 3, 5, 6), "split_bias_relu"),    # chunks of one image, in place
    (2 * 4 * 9 * 30, 3, 4, (3, 4, 5, 6), "split_bias_relu"),  # 2 + 1 images: the last alone
    (None, 3, 16, (4, 16, 8, 8), "split_bias_relu"),         # Winograd
    (None, 3, 4, (2, 3, 5, 6), "by_image"),                  # conv_jit's products by image
], ids=["chunk", "1x1", "per-image", "ragged", "winograd", "by-image"])
def test_fused_conv_relu_computes_the_layers_values(dtype, slope, bias, chunk, kernel, outputs,
                                                    shape, last_pass, monkeypatch):
    """The forward's last pass over the conv's top rectifies, whichever it is; every blob the
    layers' bits after two steps; the backward runs layer by layer."""
    from caffecli.kernels import conv_jit
    from caffecli.layers import _base_conv, convolution
    if chunk is not None:
        monkeypatch.setattr(_base_conv, "COL_CHUNK_ELEMENTS", chunk)
    if last_pass != "by_image":
        monkeypatch.setattr(_base_conv, "IMAGE_MAX_INNER", 0)
    calls = count_conv_relu_calls(monkeypatch)
    real = conv_jit.forward
    monkeypatch.setattr(conv_jit, "forward", lambda *a: calls.update(
        by_image=calls.get("by_image", 0) + (a[3] is not None)) or real(*a))
    net = stepped_alike(conv_relu(slope, kernel, outputs, bias, shape), dtype)
    assert [[r.name for r in c.records] for c in net.chains.values()] == [
        ["c1", "r1"], ["c2", "r2"]]
    layer = net.layer_by_name("c1")
    assert layer.winograd == (last_pass == "split_bias_relu" and chunk is None)
    assert layer.by_image == (last_pass == "by_image")
    if chunk is not None:
        assert layer.chunk < layer.num
    a = net.blob_by_name("a")
    assert ((a.data == 0) if slope == 0 else (a.data < 0)).any() and (a.data > 0).any()
    assert convolution.ConvolutionLayer.relu_after is None and layer.relu_after is None
    assert calls.get(last_pass, 0) == (4 if fusing() else 0)
    assert sum(calls.values()) == calls.get(last_pass, 0)


@pytest.mark.parametrize("layers", [
    [HEAD, conv("c1", "data", "a"), relu("r1", "a", extra="loss_weight: 0.5")],
    [HEAD, conv("c1", "data", "a"),
     'layer { name: "r1" type: "ReLU" bottom: "a" top: "r" }', TAIL % "r"],
    [HEAD, conv("c1", "data", "a"), 'layer { name: "s" type: "Scale" bottom: "a" top: "a" '
     'scale_param { filler { type: "gaussian" } } }', relu("r1", "a"), TAIL % "a"],
], ids=["weighted-relu", "not-in-place", "layer-between"])
def test_no_conv_relu_chain_where_the_layers_do_not_form_one(layers):
    net = build(layers, phase=TRAIN)
    assert net.chains == {}
    ref = reference(layers, net, phase=TRAIN)
    step(net)
    step(ref)
    assert_same(net, ref)
