"""Structural layers, Eltwise, Reduction and ArgMax: hand-computed values, gradients, errors."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.errors import CaffeError
from caffecli import Net, TRAIN
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from gradcheck import blobs_from, check_gradient, make_layer

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode

F32, F64 = numpy.float32, numpy.float64


def run(text, bottoms, n_tops=1, dtype=F64):
    """Set up and run one forward pass; returns (layer, bottom blobs, top blobs)."""
    layer = make_layer(text)
    bottom = blobs_from(bottoms, dtype)
    top = [Blob(dtype=dtype) for _ in range(n_tops)]
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def backward(layer, bottom, top, top_diffs, propagate_down=None):
    for t, d in zip(top, top_diffs):
        t.diff[...] = d
    if propagate_down is None:
        propagate_down = [True] * len(bottom)
    layer.Backward(top, propagate_down, bottom)


def setup_error(text, shapes, n_tops=1, match=None):
    layer = make_layer(text)
    bottom = [Blob(s) for s in shapes]
    top = [Blob() for _ in range(n_tops)]
    with pytest.raises(CaffeError, match=match) as err:
        layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
    assert "under_test" in str(err.value)
    return err


def rnd(*shape, seed=0):
    return numpy.random.RandomState(seed).uniform(-1, 1, size=shape)


# ---- Concat ------------------------------------------------------------------------------
def test_concat_axis1_values_and_backward():
    a = numpy.arange(4.0).reshape(2, 2)
    b = numpy.arange(10.0, 16.0).reshape(2, 3)
    layer, bottom, top = run('type: "Concat"', [a, b])
    numpy.testing.assert_array_equal(top[0].data, [[0, 1, 10, 11, 12], [2, 3, 13, 14, 15]])
    g = numpy.arange(10.0).reshape(2, 5)
    backward(layer, bottom, top, [g], [True, False])
    numpy.testing.assert_array_equal(bottom[0].diff, [[0, 1], [5, 6]])
    numpy.testing.assert_array_equal(bottom[1].diff, 0)  # not propagated


@pytest.mark.parametrize("param,shapes", [
    ('concat_param { axis: 0 }', [(2, 3, 2), (1, 3, 2), (3, 3, 2)]),
    ('concat_param { axis: -1 }', [(2, 3, 2), (2, 3, 1)]),
    ('concat_param { concat_dim: 1 }', [(2, 1, 2), (2, 4, 2)]),
])
def test_concat_gradient_and_shape(param, shapes):
    arrays = [rnd(*s, seed=i) for i, s in enumerate(shapes)]
    text = 'type: "Concat" ' + param
    _, _, top = run(text, arrays)
    axis = 0 if "axis: 0" in param else (-1 if "-1" in param else 1)
    numpy.testing.assert_array_equal(top[0].data, numpy.concatenate(arrays, axis=axis))
    assert check_gradient(text, arrays) > 0


def test_concat_single_bottom_shares():
    layer, bottom, top = run('type: "Concat"', [rnd(2, 3)])
    top[0].diff[...] = 7
    assert (bottom[0].diff == 7).all() and numpy.array_equal(top[0].data, bottom[0].data)


def test_concat_errors():
    setup_error('type: "Concat"', [(2, 3, 4), (2, 3, 5)], match="same shape")
    setup_error('type: "Concat"', [(2, 3), (2, 3, 1)], match="#axes")
    setup_error('type: "Concat" concat_param { axis: 2 }', [(2, 3), (2, 3)], match="out of range")
    setup_error('type: "Concat" concat_param { concat_dim: 2 }', [(2, 3), (2, 3)],
                match="out of range")
    setup_error('type: "Concat" concat_param { axis: 1 concat_dim: 1 }', [(2, 3), (2, 3)],
                match="not both")
    setup_error('type: "Concat"', [(2, 3)], n_tops=2, match="exactly 1")


# ---- Slice -------------------------------------------------------------------------------
def test_slice_points_values_and_backward():
    x = numpy.arange(12.0).reshape(2, 6)
    text = 'type: "Slice" slice_param { axis: 1 slice_point: 1 slice_point: 4 }'
    layer, bottom, top = run(text, [x], n_tops=3)
    assert [t.shape for t in top] == [(2, 1), (2, 3), (2, 2)]
    numpy.testing.assert_array_equal(top[1].data, [[1, 2, 3], [7, 8, 9]])
    numpy.testing.assert_array_equal(top[2].data, [[4, 5], [10, 11]])
    backward(layer, bottom, top, [numpy.full(t.shape, i + 1.0) for i, t in enumerate(top)])
    numpy.testing.assert_array_equal(bottom[0].diff, [[1, 2, 2, 2, 3, 3]] * 2)


@pytest.mark.parametrize("param,n", [
    ('slice_param { axis: 0 }', 2),
    ('slice_param { axis: -1 }', 3),
    ('slice_param { slice_dim: 1 slice_point: 2 }', 2),
])
def test_slice_gradient(param, n):
    x = rnd(4, 3, 6)
    assert check_gradient('type: "Slice" ' + param, [x], n_tops=n) > 0


def test_slice_equal_split_and_legacy_dim():
    x = rnd(4, 3)
    _, _, top = run('type: "Slice" slice_param { axis: 0 }', [x], n_tops=2)
    numpy.testing.assert_array_equal(top[1].data, x[2:])
    _, _, top = run('type: "Slice" slice_param { slice_dim: 0 slice_point: 1 }', [x], n_tops=2)
    assert top[0].shape == (1, 3) and top[1].shape == (3, 3)


def test_slice_errors():
    base = 'type: "Slice" slice_param { axis: 1 %s }'
    setup_error(base % "slice_point: 7", [(2, 6)], n_tops=2, match="out of range")
    setup_error(base % "slice_point: 3 slice_point: 2", [(2, 6)], n_tops=3, match="greater")
    setup_error(base % "slice_point: 0", [(2, 6)], n_tops=2, match="greater")
    setup_error(base % "slice_point: 2", [(2, 6)], n_tops=3, match="need 2 tops")
    setup_error(base % "", [(2, 6)], n_tops=4, match="evenly divide")
    setup_error(base % "slice_point: 1 slice_point: 2", [(2, 2)], n_tops=3, match="exceed")
    setup_error('type: "Slice" slice_param { axis: 1 slice_dim: 1 }', [(2, 6)], n_tops=2,
                match="not both")
    setup_error(base.replace("axis: 1", "axis: 3") % "", [(2, 6)], n_tops=2,
                match="out of range")


# ---- Flatten / Reshape -------------------------------------------------------------------
@pytest.mark.parametrize("param,shape,want", [
    ("", (2, 3, 4, 5), (2, 60)),
    ("flatten_param { axis: 2 }", (2, 3, 4, 5), (2, 3, 20)),
    ("flatten_param { axis: 0 end_axis: -2 }", (2, 3, 4, 5), (24, 5)),
    ("flatten_param { axis: 1 end_axis: 2 }", (2, 3, 4, 5), (2, 12, 5)),
    ("flatten_param { axis: 2 end_axis: 1 }", (2, 3, 4), (2, 3, 1, 4)),
])
def test_flatten_shapes(param, shape, want):
    x = rnd(*shape)
    _, bottom, top = run('type: "Flatten" ' + param, [x])
    assert top[0].shape == want
    numpy.testing.assert_array_equal(top[0].data.ravel(), x.ravel())


def test_flatten_and_reshape_share_data_and_diff():
    for text in ('type: "Flatten"', 'type: "Reshape" reshape_param { shape { dim: -1 } }'):
        layer, bottom, top = run(text, [rnd(2, 3, 2)])
        top[0].diff[...] = numpy.arange(12.0).reshape(top[0].shape)
        layer.Backward(top, [True], bottom)
        numpy.testing.assert_array_equal(bottom[0].diff.ravel(), numpy.arange(12.0))
        top[0].data[...] = 5  # writes through to the bottom, as Caffe's ShareData
        assert (bottom[0].data == 5).all()


def test_flatten_errors():
    setup_error('type: "Flatten" flatten_param { axis: 4 }', [(2, 3)], match="out of range")
    setup_error('type: "Flatten" flatten_param { axis: 2 end_axis: 0 }', [(2, 3, 4)],
                match="before")
    layer = make_layer('type: "Flatten"')
    b = Blob((2, 3))
    with pytest.raises(CaffeError, match="in-place"):
        layer.SetUp([b], [b])


@pytest.mark.parametrize("param,shape,want", [
    ("shape { dim: 0 dim: -1 }", (2, 3, 4), (2, 12)),
    ("shape { dim: 0 dim: 2 dim: -1 }", (2, 6, 4), (2, 2, 12)),
    ("shape { dim: 0 dim: -1 dim: 0 }", (2, 6, 4), (2, 6, 4)),
    ("shape { dim: 2 dim: 2 } axis: 1 num_axes: 1", (3, 4, 5), (3, 2, 2, 5)),
    ("shape { dim: 1 } axis: -1 num_axes: 0", (3, 4), (3, 4, 1)),
    ("shape { dim: 1 } axis: 0 num_axes: 0", (3, 4), (1, 3, 4)),
    ("shape { dim: -1 } axis: 1", (3, 4, 5), (3, 20)),
    ("shape { dim: 0 dim: 0 dim: 0 }", (3, 4, 5), (3, 4, 5)),
    ("shape { }", (1,), ()),
])
def test_reshape_shapes(param, shape, want):
    x = rnd(*shape)
    _, _, top = run('type: "Reshape" reshape_param { %s }' % param, [x])
    assert top[0].shape == want
    numpy.testing.assert_array_equal(top[0].data.ravel(), x.ravel())


def test_reshape_errors():
    t = 'type: "Reshape" reshape_param { %s }'
    setup_error(t % "shape { dim: 5 dim: 5 }", [(2, 12)], match="count must match")
    setup_error(t % "shape { dim: -1 dim: -1 }", [(2, 12)], match="multiple -1")
    setup_error(t % "shape { dim: 5 dim: -1 }", [(2, 12)], match="divisible")
    setup_error(t % "shape { dim: 0 dim: 0 dim: 0 }", [(2, 12)], match="no corresponding")
    setup_error(t % "shape { dim: 1 } axis: 4", [(2, 12)], match="out of range")
    setup_error(t % "shape { dim: 1 } axis: -4", [(2, 12)], match="out of range")
    setup_error(t % "shape { dim: 1 } axis: 1 num_axes: 2", [(2, 12)], match="out of range")
    setup_error(t % "shape { dim: 1 } num_axes: -2", [(2, 12)], match="num_axes")


def _reshape_net(flatten):
    """x (2, 6) -> Reshape y (2, 2, 3) [-> Flatten z] -> sum of squares; run once each way."""
    tail = ('layer { name: "f" type: "Flatten" bottom: "y" top: "z" }\n' if flatten else "")
    net = Net(parse_text('''
force_backward: true
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 6 } } }
layer { name: "r" type: "Reshape" bottom: "x" top: "y"
        reshape_param { shape { dim: 0 dim: 2 dim: 3 } } }
''' + tail + '''layer { name: "s" type: "Reduction" bottom: "%s" top: "loss" loss_weight: 1
        reduction_param { operation: SUMSQ } }
''' % ("z" if flatten else "y"), caffe_pb2.NetParameter()), TRAIN, log=False)
    x = rnd(2, 6)
    net.blob_by_name("x").data[...] = x
    loss = net.forward_pass()
    net.backward_pass()
    assert net.blob_by_name("y").shape == (2, 2, 3)
    assert loss == pytest.approx((x ** 2).sum(), rel=1e-5)
    return net, x


def test_reshape_in_a_net_passes_gradients():
    net, x = _reshape_net(flatten=False)
    numpy.testing.assert_allclose(net.blob_by_name("x").diff, 2 * x, rtol=1e-5)


def test_reshape_then_flatten_loses_the_gradient_as_in_caffe():
    """Caffe's Reshape shares the diff when it reshapes, its backward does nothing; Flatten's
    backward points its bottom's diff at its top's. So behind a Reshape -> Flatten chain the
    input's diff stays zero (what BVLC Caffe computes for this net, checked with pycaffe)."""
    net, x = _reshape_net(flatten=True)
    numpy.testing.assert_allclose(net.blob_by_name("y").diff.ravel(), 2 * x.ravel(), rtol=1e-5)
    assert not net.blob_by_name("x").diff.any()


