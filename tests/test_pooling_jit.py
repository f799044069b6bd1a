"""The compiled host pooling kernels (kernels/pooling_jit.py) against the numpy reference
(kernels/pooling.py): same outputs and winners, gradients equal up to the order of the adds."""
import numpy
import pytest

from caffecli.kernels import jit, pooling, pooling_jit
from caffecli.kernels import threads as kernel_threads
from caffecli.kernels.pooling import PoolGeometry

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")

GEOMETRIES = [  # kernel, stride, pad, input (h, w), ceil rounding
    ((3, 3), (2, 2), (0, 0), (13, 13), True),      # CaffeNet's pools (ceil: a partial window)
    ((2, 2), (2, 2), (0, 0), (24, 24), True),      # LeNet's
    ((3, 3), (1, 1), (1, 1), (7, 9), True),        # GoogLeNet's stride-1 padded pools
    ((3, 3), (1, 1), (1, 1), (14, 14), True),      # ... on a 14x14 map
    ((3, 3), (1, 1), (1, 1), (2, 1), True),        # ... on a map smaller than the window
    ((3, 3), (2, 2), (1, 1), (12, 11), True),      # a padded stride-2 pool (ResNet's kind)
    ((3, 3), (2, 2), (0, 0), (14, 13), True),      # GoogLeNet's stride-2 pools: the last
                                                    # row (and column) of windows clipped
    ((3, 3), (2, 2), (1, 1), (2, 2), True),        # a padded one on a map smaller than it
    ((2, 2), (2, 2), (0, 0), (7, 6), True),        # LeNet's kind, the last window partial
    ((3, 3), (3, 3), (0, 0), (9, 12), True),       # 3x3 windows that tile the image
    ((3, 2), (2, 3), (1, 1), (8, 10), False),      # uneven, floor rounding
    ((5, 5), (1, 1), (0, 0), (5, 5), True),        # global
    ((1, 1), (2, 2), (0, 0), (4, 9), True),        # ceil rounding adds a window past the
]                                                   # input: AVE gives Caffe's 0 / 0 = NaN


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("kernel,stride,pad,hw,ceil", GEOMETRIES)
@pytest.mark.parametrize("threads", ["1", "5"])
def test_compiled_pooling_matches_the_reference(monkeypatch, kernel, stride, pad, hw, ceil,
                                                dtype, threads):
    """With 5 threads the 2 images are fewer than the threads: the loops run over the 6
    image planes (pooling_jit._planes), split in parts of one or two planes."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.setattr(kernel_threads, "MIN_PART_ELEMENTS", 1)
    rs = numpy.random.RandomState(3)
    x = rs.randn(2, 3, *hw).astype(dtype)
    x[0, 0, :2, :2] = 1.5                           # ties: the first maximum wins
    x[1, 1, 1, :] = numpy.nan                       # never a maximum, as in Caffe's loops
    x[1, 2, :3] = -numpy.inf                        # windows of -inf alone give -FLT_MAX, -1
    geo = PoolGeometry(kernel, stride, pad, hw, ceil_mode=ceil)
    shape = x.shape[:2] + tuple(geo.out_hw)
    dtop = rs.randn(*shape).astype(dtype)

    ref_top, ref_arg = pooling.max_pool(numpy, x, geo)
    top, arg = numpy.empty(shape, dtype), numpy.empty(shape, numpy.int32)
    pooling_jit.max_pool(x, geo, top, arg)
    numpy.testing.assert_array_equal(top, ref_top)
    numpy.testing.assert_array_equal(arg, ref_arg)
    dx = numpy.full(x.shape, numpy.nan, dtype)       # every element is written
    # the backward tells whether a window had no winner (Caffe's spill: layers/pooling.py)
    assert pooling_jit.max_pool_backward(dtop, arg, geo, dx) == (ref_arg < 0).any()
    numpy.testing.assert_allclose(dx, pooling.max_pool_backward(numpy, dtop, ref_arg, geo, dtype),
                                  rtol=1e-6, atol=1e-6)
    pooling_jit.max_pool(rs.randn(*x.shape).astype(dtype), geo, top, arg)   # finite input
    assert pooling_jit.max_pool_backward(dtop, arg, geo, dx) == (arg < 0).any()
    arg[-1, -1, -1, -1] = -1                         # the last window of the last image
    assert pooling_jit.max_pool_backward(dtop, arg, geo, dx)

    pooling_jit.ave_pool(x, geo, top)
    numpy.testing.assert_allclose(top, pooling.ave_pool(numpy, x, geo), rtol=1e-6, atol=1e-6,
                                  equal_nan=True)
    dx[...] = numpy.nan
    pooling_jit.ave_pool_backward(dtop, geo, dx)
    numpy.testing.assert_allclose(dx, pooling.ave_pool_backward(numpy, dtop, geo, dtype),
                                  rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kernel,stride,pad,hw,ceil", GEOMETRIES)
def test_compiled_max_pool_keeps_the_first_zeros_sign(kernel, stride, pad, hw, ceil):
    """A ReLU's output is mostly zeros: the first of equal maxima wins, so a window whose first
    zero is -0.0 gives -0.0 (the same bits as Caffe's loop), and the winner is that offset."""
    rs = numpy.random.RandomState(5)
    x = numpy.maximum(rs.randn(3, 4, *hw), 0).astype(numpy.float32)
    x[rs.rand(*x.shape) < 0.4] = -0.0
    geo = PoolGeometry(kernel, stride, pad, hw, ceil_mode=ceil)
    shape = x.shape[:2] + tuple(geo.out_hw)
    ref_top, ref_arg = pooling.max_pool(numpy, x, geo)
    top, arg = numpy.empty(shape, numpy.float32), numpy.empty(shape, numpy.int32)
    pooling_jit.max_pool(x, geo, top, arg)
    numpy.testing.assert_array_equal(top.view(numpy.uint32), ref_top.view(numpy.uint32))
    numpy.testing.assert_array_equal(arg, ref_arg)


@pytest.mark.parametrize("side", [2, 3])
def test_tiled_max_backward_is_the_scatter_bit_for_bit(side):
    """Where the windows tile the image, each row is written once: the same bits as zeroing
    the image and adding each gradient at its winner (a -0.0 gradient lands as 0.0, a window
    without a winner leaves zeros)."""
    rs = numpy.random.RandomState(side)
    geo = PoolGeometry((side, side), (side, side), (0, 0), (2 * side, 4 * side))
    dtop = rs.randn(3, 2, 2, 4).astype(numpy.float32)
    dtop[0, 0, 0, :2] = -0.0
    arg = rs.randint(-1, side * side, size=dtop.shape).astype(numpy.int32)
    arg[0, 0, 0, :2] = 0
    dx = numpy.full((3, 2, 2 * side, 4 * side), numpy.nan, numpy.float32)
    assert pooling_jit.max_pool_backward(dtop, arg, geo, dx) == (arg < 0).any()
    scatter = pooling_jit._MAX_BACKWARD[0, 0, 0]      # the general loops, run by Python
    ref = numpy.full_like(dx, numpy.nan)
    empty = numpy.full(3, 7, numpy.uint8)
    scatter(dtop, arg, side, side, side, 0, 0, ref, empty)
    assert dx.tobytes() == ref.tobytes()
    assert list(empty) == [int((a < 0).any()) for a in arg]
    assert not numpy.signbit(dx[0, 0, 0, 0])


def test_the_layer_takes_the_compiled_path_only_where_it_applies(monkeypatch):
    rs = numpy.random.RandomState(0)
    x = rs.randn(4, 3, 8, 8).astype(numpy.float32)
    assert jit.usable(x, x)
    assert not jit.usable(x.astype(numpy.float16), x)
    assert not jit.usable(x[:, :, ::2], x)            # strided
    monkeypatch.setenv("CAFFECLI_JIT", "0")
    assert not jit.usable(x, x)


def _top_and_bottom_diff(text, x, dy, dtype, jit_flag, monkeypatch):
    """The net of ``text`` (bottom "x", top "y") run forward and backward with CAFFECLI_JIT set
    to ``jit_flag``: (y's data, x's diff)."""
    from caffecli.net import Net
    from caffecli.proto import caffe_pb2
    from caffecli.proto.io import parse_text
    monkeypatch.setenv("CAFFECLI_JIT", jit_flag)
    net = Net(parse_text(text, caffe_pb2.NetParameter()), caffe_pb2.TRAIN, dtype=dtype,
              log=False)
    net.blob_by_name("x").data[...] = x
    net.forward_pass()
    net.blob_by_name("y").diff[...] = dy
    net.backward_pass()
    return net.blob_by_name("y").data.copy(), net.blob_by_name("x").diff.copy()


@pytest.mark.parametrize("size,channels", [(5, 12), (3, 2), (5, 3), (1, 4)])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_compiled_lrn_matches_the_reference(size, channels, dtype, monkeypatch):
    """ACROSS_CHANNELS LRN through the layer, compiled and with CAFFECLI_JIT=0."""
    text = ('input: "x" input_shape { dim: 3 dim: %d dim: 5 dim: 6 } force_backward: true '
            'layer { name: "n" type: "LRN" bottom: "x" top: "y" lrn_param { local_size: %d '
            'alpha: 0.3 beta: 0.75 k: 2 } }' % (channels, size))
    rs = numpy.random.RandomState(size)
    x = rs.randn(3, channels, 5, 6)
    dy = rs.randn(3, channels, 5, 6)
    results = [_top_and_bottom_diff(text, x, dy, dtype, flag, monkeypatch) for flag in "10"]
    from caffecli.kernels import lrn_jit
    assert lrn_jit._forward in jit._compiled and lrn_jit._backward in jit._compiled
    tol = 1e-5 if dtype == numpy.float32 else 1e-12
    for compiled, reference in zip(*results):
        numpy.testing.assert_allclose(compiled, reference, rtol=tol, atol=tol)


def _caffe_across_channels(x, dy, size, alpha, beta, k):
    """Caffe's CrossChannelForward_cpu and CrossChannelBackward_cpu written out in float32: the
    window's squares added into the scale and the ratios' products into the diff by axpy, a
    fused multiply-add (kernels/blas_steps.py), powx the C library's powf: (y, dx)."""
    from caffecli.kernels.blas_steps import fused
    f = numpy.float32
    n, c = x.shape[:2]
    pre = (size - 1) // 2
    aos = f(alpha) / f(size)
    sq = numpy.zeros((n, c + size - 1) + x.shape[2:], f)
    sq[:, pre:pre + c] = x * x
    scale = numpy.full(x.shape, f(k), f)
    for i in range(n):
        for j in range(size):
            scale[i, 0] = fused(aos, sq[i, j], scale[i, 0])
        for ch in range(1, c):
            scale[i, ch] = fused(aos, sq[i, ch + size - 1], scale[i, ch - 1])
            scale[i, ch] = fused(-aos, sq[i, ch - 1], scale[i, ch])
    powed = _c_pow(scale, -beta)
    y = powed * x
    cache = f(2.0 * float(f(alpha)) * float(f(beta)) / size)
    dx = powed * dy
    ratio = numpy.zeros((n, c + size - 1) + x.shape[2:], f)
    ratio[:, size - (size + 1) // 2:size - (size + 1) // 2 + c] = dy * y / scale
    for i in range(n):
        accum = numpy.zeros(x.shape[2:], f)
        for j in range(size - 1):
            accum = accum + ratio[i, j]
        for ch in range(c):
            accum = accum + ratio[i, ch + size - 1]
            dx[i, ch] = fused(-cache, x[i, ch] * accum, dx[i, ch])
            accum = accum - ratio[i, ch]
    return y, dx


@pytest.mark.parametrize("size,channels", [(5, 12), (3, 2), (5, 3), (1, 4)])
def test_compiled_lrn_is_caffes_loops_bit_for_bit(size, channels, monkeypatch):
    """ACROSS_CHANNELS LRN (``engine: CAFFE``: powf) compiled, float32: the bits of Caffe's
    loops, whose axpy steps round once (without that, a quarter of the golden LRN values were
    an ulp or so off)."""
    text = ('input: "x" input_shape { dim: 3 dim: %d dim: 5 dim: 6 } force_backward: true '
            'layer { name: "n" type: "LRN" bottom: "x" top: "y" lrn_param { local_size: %d '
            'alpha: 0.3 beta: 0.75 k: 2 engine: CAFFE } }' % (channels, size))
    rs = numpy.random.RandomState(size + channels)
    x = (rs.randn(3, channels, 5, 6) * 2).astype(numpy.float32)
    dy = rs.randn(3, channels, 5, 6).astype(numpy.float32)
    got = _top_and_bottom_diff(text, x, dy, numpy.float32, "1", monkeypatch)
    for a, b in zip(got, _caffe_across_channels(x, dy, size, 0.3, 0.75, 2)):
        numpy.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_lrn_default_engine_takes_beta_075_by_refined_square_roots(dtype):
    """beta 0.75 with ``engine: DEFAULT`` on float32 data: scale^-0.75 by square roots and a
    Newton step, powf's bits (``engine: CAFFE``, Caffe's arithmetic) but where powf misrounds;
    float64 data, other betas and ``engine: CAFFE`` keep pow."""
    from caffecli.proto import caffe_pb2
    from caffecli.proto.io import parse_text
    from caffecli.net import Net
    rs = numpy.random.RandomState(7)
    x = rs.randn(4, 16, 9, 9) * 3
    out = {}
    for engine, beta in (("DEFAULT", 0.75), ("CAFFE", 0.75), ("DEFAULT", 0.6)):
        text = ('input: "x" input_shape { dim: 4 dim: 16 dim: 9 dim: 9 } layer { name: "n" '
                'type: "LRN" bottom: "x" top: "y" lrn_param { local_size: 5 alpha: 2 beta: %g '
                'k: 1 engine: %s } }' % (beta, engine))
        net = Net(parse_text(text, caffe_pb2.NetParameter()), caffe_pb2.TEST, dtype=dtype,
                  log=False)
        net.blob_by_name("x").data[...] = x
        net.forward_pass()
        out[engine, beta] = (net.layers[-1].roots, net.blob_by_name("y").data.copy())
    assert [out[key][0] for key in out] == [True, False, False]
    roots, pow_ = out["DEFAULT", 0.75][1], out["CAFFE", 0.75][1]
    if dtype == numpy.float64:
        numpy.testing.assert_array_equal(roots, pow_)
    else:
        numpy.testing.assert_allclose(roots, pow_, rtol=2.4e-7, atol=0)   # 2 ulps
        assert (roots != pow_).mean() < 2e-3


def test_lrn_power_075_is_powfs_value_but_where_powf_misrounds():
    """kernels/lrn_jit.py's v^-0.75 for float32 v against the C library's powf: the same bits
    for all but a few in a thousand of 20K values over the float32 range, and pow's values at
    0, inf, NaN, the smallest subnormal and the largest float; the plain float32 roots (the
    Newton step's first guess) are an ulp off in about half."""
    from caffecli.kernels import lrn_jit
    power = jit.kernel(lrn_jit._power_075)
    rs = numpy.random.RandomState(11)
    edges = numpy.array([0, numpy.inf, numpy.nan, 1e-45, 3.4e38, 1], numpy.float32)
    v = numpy.concatenate([rs.uniform(1, 3, 10000).astype(numpy.float32),
                           numpy.exp(rs.uniform(-80, 80, 10000)).astype(numpy.float32), edges])
    got = numpy.array([power(a) for a in v], numpy.float64).astype(numpy.float32)
    want = _c_pow(v, -0.75)
    numpy.testing.assert_array_equal(got[-6:], want[-6:])
    assert (got.view(numpy.uint32) != want.view(numpy.uint32)).mean() < 2e-3
    r = numpy.sqrt(v[:-6])
    plain = numpy.float32(1) / (r * numpy.sqrt(r))
    assert (plain != want[:-6]).mean() > 0.3


def _c_pow(base, exponent):
    """The C library's powf / pow of each value (Caffe's powx without MKL)."""
    import ctypes
    import ctypes.util
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    single = base.dtype == numpy.float32
    fn = libm.powf if single else libm.pow
    kind = ctypes.c_float if single else ctypes.c_double
    fn.argtypes, fn.restype = [kind, kind], kind
    return numpy.array([fn(float(v), float(exponent)) for v in base.ravel()],
                       base.dtype).reshape(base.shape)


def _caffe_within_channel(x, dy, size, alpha, beta):
    """Caffe's WITHIN_CHANNEL LRN written out as its layers' loops (split, square, AVE pooling,
    power, product, and their backwards, in lrn_layer.cpp's order), one rounding per step in
    x's dtype, alpha and beta the prototxt's floats: (y, dx)."""
    t = x.dtype.type
    alpha, beta = float(numpy.float32(alpha)), float(numpy.float32(beta))
    n, c, h, w = x.shape
    pre = (size - 1) // 2
    sq = x * x
    pooled = numpy.zeros_like(x)
    divisor = numpy.zeros((h, w), x.dtype)
    for ph in range(h):
        for pw in range(w):
            hs, ws = ph - pre, pw - pre
            he, we = min(hs + size, h + pre), min(ws + size, w + pre)
            divisor[ph, pw] = (he - hs) * (we - ws)
            for a in range(max(hs, 0), min(he, h)):
                for b in range(max(ws, 0), min(we, w)):
                    pooled[:, :, ph, pw] += sq[:, :, a, b]
    pooled /= divisor
    base = pooled * t(alpha) + t(1)
    power = _c_pow(base, -beta)
    y = x * power
    # backward: the product's two gradients, the power layer's, the pooling's, the square's
    d_power = x * dy
    d_pooled = d_power * (power / base * (t(-beta) * t(alpha)))
    d_sq = numpy.zeros_like(x)
    for ph in range(h):
        for pw in range(w):
            hs, ws = ph - pre, pw - pre
            for a in range(max(hs, 0), min(hs + size, h)):
                for b in range(max(ws, 0), min(ws + size, w)):
                    d_sq[:, :, a, b] += d_pooled[:, :, ph, pw] / divisor[ph, pw]
    return y, power * dy + d_sq * (t(2) * x)


@pytest.mark.parametrize("size,hw", [(3, (5, 6)), (5, (4, 7)), (3, (1, 1)), (1, (3, 3))])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_compiled_within_channel_lrn_is_caffes_loops_bit_for_bit(size, hw, dtype, monkeypatch):
    """WITHIN_CHANNEL LRN through the layer (``engine: CAFFE``: pow), compiled: the bits of
    Caffe's composition run as its loops; with CAFFECLI_JIT=0 (numpy, whose pooling gradient
    sums in another order) within rounding."""
    from caffecli.kernels import lrn_jit
    text = ('input: "x" input_shape { dim: 2 dim: 3 dim: %d dim: %d } force_backward: true '
            'layer { name: "n" type: "LRN" bottom: "x" top: "y" lrn_param { local_size: %d '
            'alpha: 0.7 beta: 0.75 norm_region: WITHIN_CHANNEL engine: CAFFE } }'
            % (hw + (size,)))
    rs = numpy.random.RandomState(size + hw[1])
    x = rs.randn(2, 3, *hw).astype(dtype)
    dy = rs.randn(2, 3, *hw).astype(dtype)
    results = [_top_and_bottom_diff(text, x, dy, dtype, flag, monkeypatch) for flag in "10"]
    assert lrn_jit._within_forward in jit._compiled and lrn_jit._within_backward in jit._compiled
    want = _caffe_within_channel(x, dy, size, 0.7, 0.75)
    for got, expected in zip(results[0], want):
        assert got.dtype == dtype
        numpy.testing.assert_array_equal(got, expected)
    tol = 1e-5 if dtype == numpy.float32 else 1e-12
    for reference, expected in zip(results[1], want):
        numpy.testing.assert_allclose(reference, expected, rtol=tol, atol=tol)


def test_within_channel_lrn_default_engine_takes_square_roots():
    """``engine: DEFAULT`` with beta 0.75 computes base^-0.75 by refined square roots on the
    compiled path too: Caffe's powf's bits but in its rare misrounded values."""
    from caffecli.net import Net
    from caffecli.proto import caffe_pb2
    from caffecli.proto.io import parse_text
    rs = numpy.random.RandomState(3)
    x = rs.randn(4, 8, 9, 9).astype(numpy.float32) * 3
    out = {}
    for engine in ("DEFAULT", "CAFFE"):
        text = ('input: "x" input_shape { dim: 4 dim: 8 dim: 9 dim: 9 } layer { name: "n" '
                'type: "LRN" bottom: "x" top: "y" lrn_param { local_size: 3 alpha: 2 '
                'beta: 0.75 norm_region: WITHIN_CHANNEL engine: %s } }' % engine)
        net = Net(parse_text(text, caffe_pb2.NetParameter()), caffe_pb2.TEST,
                  dtype=numpy.float32, log=False)
        net.blob_by_name("x").data[...] = x
        net.forward_pass()
        out[engine] = net.blob_by_name("y").data.copy()
    numpy.testing.assert_allclose(out["DEFAULT"], out["CAFFE"], rtol=2.4e-7, atol=0)
    assert (out["DEFAULT"] != out["CAFFE"]).mean() < 2e-3


@pytest.mark.parametrize("threads,parts", [("1", 1), ("2", 2), ("3", 3), ("8", 3)])
def test_pooling_splits_by_planes_where_images_are_fewer_than_threads(monkeypatch, threads,
                                                                      parts):
    """One image of three channels: its planes go to the threads (at most one part a plane),
    and the pools read the same values as the reference."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.setattr(kernel_threads, "MIN_PART_ELEMENTS", 1)
    counts = []
    real = pooling_jit.for_native

    def recording(driver, count, elements, *args, **kw):
        counts.append(kernel_threads._parts(count, elements, kw.get("min_part"), pooled=False))
        return real(driver, count, elements, *args, **kw)
    monkeypatch.setattr(pooling_jit, "for_native", recording)
    x = numpy.random.RandomState(1).randn(1, 3, 9, 9).astype(numpy.float32)
    geo = PoolGeometry((3, 3), (2, 2), (1, 1), (9, 9))
    top = numpy.empty((1, 3) + tuple(geo.out_hw), numpy.float32)
    arg = numpy.empty(top.shape, numpy.int32)
    pooling_jit.max_pool(x, geo, top, arg)
    ref_top, ref_arg = pooling.max_pool(numpy, x, geo)
    numpy.testing.assert_array_equal(top, ref_top)
    numpy.testing.assert_array_equal(arg, ref_arg)
    pooling_jit.ave_pool(x, geo, top)
    numpy.testing.assert_allclose(top, pooling.ave_pool(numpy, x, geo), rtol=1e-6)
    assert counts == [parts, parts]                 # the forward of each pool
