"""Vision layers: Convolution, Deconvolution, Im2col, Pooling, SPP, LRN, Crop.

Gradient checks (float64, Caffe's rule), hand-computed values, and CaffeError on bad params.
"""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.errors import CaffeError
from caffecli.layers import _base_conv as base_conv
from caffecli.proto import caffe_pb2
from gradcheck import check_gradient, make_layer

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode

R = numpy.random.RandomState(7)
GAUSS = 'weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.3 }'


def run(text, *arrays, n_tops=1, phase=caffe_pb2.TRAIN, dtype=numpy.float64):
    layer = make_layer(text, phase)
    bottom = []
    for a in arrays:
        b = Blob(numpy.shape(a), dtype=dtype)
        b.data[...] = a
        bottom.append(b)
    top = [Blob(dtype=dtype) for _ in range(n_tops)]
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    return layer, bottom, top


def distinct(*shape, spacing=0.1):
    """Values far enough apart that a 1e-2 step never changes a max or a sampled winner."""
    n = int(numpy.prod(shape))
    return (R.permutation(n) * spacing - n * spacing / 2).reshape(shape)


def conv(params, bias=True):
    return ('type: "Convolution" convolution_param { %s %s %s }'
            % (params, GAUSS, "" if bias else "bias_term: false"))


# ---- Convolution --------------------------------------------------------------------------
@pytest.mark.parametrize("params,shape", [
    ("num_output: 3 kernel_size: 3", (2, 2, 5, 6)),
    ("num_output: 4 kernel_size: 3 stride: 2 pad: 1", (2, 3, 6, 5)),
    ("num_output: 4 kernel_size: 2 group: 2", (2, 4, 4, 4)),
    ("num_output: 2 kernel_h: 2 kernel_w: 3 stride_h: 1 stride_w: 2 pad_h: 1 pad_w: 0",
     (1, 2, 5, 6)),
    ("num_output: 2 kernel_size: 3 dilation: 2 pad: 2", (1, 2, 6, 6)),
    ("num_output: 2 kernel_size: 1", (2, 3, 3, 4)),
    ("num_output: 2 kernel_size: 2 stride: 3", (2, 2, 7, 7)),
    ("num_output: 2 kernel_size: 2 stride: 2 pad: 1", (1, 2, 3, 4, 4)),  # 3-D
    ("num_output: 2 kernel_size: 3 pad: 1", (2, 3, 7)),  # 1-D
])
def test_convolution_gradient(params, shape):
    assert check_gradient(conv(params), [R.randn(*shape)]) > 0


def test_convolution_gradient_channel_axis_2():
    text = conv("num_output: 2 kernel_size: 2 axis: 2")
    layer, _, top = run(text, R.randn(2, 3, 2, 4, 4))
    assert top[0].shape == (2, 3, 2, 3, 3)
    assert check_gradient(text, [R.randn(2, 2, 2, 3, 3)]) > 0


def test_convolution_gradient_no_bias_two_bottoms():
    text = conv("num_output: 3 kernel_size: 2", bias=False)
    assert check_gradient(text, [R.randn(2, 2, 3, 3), R.randn(2, 2, 3, 3)], n_tops=2) > 0


def test_convolution_gradient_float32():
    assert check_gradient(conv("num_output: 3 kernel_size: 3 pad: 1"), [R.randn(2, 2, 4, 4)],
                          dtype=numpy.float32, stepsize=1e-2, threshold=1e-2) > 0


def test_convolution_by_hand():
    text = ('type: "Convolution" convolution_param { num_output: 1 kernel_size: 2 pad: 1 '
            'stride: 2 weight_filler { type: "constant" value: 1 } '
            'bias_filler { type: "constant" value: 0.5 } }')
    x = numpy.arange(9.0).reshape(1, 1, 3, 3)
    _, _, top = run(text, x)
    # windows over the zero-padded 5x5 image start at rows/cols -1 and 1
    want = numpy.array([[0, 1 + 2], [3 + 6, 4 + 5 + 7 + 8]], dtype=float) + 0.5
    numpy.testing.assert_allclose(top[0].data[0, 0], want)