def test_flatten_shares_data_in_forward_and_diff_in_backward():
    """A Flatten whose top is an output outside the loss runs no backward: the diff set on its
    top does not reach its bottom (Caffe shares the diff only in Flatten's backward)."""
    net = Net(parse_text('''
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "h"
        inner_product_param { num_output: 2 weight_filler { type: "constant" value: 1 } } }
layer { name: "f" type: "Flatten" bottom: "h" top: "flat" }
layer { name: "s" type: "Reduction" bottom: "h" top: "loss" loss_weight: 1 }
''', caffe_pb2.NetParameter()), TRAIN, log=False)
    flat = net.blob_by_name("flat")
    assert not flat.data.any()            # not shared before the forward pass
    net.blob_by_name("x").data[...] = rnd(2, 3)
    net.forward_pass()
    numpy.testing.assert_array_equal(flat.data, net.blob_by_name("h").data)
    flat.diff[...] = 100.0
    net.backward_pass()
    numpy.testing.assert_array_equal(net.blob_by_name("h").diff, numpy.ones((2, 2)))


# ---- Tile --------------------------------------------------------------------------------
def test_tile_values_and_backward():
    x = numpy.array([[1.0, 2.0], [3.0, 4.0]])
    layer, bottom, top = run('type: "Tile" tile_param { axis: 1 tiles: 3 }', [x])
    numpy.testing.assert_array_equal(top[0].data, [[1, 2, 1, 2, 1, 2], [3, 4, 3, 4, 3, 4]])
    backward(layer, bottom, top, [numpy.arange(12.0).reshape(2, 6)])
    numpy.testing.assert_array_equal(bottom[0].diff, [[0 + 2 + 4, 1 + 3 + 5],
                                                      [6 + 8 + 10, 7 + 9 + 11]])


