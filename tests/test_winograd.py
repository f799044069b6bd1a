"""Winograd's F(2x2, 3x3) convolution (kernels/winograd.py) against im2col's (``engine: CAFFE``):
forward, input and weight gradients, and the layer's choice between them."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.kernels import jit, threads, winograd
from caffecli.layers import convolution
from caffecli.layers.convolution import ConvolutionLayer
from caffecli.proto import caffe_pb2
from host_blas import assert_bits_or_close

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
CP = caffe_pb2.ConvolutionParameter
OVERHANG = convolution.WINOGRAD_MAX_OVERHANG


@pytest.fixture(autouse=True)
def ragged_maps_take_winograd(monkeypatch):
    """The cases' small odd maps, whose last tiles overhang (the cropping path), take Winograd
    here whatever their overhang, so each case tests the condition it names."""
    monkeypatch.setattr(convolution, "WINOGRAD_MAX_OVERHANG", float("inf"))


def conv_layer(engine, num_output, group=1, kernel=3, pad=1, stride=1, dilation=1):
    lp = caffe_pb2.LayerParameter(name="conv", type="Convolution")
    p = lp.convolution_param
    p.num_output, p.group, p.engine = num_output, group, engine
    p.kernel_size.append(kernel)
    p.pad.append(pad)
    p.stride.append(stride)
    p.dilation.append(dilation)
    return ConvolutionLayer(lp)


def run(engine, shape, num_output, dtype, bottoms=1, passes=1, **geometry):
    """(layer, tops' data, bottoms' diffs, weight diff, bias diff) of forward + backward on
    fixed random numbers."""
    rs = numpy.random.RandomState(3)
    layer = conv_layer(engine, num_output, **geometry)
    bottom = [Blob(shape, dtype) for _ in range(bottoms)]
    top = [Blob((1,), dtype) for _ in range(bottoms)]
    for b in bottom:
        b.data[...] = rs.randn(*shape)
    layer.SetUp(bottom, top)
    for blob in layer.blobs:
        blob.data[...] = rs.randn(*blob.shape)
        blob.diff[...] = 0
    for _ in range(passes):
        layer.Forward(bottom, top)
        for t in top:
            t.diff[...] = numpy.random.RandomState(4).randn(*t.shape)
        layer.Backward(top, [True] * bottoms, bottom)
    return (layer, [t.data.copy() for t in top], [b.diff.copy() for b in bottom],
            layer.blobs[0].diff.copy(), layer.blobs[1].diff.copy())


def assert_near(got, want, rel):
    scale = numpy.abs(want).max()
    assert numpy.abs(got - want).max() <= rel * scale


@pytest.mark.parametrize("dtype,rel", [(numpy.float64, 1e-12), (numpy.float32, 4e-6)])
@pytest.mark.parametrize("shape,num_output,group,pad", [
    ((4, 16, 9, 11), 32, 1, 1), ((8, 32, 8, 7), 16, 1, 0), ((3, 32, 7, 9), 32, 2, 2),
    ((1, 16, 16, 16), 24, 1, 1)])
def test_winograd_matches_im2col(dtype, rel, shape, num_output, group, pad):
    """Forward, input gradient and weight gradient agree with im2col's to rounding; the bias
    gradient (no Winograd in it) bit for bit. Odd sizes crop the last tiles."""
    fast = run(CP.DEFAULT, shape, num_output, dtype, group=group, pad=pad)
    ref = run(CP.CAFFE, shape, num_output, dtype, group=group, pad=pad)
    assert fast[0].winograd and not ref[0].winograd
    assert_near(fast[1][0], ref[1][0], rel)
    assert_near(fast[2][0], ref[2][0], rel)
    assert_near(fast[3], ref[3], rel)
    numpy.testing.assert_array_equal(fast[4], ref[4])
    assert not numpy.array_equal(fast[1][0], ref[1][0]) or dtype == numpy.float64


def test_winograd_in_chunks_with_two_bottoms_accumulates(monkeypatch):
    """Chunks of images (the input tiles recomputed for the weight gradient), two bottom/top
    pairs, and two passes: the weight gradient adds up as im2col's does."""
    monkeypatch.setattr(convolution, "COL_CHUNK_ELEMENTS", 16 * 16 * 25 * 2)
    fast = run(CP.DEFAULT, (5, 16, 10, 10), 16, numpy.float64, bottoms=2, passes=2)
    ref = run(CP.CAFFE, (5, 16, 10, 10), 16, numpy.float64, bottoms=2, passes=2)
    assert fast[0].winograd and fast[0].chunk == 2
    for got, want in zip(fast[1] + fast[2] + [fast[3]], ref[1] + ref[2] + [ref[3]]):
        assert_near(got, want, 1e-12)


@pytest.mark.parametrize("shape,num_output,geometry", [
    ((4, 16, 9, 9), 16, dict(stride=2)), ((4, 16, 9, 9), 16, dict(kernel=5, pad=2)),
    ((4, 16, 9, 9), 16, dict(dilation=2, pad=2)), ((4, 16, 9, 9), 16, dict(pad=3)),
    ((4, 8, 9, 9), 16, {}), ((4, 32, 9, 9), 32, dict(group=4)), ((1, 16, 9, 9), 16, {})])
def test_im2col_where_winograd_does_not_apply_or_pay(shape, num_output, geometry):
    """Not 3x3 stride-1 undilated with pad <= 2, narrow groups, or too few tiles (one 9x9
    image: 25): im2col's path, Caffe's numbers exactly."""
    fast = run(CP.DEFAULT, shape, num_output, numpy.float32, **geometry)
    ref = run(CP.CAFFE, shape, num_output, numpy.float32, **geometry)
    assert not fast[0].winograd
    for got, want in zip(fast[1:], ref[1:]):
        numpy.testing.assert_array_equal(numpy.asarray(got), numpy.asarray(want))