def test_convolution_matches_direct_sum_with_groups_and_dilation():
    text = conv("num_output: 4 kernel_size: 3 dilation: 2 stride: 2 pad: 1 group: 2")
    x = R.randn(2, 4, 9, 8)
    layer, _, top = run(text, x)
    w, b = layer.blobs[0].data, layer.blobs[1].data
    xp = numpy.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = top[0].shape[2:]
    want = numpy.zeros(top[0].shape)
    for o in range(4):
        g = o // 2
        for i in range(oh):
            for j in range(ow):
                patch = xp[:, 2 * g:2 * g + 2, 2 * i:2 * i + 5:2, 2 * j:2 * j + 5:2]
                want[:, o, i, j] = (patch * w[o]).sum(axis=(1, 2, 3)) + b[o]
    numpy.testing.assert_allclose(top[0].data, want, rtol=1e-10)


@pytest.mark.usefixtures("batched_convolution")
def test_convolution_batch_chunks_match(monkeypatch):
    text = conv("num_output: 3 kernel_size: 3 pad: 1")
    x = R.randn(5, 2, 6, 6)
    ref_layer, ref_bottom, ref_top = run(text, x)
    monkeypatch.setattr(base_conv, "COL_CHUNK_ELEMENTS", 200)  # forces chunks of 1 image
    layer = make_layer(text)
    bottom, top = [Blob(x.shape, dtype=numpy.float64)], [Blob(dtype=numpy.float64)]
    bottom[0].data[...] = x
    layer.blobs = ref_layer.blobs
    layer.SetUp(bottom, top)
    assert layer.chunk == 1
    layer.Forward(bottom, top)
    numpy.testing.assert_allclose(top[0].data, ref_top[0].data, rtol=1e-12)
    dy = R.randn(*top[0].shape)
    for lay, t, b in ((ref_layer, ref_top, ref_bottom), (layer, top, bottom)):
        t[0].diff[...] = dy
        lay.blobs[0].diff[...] = 0
        lay.Backward(t, [True], b)
    numpy.testing.assert_allclose(bottom[0].diff, ref_bottom[0].diff, rtol=1e-12)


@pytest.mark.usefixtures("batched_convolution")
@pytest.mark.parametrize("threads", ["1", "3"])
def test_convolution_bias_added_in_the_move_is_added_after(monkeypatch, threads):
    """A chunk's product moved into place with the bias in the same pass (split by channel)
    gives the bits of moving it and adding the bias after."""
    from caffecli.kernels import threads as kernel_threads
    from caffecli.layers import convolution
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.setattr(kernel_threads, "MIN_PART_ELEMENTS", 1)
    text = conv("num_output: 5 kernel_size: 3 pad: 1 bias_filler { type: 'gaussian' }")
    x = R.randn(4, 3, 7, 6).astype(numpy.float32)
    tops = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(convolution.ConvolutionLayer, "_fused_bias", lambda self: None)
        layer = make_layer(text)
        bottom, top = [Blob(x.shape)], [Blob()]
        bottom[0].data[...] = x
        if tops:
            layer.blobs = tops[0][0].blobs
        layer.SetUp(bottom, top)
        assert layer.chunk == 4
        layer.Forward(bottom, top)
        tops.append((layer, top[0].data.copy()))
    assert tops[0][0].blobs[1].data.any()
    assert tops[0][1].tobytes() == tops[1][1].tobytes()


@pytest.mark.usefixtures("batched_convolution")
@pytest.mark.parametrize("params", ["num_output: 4 kernel_size: 3 pad: 1 group: 2",
                                    "num_output: 4 kernel_size: 1 group: 2"])