@pytest.mark.parametrize("param", ["axis: 0 tiles: 2", "axis: 1 tiles: 3", "axis: -1 tiles: 4"])
def test_tile_gradient(param):
    text = 'type: "Tile" tile_param { %s }' % param
    x = rnd(2, 3, 2)
    assert check_gradient(text, [x]) > 0
    assert check_gradient(text, [x], dtype=F32, threshold=1e-2) > 0


def test_tile_errors():
    setup_error('type: "Tile" tile_param { axis: 1 }', [(2, 3)], match="must be specified")
    setup_error('type: "Tile" tile_param { tiles: 0 }', [(2, 3)], match="positive")
    setup_error('type: "Tile" tile_param { axis: 2 tiles: 2 }', [(2, 3)], match="out of range")


# ---- Silence -----------------------------------------------------------------------------
def test_silence_zeroes_diffs():
    layer, bottom, top = run('type: "Silence"', [rnd(2, 3), rnd(4)], n_tops=0)
    for b in bottom:
        b.diff[...] = 3
    layer.Backward([], [True, False], bottom)
    assert (bottom[0].diff == 0).all() and (bottom[1].diff == 3).all()
    setup_error('type: "Silence"', [(2,)], n_tops=1, match="exactly 0")
    setup_error('type: "Silence"', [], n_tops=0, match="at least 1")


