"""Convolution image by image (kernels/conv_jit.py) against the batched columns' path, which
layer it is chosen for, and the BLAS thread counts it holds (kernels/blas_threads.py)."""
import os

import numpy
import pytest

from caffecli import context
from caffecli.blob import Blob
from caffecli.kernels import blas_blocks, blas_threads, caffe_gemv, conv_jit, im2col_jit, jit
from caffecli.layers import _base_conv, convolution
from gradcheck import make_layer

pytestmark = [
    pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed"),
    pytest.mark.skipif(not jit.INSTALLED or not blas_threads.available(),
                       reason="the BLAS is not an OpenBLAS whose threads can be held to one")]
R = numpy.random.RandomState(7)


def conv_layer(spec, shapes, dtype, batched, monkeypatch, seed=3, kind="Convolution"):
    """A Convolution (or Deconvolution) of ``spec`` set up on bottoms of ``shapes``, image by
    image or batched."""
    monkeypatch.setattr(_base_conv, "IMAGE_MAX_INNER", 0 if batched else 128)
    context.set_random_seed(seed)
    layer = make_layer('type: "%s" convolution_param { %s weight_filler { type: "gaussian" '
                       'std: 0.3 } bias_filler { type: "gaussian" std: 1 } }' % (kind, spec))
    bottom = [Blob(s, dtype=dtype) for s in shapes]
    top = [Blob(dtype=dtype) for _ in shapes]
    layer.SetUp(bottom, top)
    return layer, bottom, top


def run_steps(layer, bottom, top, xs, dys, down, steps=2):
    """Forward and backward ``steps`` times (the parameter gradients accumulate)."""
    for b, x in zip(bottom, xs):
        b.data[...] = x
    for p in layer.blobs:
        p.diff[...] = 0.5
    for _ in range(steps):
        layer.Forward(bottom, top)
        for t, dy in zip(top, dys):
            t.diff[...] = dy
        layer.Backward(top, down, bottom)
    return ([t.data.copy() for t in top], [b.diff.copy() for b in bottom],
            [p.diff.copy() for p in layer.blobs])


def assert_paths_agree(kind, spec, shape, dtype, rtol, monkeypatch):
    """Top, input and parameter gradients (accumulated over two steps) of two bottoms: image
    by image as the batched columns compute them."""
    xs = [R.randn(*shape) for _ in range(2)]
    got = []
    for batched in (False, True):
        layer, bottom, top = conv_layer(spec, [shape] * 2, dtype, batched, monkeypatch,
                                        kind=kind)
        assert layer.by_image != batched
        if not got:
            dys = [R.randn(*top[0].shape) for _ in range(2)]
        got.append(run_steps(layer, bottom, top, xs, dys, [True, True]))
    for mine, theirs in zip(*got):
        for a, b in zip(mine, theirs):
            numpy.testing.assert_allclose(a, b, rtol=rtol, atol=rtol)
    assert all(numpy.abs(d).sum() > 0 for d in got[0][1])


@pytest.mark.parametrize("dtype,rtol", [(numpy.float64, 1e-12), (numpy.float32, 2e-5)])
@pytest.mark.parametrize("spec,shape", [
    ("num_output: 20 kernel_size: 5", (4, 1, 12, 12)),                        # LeNet's conv1
    ("num_output: 6 kernel_size: 3 stride: 2 pad: 1 group: 2", (3, 4, 9, 8)),
    ("num_output: 5 kernel_h: 3 kernel_w: 2 dilation: 2 pad_h: 2 pad_w: 1", (2, 3, 8, 9)),
    ("num_output: 4 kernel_size: 3 stride: 3 bias_term: false", (5, 2, 10, 11)),
])
def test_images_compute_what_the_batched_columns_do(spec, shape, dtype, rtol, monkeypatch):
    assert_paths_agree("Convolution", spec, shape, dtype, rtol, monkeypatch)


@pytest.mark.parametrize("dtype,rtol", [(numpy.float64, 1e-12), (numpy.float32, 2e-5)])
@pytest.mark.parametrize("spec,shape", [
    ("num_output: 21 group: 21 kernel_size: 4 stride: 2 pad: 1", (2, 21, 6, 6)),  # upsampling
    ("num_output: 4 kernel_size: 3 stride: 2 pad: 1 dilation: 2", (3, 6, 5, 4)),
    ("num_output: 6 kernel_h: 2 kernel_w: 3 group: 2 bias_term: false", (2, 4, 5, 5)),
])
def test_deconvolution_images_compute_what_the_batched_columns_do(spec, shape, dtype, rtol,
                                                                  monkeypatch):
    """Deconvolution by image: conv_jit with Convolution's image and grid swapped."""
    assert_paths_agree("Deconvolution", spec, shape, dtype, rtol, monkeypatch)