@pytest.mark.parametrize("hw,taken", [((7, 7), False), ((9, 9), False), ((13, 13), True),
                                       ((14, 14), True), ((13, 14), True), ((5, 28), True),
                                       ((5, 5), False)])
def test_winograd_only_where_its_tiles_overhang_the_map_little(monkeypatch, hw, taken):
    """At most WINOGRAD_MAX_OVERHANG times the map's outputs computed: a 7x7 map's tiles
    cover 8x8 (1.31x), 9x9's 10x10 (1.23x), 13x13's 14x14 (1.16x), 5x28's 6x28 (1.2x, the
    limit), 5x5's 6x6 (1.44x)."""
    monkeypatch.setattr(convolution, "WINOGRAD_MAX_OVERHANG", OVERHANG)
    layer = run(CP.DEFAULT, (8, 16) + hw, 16, numpy.float32)[0]
    assert layer.winograd == taken


def test_compiled_kernels_off_runs_im2col(monkeypatch):
    monkeypatch.setenv("CAFFECLI_JIT", "0")
    fast = run(CP.DEFAULT, (4, 16, 9, 11), 32, numpy.float32)
    ref = run(CP.CAFFE, (4, 16, 9, 11), 32, numpy.float32)
    assert fast[0].winograd   # chosen at reshape; the arrays decide at each call
    for got, want in zip(fast[1:], ref[1:]):
        numpy.testing.assert_array_equal(numpy.asarray(got), numpy.asarray(want))


@pytest.mark.parametrize("group", [1, 2])
def test_filter_transform_of_turned_filters(group):
    """``flipped`` is the transform of each filter turned by 180 degrees, each group's
    transposed (C / group, K / group); the transform of a filter whose only tap is the centre
    is the outer product of G's middle column."""
    g = numpy.random.RandomState(0).randn(6, 2, 3, 3)
    u = numpy.empty((16, 6, 2))
    turned = winograd.filter_transform(g, u.copy(), flipped=True, group=group)
    want = winograd.filter_transform(g[:, :, ::-1, ::-1].copy(), u)
    numpy.testing.assert_allclose(turned.reshape(16, group, 2, 6 // group),
                                  want.reshape(16, group, 6 // group, 2).transpose(0, 1, 3, 2),
                                  rtol=1e-13)
    centre = numpy.zeros((1, 1, 3, 3))
    centre[0, 0, 1, 1] = 1
    col = numpy.array([0, 0.5, -0.5, 0])
    numpy.testing.assert_array_equal(winograd.filter_transform(centre, numpy.empty((16, 1, 1))),
                                     numpy.outer(col, col).reshape(16, 1, 1))


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("k, c, group", [(6, 4, 1), (6, 4, 2), (40, 36, 4), (17, 3, 1)])
def test_compiled_filter_transforms_are_the_gemms_bits(dtype, k, c, group, monkeypatch):
    """The compiled filter transforms (forward, turned, and the weight gradient's G^T (.) G
    added into a diff) give the bits of the GEMMs they replace, run where the compiled
    kernels are off (SKYLAKEX's kernels; others' within rounding: host_blas), the same bits
    over 1, 2 or 3 threads."""
    rs = numpy.random.RandomState(k + c + group)
    g = rs.randn(k, c // group, 3, 3).astype(dtype)
    g[0, 0, 1] = -0.0
    w_hat = rs.randn(16, k, c // group).astype(dtype)
    diff = rs.randn(*g.shape).astype(dtype)

    def transforms():
        return [winograd.filter_transform(g, numpy.full((16, k, c // group), numpy.nan, dtype),
                                          flipped, group) for flipped in (False, True)] + [
            winograd.filter_gradient(w_hat, diff.copy())]

    monkeypatch.setenv("CAFFECLI_JIT", "0")
    want = transforms()
    monkeypatch.setattr(threads, "MIN_PART_ELEMENTS", 1)
    first = None
    for count in ("1", "2", "3"):
        monkeypatch.setenv("CAFFECLI_JIT", "1")
        monkeypatch.setenv("OMP_NUM_THREADS", count)
        got = transforms()
        first = first or got
        for one, ref, same in zip(got, want, first):
            assert_bits_or_close(one, ref)
            assert one.tobytes() == same.tobytes()


@pytest.mark.parametrize("turned", [False, True])
def test_products_split_across_threads(turned, monkeypatch):
    """The stack's products, split across 1, 2 or 3 threads (each product on one
    thread's BLAS), give the same bits, and what BLAS's own stack of products gives where
    BLAS's threads cannot be held (24 rows: blocks of 20 and 4, or whole where turned)."""
    from caffecli.kernels import blas_threads
    rs = numpy.random.RandomState(5)
    a = rs.randn(6, 24, 96).astype(numpy.float32)
    b = rs.randn(6, 96, 500).astype(numpy.float32)
    if turned:
        b = numpy.ascontiguousarray(b.transpose(0, 2, 1))
    monkeypatch.setattr(winograd, "PRODUCT_MIN_PART", 1)
    results = []
    for count in ("1", "2", "3"):
        monkeypatch.setenv("OMP_NUM_THREADS", count)
        results.append(winograd.products(a, b, numpy.full((6, 24, 500), numpy.nan, numpy.float32),
                                         turned))
    for got in results[1:]:
        numpy.testing.assert_array_equal(got, results[0])
    monkeypatch.setattr(blas_threads, "available", lambda: False)
    stacked = winograd.products(a, b, numpy.full((6, 24, 500), numpy.nan, numpy.float32), turned)
    numpy.testing.assert_allclose(results[0], stacked, rtol=1e-5, atol=1e-4)