# ---- BatchReindex ------------------------------------------------------------------------
def test_batch_reindex_values_and_accumulating_backward():
    x = numpy.arange(6.0).reshape(3, 2)
    idx = numpy.array([2.0, 0.0, 2.0, 2.0])
    layer, bottom, top = run('type: "BatchReindex"', [x, idx])
    numpy.testing.assert_array_equal(top[0].data, [[4, 5], [0, 1], [4, 5], [4, 5]])
    bottom[0].diff[...] = 99
    backward(layer, bottom, top, [numpy.arange(8.0).reshape(4, 2)], [True, False])
    numpy.testing.assert_array_equal(bottom[0].diff, [[2, 3], [0, 0], [0 + 4 + 6, 1 + 5 + 7]])


def test_batch_reindex_gradient():
    x, idx = rnd(4, 2, 3), numpy.array([3.0, 1.0, 1.0, 0.0, 3.0])
    assert check_gradient('type: "BatchReindex"', [x, idx], check_bottoms=[0]) > 0


def test_batch_reindex_errors():
    layer, bottom, top = run('type: "BatchReindex"', [rnd(3, 2), numpy.array([0.0])])
    with pytest.raises(CaffeError, match="Cannot backprop to index"):
        layer.Backward(top, [True, True], bottom)
    for bad in (3.0, -1.0, -0.5, float("nan")):   # Caffe CHECKs the values, not their ints
        with pytest.raises(CaffeError, match="out of range"):
            run('type: "BatchReindex"', [rnd(3, 2), numpy.array([0.0, bad])])
    setup_error('type: "BatchReindex"', [(3, 2), (2, 1)], match="1 axis")
    setup_error('type: "BatchReindex"', [(3, 2)], match="exactly 2")