@pytest.mark.parametrize("kind,dy_shape", [("Convolution", (3, 4, 5, 5)),
                                           ("Deconvolution", (3, 4, 9, 9))])
@pytest.mark.parametrize("down,params", [(False, (True, True)), (True, (False, True)),
                                         (True, (True, False)), (False, (False, True))])
def test_images_compute_only_the_gradients_asked_for(down, params, kind, dy_shape, monkeypatch):
    """Without propagate_down the bottom's diff stays; a parameter not learned keeps its diff."""
    shape = (3, 2, 7, 7)
    x, dy = R.randn(*shape), R.randn(*dy_shape)
    got = []
    for batched in (False, True):
        layer, bottom, top = conv_layer("num_output: 4 kernel_size: 3", [shape], numpy.float64,
                                        batched, monkeypatch, kind=kind)
        assert layer.by_image != batched
        layer.param_propagate_down = list(params)
        bottom[0].diff[...] = 7.0
        got.append(run_steps(layer, bottom, top, [x], [dy], [down], steps=1))
    (_, (dx,), (dw, db)), (_, (dx2,), (dw2, db2)) = got
    assert (dx == 7.0).all() != down
    numpy.testing.assert_allclose(dx, dx2, rtol=1e-12)
    assert (dw == 0.5).all() != params[0] and (db == 0.5).all() != params[1]
    numpy.testing.assert_allclose(dw, dw2, rtol=1e-12)
    numpy.testing.assert_allclose(db, db2, rtol=1e-12)


@pytest.mark.parametrize("spec,shape", [
    ("num_output: 50 kernel_size: 5", (4, 20, 12, 12)),                       # LeNet's conv2
    ("num_output: 8 kernel_size: 5 stride: 2 pad: 1 group: 2", (3, 12, 9, 9)),
])
def test_input_gradient_alone_by_image(spec, shape, monkeypatch):
    """Where only the input gradient runs image by image, every result is the batched path's
    (the weight gradient still reads the forward's batched columns)."""
    x = R.randn(*shape)
    got = []
    for macs in (convolution.DOWN_MAX_MACS, 0):
        monkeypatch.setattr(convolution, "DOWN_MAX_MACS", macs)
        layer, bottom, top = conv_layer(spec, [shape], numpy.float64, False, monkeypatch)
        assert layer.down_by_image == bool(macs) and not layer.by_image
        if not got:
            dy = R.randn(*top[0].shape)
        got.append(run_steps(layer, bottom, top, [x], [dy], [True]))
    for mine, theirs in zip(*got):
        for a, b in zip(mine, theirs):
            numpy.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("spec,shape,by_image", [
    ("num_output: 20 kernel_size: 5", (64, 1, 28, 28), True),              # LeNet conv1
    ("num_output: 32 kernel_size: 5 pad: 2", (100, 3, 32, 32), True),      # CIFAR-10 conv1
    ("num_output: 50 kernel_size: 5", (64, 20, 12, 12), False),            # LeNet conv2: K 500
    ("num_output: 64 kernel_size: 7 stride: 2 pad: 3", (2, 3, 64, 64), False),  # 147 x 1024
    ("num_output: 64 kernel_size: 3 pad: 1", (2, 3, 224, 224), False),     # columns 27 x 50176
    ("num_output: 8 kernel_size: 1", (2, 4, 9, 9), False),                 # 1x1: no im2col
    ("num_output: 16 kernel_size: 3 pad: 1", (4, 16, 8, 8), False),        # Winograd's
])
def test_images_are_chosen_for_narrow_kernels_and_small_maps(spec, shape, by_image):
    layer = make_layer('type: "Convolution" convolution_param { %s }' % spec)
    bottom, top = [Blob(shape)], [Blob()]
    layer.SetUp(bottom, top)
    assert layer.by_image == by_image
    assert layer.kernel_dim <= _base_conv.IMAGE_MAX_INNER or not by_image