def test_convolution_algorithms_agree_and_accumulate(monkeypatch, params):
    """Per-image and batched GEMMs (a column cap of one image, or none) give the same top and
    gradients, and a second backward adds its weight gradient to the first (Caffe's
    accumulation)."""
    text, x = conv(params), R.randn(3, 4, 6, 5)
    dy = None
    results = []
    for cap in (1, 10 ** 9):
        monkeypatch.setattr(base_conv, "COL_CHUNK_ELEMENTS", cap)
        layer = make_layer(text)
        bottom, top = [Blob(x.shape, dtype=numpy.float64)], [Blob(dtype=numpy.float64)]
        bottom[0].data[...] = x
        if results:
            layer.blobs = results[0][0].blobs
        layer.SetUp(bottom, top)
        assert layer.chunk == (1 if cap == 1 else 3)
        layer.Forward(bottom, top)
        dy = R.randn(*top[0].shape) if dy is None else dy
        top[0].diff[...] = dy
        layer.blobs[0].diff[...] = 0
        layer.Backward(top, [True], bottom)
        once = layer.blobs[0].diff.copy()
        layer.Backward(top, [True], bottom)
        numpy.testing.assert_allclose(layer.blobs[0].diff, 2 * once, rtol=1e-12)
        results.append((layer, top[0].data.copy(), bottom[0].diff.copy(), once))
    (_, y1, dx1, dw1), (_, y2, dx2, dw2) = results
    numpy.testing.assert_allclose(y1, y2, rtol=1e-12)
    numpy.testing.assert_allclose(dx1, dx2, rtol=1e-12)
    numpy.testing.assert_allclose(dw1, dw2, rtol=1e-12)


def test_pointwise_convolution_is_a_channel_product():
    """A 1x1 convolution (GEMMs on the input itself, no columns) against einsum, groups 2."""
    x = R.randn(3, 4, 5, 2)
    layer, bottom, top = run(conv("num_output: 6 kernel_size: 1 group: 2"), x)
    assert layer.pointwise
    w = layer.blobs[0].data.reshape(2, 3, 2)
    xg = x.reshape(3, 2, 2, 10)
    want = numpy.einsum("gok,ngkp->ngop", w, xg).reshape(top[0].shape)
    numpy.testing.assert_allclose(top[0].data, want + layer.blobs[1].data.reshape(1, 6, 1, 1),
                                  rtol=1e-12)
    dy = R.randn(*top[0].shape)
    top[0].diff[...] = dy
    layer.Backward(top, [True], bottom)
    dyg = dy.reshape(3, 2, 3, 10)
    numpy.testing.assert_allclose(bottom[0].diff.reshape(xg.shape),
                                  numpy.einsum("gok,ngop->ngkp", w, dyg), rtol=1e-12)
    numpy.testing.assert_allclose(layer.blobs[0].diff.reshape(w.shape),
                                  numpy.einsum("ngop,ngkp->gok", dyg, xg), rtol=1e-12)


@pytest.mark.parametrize("kernel,stride,pad,dilation,img", [
    ((3, 3), (2, 2), (1, 1), (1, 1), (7, 6)), ((4, 4), (2, 2), (1, 1), (1, 1), (9, 9)),
    ((2, 3), (3, 2), (0, 2), (2, 1), (8, 7)), ((1, 1), (2, 3), (0, 0), (1, 1), (5, 7)),
    ((11, 11), (4, 4), (0, 0), (1, 1), (23, 27)), ((3, 2, 2), (2, 1, 3), (1, 0, 1), (1, 2, 1),
                                                   (5, 6, 7)),
    ((3, 3), (1, 1), (1, 1), (1, 1), (6, 5)), ((3, 2), (1, 1), (0, 2), (2, 1), (7, 6)),
    ((1, 1, 1), (2, 1, 3), (0, 0, 0), (1, 1, 1), (5, 4, 8)), ((1, 1), (2, 2), (1, 0), (1, 1),
                                                               (6, 6))])