# ---- Filter ------------------------------------------------------------------------------
def test_filter_values_and_backward():
    x = numpy.arange(8.0).reshape(4, 2)
    y = numpy.arange(4.0) * 10
    sel = numpy.array([0.0, 1.0, 0.0, 2.0])
    layer, bottom, top = run('type: "Filter"', [x, y, sel], n_tops=2)
    numpy.testing.assert_array_equal(top[0].data, [[2, 3], [6, 7]])
    numpy.testing.assert_array_equal(top[1].data, [10, 30])
    for b in bottom:
        b.diff[...] = 99
    backward(layer, bottom, top, [[[1, 2], [3, 4]], [5, 6]], [True, False, False])
    numpy.testing.assert_array_equal(bottom[0].diff, [[0, 0], [1, 2], [0, 0], [3, 4]])
    assert (bottom[1].diff == 99).all()


def test_filter_gradient_and_empty_selection():
    x, sel = rnd(5, 2, 3), numpy.array([[1.0], [0.0], [1.0], [1.0], [0.0]])
    assert check_gradient('type: "Filter"', [x, sel], check_bottoms=[0]) > 0
    layer, bottom, top = run('type: "Filter"', [x, numpy.zeros((5, 1))])
    assert top[0].shape == (0, 2, 3)
    backward(layer, bottom, top, [numpy.zeros((0, 2, 3))], [True, False])
    assert (bottom[0].diff == 0).all()


def test_filter_setup_shape_is_full_batch():
    layer = make_layer('type: "Filter"')
    bottom, top = [Blob((4, 3)), Blob((4,))], [Blob()]
    layer.SetUp(bottom, top)
    assert top[0].shape == (4, 3)


def test_filter_errors():
    layer, bottom, top = run('type: "Filter"', [rnd(2, 3), numpy.array([1.0, 0.0])])
    with pytest.raises(CaffeError, match="cannot backpropagate"):
        layer.Backward(top, [True, True], bottom)
    setup_error('type: "Filter"', [(2, 3), (2, 2)], match="singletons")
    setup_error('type: "Filter"', [(3, 3), (2,)], match="0th dimension")
    setup_error('type: "Filter"', [(2, 3), (2, 3), (2,)], n_tops=1, match="one top per")
    setup_error('type: "Filter"', [(2,)], match="at least 2")


# ---- Eltwise -----------------------------------------------------------------------------
def test_eltwise_values():
    a, b, c = numpy.array([1.0, -2, 3]), numpy.array([4.0, 5, -6]), numpy.array([2.0, 2, 2])
    _, _, top = run('type: "Eltwise" eltwise_param { operation: PROD }', [a, b, c])
    numpy.testing.assert_array_equal(top[0].data, [8, -20, -36])
    _, _, top = run('type: "Eltwise"', [a, b])
    numpy.testing.assert_array_equal(top[0].data, [5, 3, -3])
    _, _, top = run('type: "Eltwise"', [a, b, c])
    numpy.testing.assert_array_equal(top[0].data, [7, 5, -1])
    _, _, top = run('type: "Eltwise" eltwise_param { coeff: 1 coeff: -0.5 coeff: 2 }', [a, b, c])
    numpy.testing.assert_array_equal(top[0].data, [3, -0.5, 10])
    _, _, top = run('type: "Eltwise" eltwise_param { operation: MAX }', [a, b, c])
    numpy.testing.assert_array_equal(top[0].data, [4, 5, 3])