@pytest.mark.parametrize("small", [blas_blocks.SMALL_MACS, 0])
@pytest.mark.parametrize("spec,shape,narrow", [
    ("num_output: 32 kernel_size: 5 pad: 2", (100, 32, 16, 16), True),   # CIFAR-10's conv2
    ("num_output: 32 kernel_size: 5 pad: 2", (10, 16, 28, 28), False),   # columns 12.5 MB
    ("num_output: 64 kernel_size: 5 pad: 2", (100, 32, 8, 8), False),    # its conv3: 64 filters
    ("num_output: 32 kernel_size: 5 pad: 2", (8, 16, 112, 112), False),  # 20 MB an image
])
def test_narrow_layers_over_many_columns_run_by_image(spec, shape, narrow, small, monkeypatch):
    """Few filters over more columns than cache holds (one image's within it) run image by
    image where BLAS has its small-matrix kernels, and stay batched where it has not."""
    monkeypatch.setattr(blas_blocks, "small_macs", lambda: small)
    layer = make_layer('type: "Convolution" convolution_param { %s }' % spec)
    layer.SetUp([Blob(shape)], [Blob()])
    assert layer.by_image == (narrow and bool(small) and layer._conv_jit_takes())


@pytest.mark.parametrize("spec,shape,down", [
    ("num_output: 50 kernel_size: 5", (64, 20, 12, 12), True),                 # LeNet conv2
    ("num_output: 32 kernel_size: 5 pad: 2", (100, 32, 16, 16), True),         # CIFAR-10 conv2
    ("num_output: 256 kernel_size: 5 pad: 2 group: 2", (10, 96, 27, 27), False),  # CaffeNet's
    ("num_output: 20 kernel_size: 5", (64, 1, 28, 28), False),   # LeNet conv1: all by image
    ("num_output: 8 kernel_size: 1", (2, 40, 9, 9), False),                    # 1x1
    ("num_output: 128 kernel_size: 1 stride: 2", (2, 256, 28, 28), False),  # a strided 1x1
    ("num_output: 64 kernel_size: 5 pad: 2", (10, 32, 14, 14), True),      # 200 KB of filters
    ("num_output: 128 kernel_size: 5 pad: 2", (10, 48, 7, 7), False),      # 600 KB
    ("num_output: 512 kernel_size: 3 pad: 1", (1, 512, 2, 2), False),      # 9 MB on a 2x2 map
])
def test_input_gradient_alone_by_image_for_small_products(spec, shape, down, monkeypatch):
    monkeypatch.setattr(blas_blocks, "small_macs", lambda: 0)   # CIFAR-10's conv2 stays batched
    layer = make_layer('type: "Convolution" convolution_param { %s }' % spec)
    bottom, top = [Blob(shape)], [Blob()]
    layer.SetUp(bottom, top)
    assert layer.down_by_image == down


def test_read_only_input_and_no_input_gradient():
    """conv_jit itself on a read-only image batch, without dx: the parameter gradients only,
    added to the diffs, summed in image order (the bias's as Caffe's per-image gemv)."""
    x = R.randn(3, 2, 6, 6).astype(numpy.float32)
    x.flags.writeable = False
    w = R.randn(1, 4, 18).astype(numpy.float32)
    dy = R.randn(3, 4, 4, 4).astype(numpy.float32)
    wdiff, bdiff = numpy.ones((1, 4, 18), numpy.float32), numpy.ones(4, numpy.float32)
    conv_jit.backward(x, dy, w, (3, 3), (1, 1), (1, 1), (0, 0), wdiff, None,
                      numpy.empty((3, 1, 4, 18), numpy.float32), bdiff=bdiff)
    cols = numpy.empty((3, 2, 3, 3, 1, 4, 4), numpy.float32)
    for i in range(3):
        im2col_jit.im2col(x[i:i + 1], (1, 1), (1, 1), (0, 0), False, cols[i])
    want = numpy.ones((4, 18), numpy.float32)
    for i in range(3):   # each image's product added in turn
        want += dy[i].reshape(4, 16).astype(numpy.float64) @ cols[i].reshape(18, 16).T
    numpy.testing.assert_allclose(wdiff[0], want, rtol=1e-5, atol=1e-5)
    want_bias = numpy.ones(4, numpy.float32)
    for i in range(3):
        want_bias = caffe_gemv.row_totals(dy[i].reshape(4, 16), 1, want_bias)
    assert bdiff.tobytes() == want_bias.tobytes()