def test_columns_equal_strided_windows(kernel, stride, pad, dilation, img):
    """im2col/col2im (stride-split where the stride is above 1, one strided copy for an
    unpadded 1x1 kernel) give exactly the strided-window view's numbers, in the
    (C, *kernel, n, *grid) layout."""
    from caffecli.kernels import im2col as ic
    n, c = 3, 2
    out = ic.conv_out_shape(list(img), kernel, pad, stride, dilation)
    cols = base_conv.ColumnMaker(list(kernel), list(stride), list(pad), list(dilation))
    cols.configure(c, list(img), out)
    assert cols.phased == any(s > 1 for s in stride)
    assert cols.subsample == (cols.phased and set(kernel) == {1} and not any(pad))
    x = R.randn(n, c, *img)
    got = cols.im2col(numpy, x).copy()
    padded = numpy.zeros((n, c) + tuple(cols.padded))
    ic.interior(padded, pad, img)[...] = x
    want = ic.windows(numpy, padded, kernel, stride, dilation, out)  # (n, c, *k, *out)
    images_at = 1 + len(kernel)
    numpy.testing.assert_array_equal(got, numpy.moveaxis(want, 0, images_at))
    col = R.randn(*got.shape)
    back = cols.col2im(numpy, col, numpy.empty((n, c) + tuple(img)))
    ref = numpy.zeros_like(padded)
    ic.col2im_add(ref, numpy.moveaxis(col, images_at, 0), kernel, stride, dilation, out)
    numpy.testing.assert_array_equal(back, ic.interior(ref, pad, img))


def test_convolution_keeps_float32():
    _, _, top = run(conv("num_output: 2 kernel_size: 3"), R.randn(1, 2, 4, 4),
                    dtype=numpy.float32)
    assert top[0].data.dtype == numpy.float32


@pytest.mark.parametrize("params,shape,message", [
    ("num_output: 2 kernel_size: 0", (1, 1, 4, 4), "nonzero"),
    ("num_output: 2 kernel_size: 2 stride: 0", (1, 1, 4, 4), "nonzero"),
    ("num_output: 2 kernel_size: 2 group: 2", (1, 3, 4, 4), "group"),
    ("num_output: 3 kernel_size: 2 group: 2", (1, 2, 4, 4), "group"),
    ("num_output: 0 kernel_size: 2", (1, 2, 4, 4), "num_output"),
    ("num_output: 2 kernel_size: 2 kernel_size: 2 kernel_size: 2", (1, 2, 4, 4), "kernel_size"),
    ("num_output: 2 kernel_h: 2 kernel_w: 2", (1, 2, 4, 4, 4), "2D"),
    ("num_output: 2 kernel_size: 2 kernel_h: 2 kernel_w: 2", (1, 2, 4, 4), "not both"),
    ("num_output: 2 kernel_size: 9", (1, 2, 3, 3), "does not fit"),
])
def test_convolution_bad_params(params, shape, message):
    with pytest.raises(CaffeError, match=message) as err:
        run('name: "c1" ' + conv(params), R.randn(*shape))
    assert "c1" in str(err.value)


def test_convolution_wrong_weight_shape():
    layer = make_layer(conv("num_output: 2 kernel_size: 2"))
    layer.blobs = [Blob((2, 1, 3, 3)), Blob((2,))]
    with pytest.raises(CaffeError, match="Incorrect weight shape"):
        layer.SetUp([Blob((1, 1, 4, 4))], [Blob()])


# ---- Deconvolution ------------------------------------------------------------------------
def deconv(params):
    return 'type: "Deconvolution" convolution_param { %s %s }' % (params, GAUSS)


@pytest.mark.parametrize("params,shape", [
    ("num_output: 2 kernel_size: 3", (2, 3, 3, 4)),
    ("num_output: 4 kernel_size: 3 stride: 2 pad: 1 group: 2", (2, 2, 3, 3)),
    ("num_output: 2 kernel_h: 2 kernel_w: 3 stride: 2", (1, 2, 3, 2)),
])
def test_deconvolution_gradient(params, shape):
    assert check_gradient(deconv(params), [R.randn(*shape)]) > 0


def test_deconvolution_is_convolution_transpose():
    """<conv(x), y> == <x, deconv(y)> with the same weights and no bias."""
    x = R.randn(2, 3, 7, 7)
    c, _, ct = run(conv("num_output: 4 kernel_size: 3 stride: 2 pad: 1", bias=False), x)
    y = R.randn(*ct[0].shape)
    text = ('type: "Deconvolution" convolution_param { num_output: 3 kernel_size: 3 stride: 2 '
            'pad: 1 bias_term: false }')
    d = make_layer(text)
    d.blobs = [c.blobs[0]]
    bottom, top = [Blob(y.shape, dtype=numpy.float64)], [Blob(dtype=numpy.float64)]
    bottom[0].data[...] = y
    d.SetUp(bottom, top)
    d.Forward(bottom, top)
    assert top[0].shape == (2, 3, 7, 7)  # 2 * (4 - 1) + 3 - 2
    numpy.testing.assert_allclose((ct[0].data * y).sum(), (x * top[0].data).sum(), rtol=1e-10)