def test_eltwise_max_tie_rule():
    """Caffe: a tie of bottoms 0 and 1 goes to 1; a later bottom must be strictly greater."""
    a, b, c = numpy.array([1.0, 2.0]), numpy.array([1.0, 0.0]), numpy.array([1.0, 2.0])
    layer, bottom, top = run('type: "Eltwise" eltwise_param { operation: MAX }', [a, b, c])
    backward(layer, bottom, top, [numpy.array([10.0, 20.0])])
    numpy.testing.assert_array_equal(bottom[0].diff, [0, 20])
    numpy.testing.assert_array_equal(bottom[1].diff, [10, 0])
    numpy.testing.assert_array_equal(bottom[2].diff, [0, 0])


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_eltwise_max_compiled_is_the_reference(dtype, monkeypatch):
    """MAX's compiled passes (kernels/eltwise_jit.py) against the numpy code (CAFFECLI_JIT=0):
    the same tops, winners and gradients, with ties, NaNs and a third bottom."""
    rs = numpy.random.RandomState(4)
    values = [rs.randint(-3, 4, size=(5, 7, 9)).astype(dtype) for _ in range(3)]
    values[1].flat[::11] = numpy.nan
    values[2].flat[5::13] = numpy.nan
    grad = rs.randn(5, 7, 9)
    results = []
    for flag in ("1", "0"):
        monkeypatch.setenv("CAFFECLI_JIT", flag)
        layer, bottom, top = run('type: "Eltwise" eltwise_param { operation: MAX }', values,
                                 dtype=dtype)
        backward(layer, bottom, top, [grad])
        host = layer.xp.asnumpy if hasattr(layer.xp, "asnumpy") else numpy.array
        results.append([host(a) for a in [top[0].data, layer.mask] + [b.diff for b in bottom]])
    if layer.xp is numpy:   # the host took the compiled passes
        from caffecli.kernels import eltwise_jit, jit
        assert eltwise_jit._first_two in jit._compiled and eltwise_jit._routed in jit._compiled
    mask = results[0][1]
    assert mask.dtype == numpy.int32 and {int(v) for v in numpy.unique(mask)} == {0, 1, 2}
    for compiled, reference in zip(*results):
        assert compiled.tobytes() == reference.tobytes()


def test_eltwise_in_place_follows_caffes_order():
    """Top = bottom[0]: Caffe fills the top before it reads the bottoms, so SUM leaves bottom[0]
    out and in MAX bottom[0] is -FLT_MAX (never the winner: every gradient is then 0)."""
    for param, want in (("", [10, 20]), ("operation: MAX", [3, 4])):
        layer = make_layer('type: "Eltwise" eltwise_param { %s }' % param)
        bottom = blobs_from([numpy.array([5.0, 1.0]), numpy.array([10.0, 20.0])
                             if not param else numpy.array([3.0, 4.0])], F64)
        layer.SetUp(bottom, [bottom[0]])
        layer.Forward(bottom, [bottom[0]])
        numpy.testing.assert_array_equal(bottom[0].data, want)
        backward(layer, bottom, [bottom[0]], [numpy.array([1.0, 2.0])])
        numpy.testing.assert_array_equal(bottom[1].diff, [1, 2] if not param else [0, 0])


def test_eltwise_backward_values():
    a, b = numpy.array([2.0, 3.0]), numpy.array([5.0, -1.0])
    layer, bottom, top = run('type: "Eltwise" eltwise_param { coeff: 3 coeff: -1 }', [a, b])
    backward(layer, bottom, top, [numpy.array([1.0, 2.0])])
    numpy.testing.assert_array_equal(bottom[0].diff, [3, 6])
    numpy.testing.assert_array_equal(bottom[1].diff, [-1, -2])
    for stable in ("true", "false"):
        text = 'type: "Eltwise" eltwise_param { operation: PROD stable_prod_grad: %s }' % stable
        layer, bottom, top = run(text, [a, b])
        backward(layer, bottom, top, [numpy.array([1.0, 2.0])])
        numpy.testing.assert_allclose(bottom[0].diff, [5, -2])
        numpy.testing.assert_allclose(bottom[1].diff, [2, 6])