def test_blas_runs_on_one_thread_inside_and_the_counts_come_back(monkeypatch):
    libraries = blas_threads._libraries[0]
    before = [get() for get, _ in libraries]
    with blas_threads.one_thread():
        with blas_threads.one_thread():
            assert [get() for get, _ in libraries] == [1] * len(libraries)
        assert [get() for get, _ in libraries] == [1] * len(libraries)
    assert [get() for get, _ in libraries] == before
    held = []
    real = blas_threads.one_thread
    monkeypatch.setattr(blas_threads, "one_thread",
                        lambda: held.append([get() for get, _ in libraries]) or real())
    y = numpy.empty((2, 3, 4, 4), numpy.float32)
    conv_jit.forward(numpy.ones((2, 1, 6, 6), numpy.float32), numpy.ones((1, 3, 9), numpy.float32),
                     None, None, (3, 3), (1, 1), (1, 1), (0, 0), y)
    assert len(held) == 1 and (y == 9).all()


def test_kernels_from_other_modules_are_compiled_and_keyed():
    """conv_jit's kernels call im2col_jit's: _linked compiles them and records them, so the
    disk cache's key holds their code (numba checks only the caller's own file), those they
    call in turn included."""
    linked = jit._linked(conv_jit._columns)
    assert set(linked.foreign) == {im2col_jit._strided_rows, im2col_jit._phase_rows,
                                   im2col_jit._window_rows, im2col_jit._im2col,
                                   im2col_jit._run_rows, im2col_jit._phases_read}
    assert jit._linked(im2col_jit._im2col).foreign == ()


@pytest.mark.parametrize("rows,inner,cols,step", [
    (20, 25, 576, 20),      # within SMALL_MACS: whole
    (32, 75, 1024, 12),     # 13 rows fit: blocks of 12, the last of 8
    (50, 500, 64, 28),      # 31 fit: 28 and 22
    (96, 256, 490, 96),     # 7 fit: blocks of 4 run slower than the whole
    (300, 100, 1000, 300),  # 38 blocks of 8: too many
    (256, 100, 1000, 8)])   # 32 blocks of 8
def test_products_in_blocks_of_rows(rows, inner, cols, step):
    """The blocks' plan with small-matrix kernels, whole products without them, and the
    product each makes is a @ b, every row written."""
    small = blas_blocks.SMALL_MACS
    assert blas_blocks.block_rows(rows, inner, cols, small) == step
    assert blas_blocks.block_rows(rows, inner, cols, 0) == rows
    a = R.randn(rows, inner).astype(numpy.float32)
    b = R.randn(inner, cols).astype(numpy.float32)
    for cap in (small, 0):
        out = numpy.full((rows, cols), numpy.nan, numpy.float32)
        with blas_threads.one_thread():
            jit.kernel(blas_blocks.blocked_product)(a, b, out, cap)
        numpy.testing.assert_allclose(out, a.astype(numpy.float64) @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cores,small", [
    (["skylakex", "skylakex"], blas_blocks.SMALL_MACS),
    (["cooperlake"], blas_blocks.SMALL_MACS),
    (["sapphirerapids", "skylakex"], blas_blocks.SMALL_MACS),
    (["haswell", "haswell"], 0),      # OPENBLAS_CORETYPE=Haswell, or an AVX2 core
    (["skylakex", "haswell"], 0),     # numpy's and scipy's builds differ
    (["zen"], 0),
    ([], 0)])
def test_blocks_only_where_openblas_has_small_matrix_kernels(monkeypatch, cores, small):
    """Blocks of rows pay only where OpenBLAS's small-matrix kernels take them unpacked."""
    monkeypatch.setattr(blas_threads, "core_names", lambda: cores)
    monkeypatch.setattr(blas_threads, "available", lambda: True)
    monkeypatch.delitem(jit._compiled, blas_blocks.small_macs, raising=False)
    try:
        assert blas_blocks.small_macs() == small
    finally:
        jit._compiled.pop(blas_blocks.small_macs, None)


def test_core_names_match_the_loaded_openblas():
    """The kernel names come from every loaded OpenBLAS (scipy's at least: numba's products
    run on it), in lower case, and follow OPENBLAS_CORETYPE where it forces them."""
    blas_threads.available()
    names = blas_threads.core_names()
    assert names and all(name and name == name.lower() for name in names)
    forced = os.environ.get("OPENBLAS_CORETYPE")
    if forced:
        assert set(names) == {forced.lower()}