# ---- Im2col -------------------------------------------------------------------------------
def test_im2col_layout_and_gradient():
    text = 'type: "Im2col" convolution_param { kernel_size: 2 stride: 1 pad: 1 }'
    x = numpy.arange(2 * 3 * 3, dtype=float).reshape(1, 2, 3, 3)
    _, _, top = run(text, x)
    assert top[0].shape == (1, 8, 4, 4)
    xp = numpy.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    # row c*4 + i*2 + j holds x_padded[c, oh + i, ow + j]
    numpy.testing.assert_array_equal(top[0].data[0, 4 + 1 * 2 + 0], xp[0, 1, 1:5, 0:4])
    assert check_gradient(text, [R.randn(2, 2, 4, 3)]) > 0


# ---- Pooling ------------------------------------------------------------------------------
def pool(params):
    return 'type: "Pooling" pooling_param { %s }' % params


@pytest.mark.parametrize("params,shape", [
    ("pool: MAX kernel_size: 2 stride: 2", (2, 2, 4, 5)),
    ("pool: MAX kernel_size: 3 stride: 2 pad: 1", (1, 2, 5, 6)),
    ("pool: MAX kernel_h: 3 kernel_w: 2 stride_h: 1 stride_w: 2 pad_h: 1 pad_w: 1",
     (1, 2, 4, 5)),
    ("pool: MAX global_pooling: true", (2, 3, 3, 4)),
    ("pool: AVE kernel_size: 3 stride: 2", (2, 2, 6, 5)),
    ("pool: AVE kernel_size: 3 stride: 2 pad: 1", (1, 2, 5, 6)),
    ("pool: AVE kernel_size: 2 stride: 1 pad: 1 round_mode: FLOOR", (1, 1, 4, 4)),
    ("pool: AVE global_pooling: true", (2, 3, 3, 4)),
])
def test_pooling_gradient(params, shape):
    assert check_gradient(pool(params), [distinct(*shape)]) > 0


def test_max_pooling_mask_top_and_ties():
    x = numpy.array([[[[1, 3, 3, 0], [2, 3, 1, 5], [0, 0, 0, 0]]]], dtype=float)
    _, _, top = run(pool("pool: MAX kernel_size: 2 stride: 2"), x, n_tops=2)
    # ceil mode: 2x2 output, the last row window holds only the input's third row
    numpy.testing.assert_array_equal(top[0].data[0, 0], [[3, 5], [0, 0]])
    # ties keep the first maximum in scan order (row 0 col 1, not row 1 col 1)
    numpy.testing.assert_array_equal(top[1].data[0, 0], [[1, 7], [8, 10]])


def test_max_pooling_backward_routes_to_argmax():
    x = numpy.array([[[[1, 4], [2, 3]]]], dtype=float)
    layer, bottom, top = run(pool("pool: MAX kernel_size: 2"), x)
    top[0].diff[...] = 7
    layer.Backward(top, [True], bottom)
    numpy.testing.assert_array_equal(bottom[0].diff[0, 0], [[0, 7], [0, 0]])