@pytest.mark.parametrize("param", [
    "operation: PROD", "operation: PROD stable_prod_grad: false", "operation: SUM",
    "operation: SUM coeff: 0.5 coeff: -2 coeff: 1.5", "operation: MAX"])
def test_eltwise_gradient(param):
    rs = numpy.random.RandomState(3)
    arrays = [rs.uniform(0.2, 1.5, size=(2, 3, 4)) * rs.choice([-1, 1], size=(2, 3, 4))
              for _ in range(3)]
    text = 'type: "Eltwise" eltwise_param { %s }' % param
    assert check_gradient(text, arrays) > 0
    assert check_gradient(text, arrays, dtype=F32, stepsize=1e-2, threshold=1e-2) > 0


def test_eltwise_errors():
    setup_error('type: "Eltwise" eltwise_param { coeff: 1 }', [(2,), (2,)], match="coefficient")
    setup_error('type: "Eltwise" eltwise_param { operation: PROD coeff: 1 coeff: 2 }',
                [(2,), (2,)], match="only takes coefficients")
    setup_error('type: "Eltwise"', [(2, 3), (3, 2)], match="same shape")
    setup_error('type: "Eltwise"', [(2, 3)], match="at least 2")


def test_eltwise_keeps_float32():
    _, _, top = run('type: "Eltwise" eltwise_param { coeff: 0.3 coeff: 0.7 }',
                    [rnd(3), rnd(3, seed=1)], dtype=F32)
    assert top[0].data.dtype == F32


# ---- Reduction ---------------------------------------------------------------------------
X = numpy.array([[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]])


@pytest.mark.parametrize("op,coeff,want", [
    ("SUM", 1, -3.0), ("ASUM", 1, 21.0), ("SUMSQ", 1, 91.0), ("MEAN", 1, -0.5), ("SUM", -2, 6.0),
    ("MEAN", 3, -1.5)])
def test_reduction_all_axes(op, coeff, want):
    text = 'type: "Reduction" reduction_param { operation: %s coeff: %g }' % (op, coeff)
    _, _, top = run(text, [X])
    assert top[0].shape == ()
    assert float(top[0].data) == pytest.approx(want)


def test_reduction_axis_and_backward():
    text = 'type: "Reduction" reduction_param { operation: %s axis: 1 coeff: 2 }'
    _, _, top = run(text % "SUM", [X])
    numpy.testing.assert_allclose(top[0].data, [4, -10])
    _, _, top = run(text % "MEAN", [X])
    numpy.testing.assert_allclose(top[0].data, [4 / 3.0, -10 / 3.0])
    g = numpy.array([1.0, -0.5])
    for op, want in [("SUM", [[2] * 3, [-1] * 3]), ("MEAN", [[2 / 3.0] * 3, [-1 / 3.0] * 3]),
                     ("ASUM", [[2, -2, 2], [1, -1, 1]]),
                     ("SUMSQ", [[4, -8, 12], [8, -10, 12]])]:
        layer, bottom, top = run(text % op, [X])
        backward(layer, bottom, top, [g])
        numpy.testing.assert_allclose(bottom[0].diff, want)


@pytest.mark.parametrize("op", ["SUM", "ASUM", "SUMSQ", "MEAN"])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_reduction_gradient(op, axis):
    text = ('type: "Reduction" reduction_param { operation: %s axis: %d coeff: 1.5 }'
            % (op, axis))
    x = rnd(2, 3, 4)
    assert check_gradient(text, [x], kink=0.0, kink_range=0.02) > 0
    assert check_gradient(text, [x], dtype=F32, kink=0.0, kink_range=0.02, threshold=1e-2) > 0


def test_reduction_errors():
    setup_error('type: "Reduction" reduction_param { axis: 3 }', [(2, 3)], match="out of range")
    setup_error('type: "Reduction"', [(2, 3), (2, 3)], match="exactly 1")


# ---- ArgMax ------------------------------------------------------------------------------
def argmax_reference(x, k):
    """Caffe's partial_sort with greater<(value, index)>: descending, larger index on ties."""
    pairs = sorted(((v, j) for j, v in enumerate(x)), reverse=True)[:k]
    return [j for _, j in pairs], [v for v, _ in pairs]


def test_argmax_default_and_out_max_val():
    x = numpy.array([[[0.1, 0.9, 0.3]], [[0.7, 0.2, 0.5]]])  # 2x1x3
    _, _, top = run('type: "ArgMax"', [x])
    assert top[0].shape == (2, 1, 1)
    numpy.testing.assert_array_equal(top[0].data.ravel(), [1, 0])
    _, _, top = run('type: "ArgMax" argmax_param { out_max_val: true top_k: 2 }', [x])
    assert top[0].shape == (2, 2, 2)
    numpy.testing.assert_array_equal(top[0].data, [[[1, 2], [0.9, 0.3]], [[0, 2], [0.7, 0.5]]])


def test_argmax_4d_top_shape_is_padded():
    _, _, top = run('type: "ArgMax" argmax_param { top_k: 3 }', [rnd(2, 3, 2, 2)])
    assert top[0].shape == (2, 1, 3, 1)


def test_argmax_ties_rank_larger_index_first():
    x = numpy.array([[1.0, 3.0, 3.0, 0.0, 3.0, 1.0]])
    _, _, top = run('type: "ArgMax" argmax_param { top_k: 5 out_max_val: true }', [x])
    idx, vals = argmax_reference(x[0], 5)
    assert idx == [4, 2, 1, 5, 0]
    numpy.testing.assert_array_equal(top[0].data.reshape(2, 5), [idx, vals])


@pytest.mark.parametrize("axis,k,maxval", [(1, 1, False), (2, 2, True), (-1, 3, False),
                                           (0, 2, False)])
def test_argmax_axis_matches_reference(axis, k, maxval):
    rs = numpy.random.RandomState(5)
    x = rs.randint(0, 4, size=(3, 4, 5)).astype(F64)  # many ties
    text = 'type: "ArgMax" argmax_param { axis: %d top_k: %d out_max_val: %s }' % (
        axis, k, "true" if maxval else "false")
    _, _, top = run(text, [x])
    moved = numpy.moveaxis(x, axis, -1)
    want = numpy.zeros(moved.shape[:-1] + (k,))
    for pos in numpy.ndindex(*moved.shape[:-1]):
        idx, vals = argmax_reference(moved[pos], k)
        want[pos] = vals if maxval else idx
    numpy.testing.assert_array_equal(top[0].data, numpy.moveaxis(want, -1, axis))


def test_argmax_flattened_matches_reference():
    x = numpy.random.RandomState(6).randint(0, 3, size=(4, 2, 3)).astype(F32)
    _, _, top = run('type: "ArgMax" argmax_param { top_k: 4 }', [x], dtype=F32)
    for n in range(4):
        assert top[0].data[n, 0].tolist() == argmax_reference(x[n].ravel(), 4)[0]


def test_argmax_errors():
    setup_error('type: "ArgMax" argmax_param { top_k: 7 }', [(2, 3, 2)], match="top_k")
    setup_error('type: "ArgMax" argmax_param { axis: 1 top_k: 4 }', [(2, 3)], match="top_k")
    setup_error('type: "ArgMax" argmax_param { axis: 2 }', [(2, 3)], match="out of range")
    setup_error('type: "ArgMax" argmax_param { top_k: 0 }', [(2, 3)], match="less than 1")


# ---- Split and InnerProduct (existing layers) --------------------------------------------
def test_split_gradient_sums_tops():
    x = rnd(2, 3)
    layer, bottom, top = run('type: "Split"', [x], n_tops=3)
    assert all(numpy.array_equal(t.data, x) for t in top)
    backward(layer, bottom, top, [numpy.full((2, 3), v) for v in (1.0, 2.0, 4.0)])
    assert (bottom[0].diff == 7).all()
    assert check_gradient('type: "Split"', [x], n_tops=2) > 0


def test_inner_product_gradient():
    text = ('type: "InnerProduct" inner_product_param { num_output: 3 '
            'weight_filler { type: "gaussian" std: 0.5 } bias_filler { type: "gaussian" } }')
    assert check_gradient(text, [rnd(2, 4, 2)]) > 0