def test_max_pooling_empty_window_diff_goes_before_its_plane():
    """Kernel 1, stride 2, CEIL on 4x4: the third window of each axis starts at 4, past the
    image, and takes nothing (top -FLT_MAX, mask -1). Caffe's backward adds such a window's
    diff at index -1 of its plane: the last value of the plane before (dropped for the first
    plane), as the windows of an (n, c) plane come, images included."""
    x = numpy.arange(2 * 2 * 16, dtype=float).reshape(2, 2, 4, 4)
    layer, bottom, top = run(pool("pool: MAX kernel_size: 1 stride: 2"), x, n_tops=2)
    assert top[0].shape == (2, 2, 3, 3) and (top[1].data[..., 2] == -1).all()
    dtop = numpy.arange(1.0, 37.0).reshape(2, 2, 3, 3)
    top[0].diff[...] = dtop
    layer.Backward(top, [True], bottom)
    want = numpy.zeros_like(x)
    want[..., ::2, ::2] = dtop[..., :2, :2]
    empty = dtop.copy()
    empty[..., :2, :2] = 0
    want.reshape(4, 16)[:3, -1] += empty.reshape(4, 9).sum(axis=1)[1:]
    numpy.testing.assert_array_equal(bottom[0].diff, want)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_max_pooling_spills_a_window_of_minus_inf_and_checks_nothing_otherwise(monkeypatch,
                                                                            dtype, device_mode):
    """A window whose inputs are all -inf has no winner (-1), found from the data: its diff
    goes before its plane, as for a window past the image. The compiled backward reports such
    windows, so where there are none the spill's own pass over the winners is not run."""
    if device_mode != "cpu":
        pytest.skip("the device spills only windows empty by geometry (no read-back)")
    from caffecli.kernels import jit
    from caffecli.layers import pooling as pooling_layer
    calls = []
    real = pooling_layer.spill_empty_windows
    monkeypatch.setattr(pooling_layer, "spill_empty_windows",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    x = numpy.arange(2 * 2 * 16, dtype=dtype).reshape(2, 2, 4, 4)
    layer, bottom, top = run(pool("pool: MAX kernel_size: 2 stride: 2"), x, n_tops=2)
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    assert calls == ([] if jit.usable(x) else [1])
    x[1, 0, 2:, 2:] = -numpy.inf
    layer, bottom, top = run(pool("pool: MAX kernel_size: 2 stride: 2"), x, n_tops=2)
    assert top[1].data[1, 0, 1, 1] == -1 and (top[1].data >= 0).sum() == top[1].count - 1
    top[0].diff[...] = numpy.arange(1.0, 17.0).reshape(2, 2, 2, 2)
    layer.Backward(top, [True], bottom)
    assert calls[-1:] == [1]
    want = numpy.zeros_like(x)
    want[..., 1::2, 1::2] = top[0].diff            # each window's last value wins
    want[1, 0, 3, 3] = 0
    want[0, 1, 3, 3] += top[0].diff[1, 0, 1, 1]    # the last value of the plane before
    numpy.testing.assert_array_equal(bottom[0].diff, want)


def test_ave_pooling_divisor_counts_padding_by_hand():
    x = numpy.ones((1, 1, 3, 3))
    _, _, top = run(pool("pool: AVE kernel_size: 3 stride: 2 pad: 1"), x)
    # every window is 3x3 inside the padded 5x5 extent: corner sums 4 / 9
    numpy.testing.assert_allclose(top[0].data[0, 0], [[4 / 9., 4 / 9.], [4 / 9., 4 / 9.]])
    _, _, top = run(pool("pool: AVE kernel_size: 2 stride: 2 pad: 1"), numpy.ones((1, 1, 3, 3)))
    # windows start at -1 and 1; the second ends at min(3, 3 + 1) = 3: size 2x2 each
    numpy.testing.assert_allclose(top[0].data[0, 0], [[0.25, 0.5], [0.5, 1.0]])


def test_pooling_drops_window_starting_in_padding():
    # CEIL gives ceil((4 + 2 - 2) / 2) + 1 = 3, but window 3 would start at 4 - 1 = 3 < 4 + 1:
    # kept; with H = 3: ceil((3 + 2 - 2)/2)+1 = 3 and (3-1)*2 = 4 >= 3 + 1: dropped
    _, _, top = run(pool("pool: MAX kernel_size: 2 stride: 2 pad: 1"), R.randn(1, 1, 3, 3))
    assert top[0].shape == (1, 1, 2, 2)
    _, _, top = run(pool("pool: MAX kernel_size: 2 stride: 2 pad: 1"), R.randn(1, 1, 4, 4))
    assert top[0].shape == (1, 1, 3, 3)


def test_stochastic_pooling_train_samples_and_test_averages():
    x = R.uniform(0.1, 1.0, size=(2, 2, 4, 4))
    layer, bottom, top = run(pool("pool: STOCHASTIC kernel_size: 2 stride: 2"), x)
    windows = x.reshape(2, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 3, 5).reshape(2, 2, 2, 2, 4)
    assert numpy.all((windows == top[0].data[..., None]).any(axis=-1))
    top[0].diff[...] = 1
    layer.Backward(top, [True], bottom)
    assert bottom[0].diff.sum() == top[0].count  # one winner per window
    _, _, top = run(pool("pool: STOCHASTIC kernel_size: 2 stride: 2"), x,
                    phase=caffe_pb2.TEST)
    numpy.testing.assert_allclose(top[0].data, (windows ** 2).sum(-1) / windows.sum(-1))


@pytest.mark.parametrize("params,message", [
    ("pool: MAX kernel_size: 0", "zero"),
    ("pool: MAX kernel_size: 2 stride: 0", "zero"),
    ("pool: MAX kernel_size: 2 pad: 2", "smaller than kernel"),
    ("pool: MAX stride: 1", "kernel_h and kernel_w"),
    ("pool: MAX kernel_size: 2 kernel_h: 2 kernel_w: 2", "not both"),
    ("pool: MAX global_pooling: true kernel_size: 2", "Global_pooling"),
    ("pool: STOCHASTIC kernel_size: 2 pad: 1", "Padding"),
])
def test_pooling_bad_params(params, message):
    with pytest.raises(CaffeError, match=message) as err:
        run('name: "p1" ' + pool(params), R.randn(1, 1, 4, 4))
    assert "p1" in str(err.value)


def test_pooling_needs_4_axes_and_mask_only_for_max():
    with pytest.raises(CaffeError, match="4 axes"):
        run(pool("pool: MAX kernel_size: 2"), R.randn(2, 3, 4))
    with pytest.raises(CaffeError):
        run(pool("pool: AVE kernel_size: 2"), R.randn(1, 1, 4, 4), n_tops=2)


# ---- SPP ----------------------------------------------------------------------------------
@pytest.mark.parametrize("params,shape", [
    ("pyramid_height: 2 pool: MAX", (2, 2, 6, 5)),
    ("pyramid_height: 3 pool: AVE", (1, 2, 8, 6)),
    ("pyramid_height: 1 pool: MAX", (2, 2, 3, 3)),
])
def test_spp_gradient(params, shape):
    assert check_gradient('type: "SPP" spp_param { %s }' % params, [distinct(*shape)]) > 0


def test_spp_shapes_and_values():
    x = distinct(2, 3, 4, 4)
    _, _, top = run('type: "SPP" spp_param { pyramid_height: 2 pool: MAX }', x)
    assert top[0].shape == (2, 3 * 1 + 3 * 4)
    numpy.testing.assert_array_equal(top[0].data[:, :3], x.max(axis=(2, 3)))
    quad = x.reshape(2, 3, 2, 2, 2, 2).max(axis=(3, 5)).reshape(2, 12)
    numpy.testing.assert_array_equal(top[0].data[:, 3:], quad)
    _, _, top = run('type: "SPP" spp_param { pyramid_height: 1 }', x)
    assert top[0].shape == (2, 3, 1, 1)


def test_spp_level_needing_pad_ge_kernel_fails():
    with pytest.raises(CaffeError, match="pad"):
        run('name: "s" type: "SPP" spp_param { pyramid_height: 3 }', R.randn(1, 1, 5, 5))
    with pytest.raises(CaffeError, match="padding"):
        run('type: "SPP" spp_param { pyramid_height: 2 pool: STOCHASTIC }', R.rand(1, 1, 5, 5))


# ---- LRN ----------------------------------------------------------------------------------
@pytest.mark.parametrize("params", [
    "local_size: 3 alpha: 0.5 beta: 0.75",
    "local_size: 5 alpha: 1.0 beta: 0.6 k: 2",
    "local_size: 3 alpha: 0.5 beta: 0.75 norm_region: WITHIN_CHANNEL",
    "local_size: 5 alpha: 2 beta: 0.5 norm_region: WITHIN_CHANNEL",
])
def test_lrn_gradient(params):
    assert check_gradient('type: "LRN" lrn_param { %s }' % params,
                          [R.randn(2, 7, 3, 4)]) > 0


def test_lrn_across_channels_by_hand():
    x = R.randn(1, 4, 2, 2)
    _, _, top = run('type: "LRN" lrn_param { local_size: 3 alpha: 0.3 beta: 0.7 k: 1.5 }', x)
    sq = numpy.pad(x ** 2, ((0, 0), (1, 1), (0, 0), (0, 0)))
    scale = 1.5 + 0.3 / 3 * (sq[:, 0:4] + sq[:, 1:5] + sq[:, 2:6])
    numpy.testing.assert_allclose(top[0].data, x * scale ** -0.7, rtol=1e-6)  # float32 params


def test_lrn_across_channels_in_place_as_caffe_leaves_it():
    """Top = bottom: Caffe writes scale^-beta over the input before multiplying by it, so the
    top is scale^-2beta, and its backward overwrites the top diff the same way (the incoming
    diff is lost): dx = 1/s - 1/s^4 for local_size 1, alpha 1, beta 0.5, k 1, s = 1 + x^2."""
    layer = make_layer('type: "LRN" lrn_param { local_size: 1 alpha: 1 beta: 0.5 k: 1 }')
    blob = Blob((1, 1, 1, 2), dtype=numpy.float64)
    blob.data[...] = [1.0, 2.0]
    layer.SetUp([blob], [blob])
    layer.Forward([blob], [blob])
    s = numpy.array([2.0, 5.0])
    numpy.testing.assert_allclose(blob.data.reshape(-1), 1 / s, rtol=1e-12)
    blob.diff[...] = [7.0, 9.0]
    layer.Backward([blob], [True], [blob])
    numpy.testing.assert_allclose(blob.diff.reshape(-1), 1 / s - 1 / s ** 4, rtol=1e-12)


def test_lrn_within_channel_by_hand():
    x = R.randn(1, 1, 3, 3)
    text = ('type: "LRN" lrn_param { local_size: 3 alpha: 0.3 beta: 0.7 '
            'norm_region: WITHIN_CHANNEL }')
    _, _, top = run(text, x)
    sq = numpy.pad(x[0, 0] ** 2, 1)
    avg = numpy.array([[sq[i:i + 3, j:j + 3].sum() / 9 for j in range(3)] for i in range(3)])
    numpy.testing.assert_allclose(top[0].data[0, 0], x[0, 0] * (1 + 0.3 * avg) ** -0.7,
                                  rtol=1e-6)


def test_lrn_even_size_fails():
    with pytest.raises(CaffeError, match="odd"):
        run('type: "LRN" lrn_param { local_size: 4 }', R.randn(1, 4, 2, 2))


# ---- Crop ---------------------------------------------------------------------------------
def test_crop_values_and_gradient():
    x = R.randn(2, 3, 5, 6)
    ref = numpy.zeros((2, 3, 2, 3))
    _, _, top = run('type: "Crop" crop_param { axis: 2 offset: 1 offset: 2 }', x, ref)
    numpy.testing.assert_array_equal(top[0].data, x[:, :, 1:3, 2:5])
    _, _, top = run('type: "Crop" crop_param { axis: 1 offset: 1 }', x, numpy.zeros((1, 2, 3, 4)))
    numpy.testing.assert_array_equal(top[0].data, x[:, 1:3, 1:4, 1:5])
    assert check_gradient('type: "Crop" crop_param { axis: 2 offset: 1 }', [x, ref],
                          check_bottoms=[0]) > 0


@pytest.mark.parametrize("params,ref_shape,message", [
    ("axis: 2 offset: 1 offset: 2 offset: 3", (2, 3, 2, 2), "number of offset"),
    ("axis: 2 offset: 4", (2, 3, 2, 2), "out-of-bounds"),
    ("axis: 7", (2, 3, 2, 2), "axis"),
])
def test_crop_bad_params(params, ref_shape, message):
    with pytest.raises(CaffeError, match=message):
        run('type: "Crop" crop_param { %s }' % params, R.randn(2, 3, 5, 5),
            numpy.zeros(ref_shape))
