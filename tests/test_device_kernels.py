"""The CAFFE engine's device kernels (kernels/cuda/*.cu through kernels/device.py): through the
layers in GPU mode they compute what the host computes, over the geometries Caffe nets use.

They run on the GPU where cupy finds one (.ci/gpu), else on the stand-in device, which builds the
same CUDA C as host C++ and checks every argument against the kernel's C signature; nvcc, where
installed, compiles them for a GPU.
"""
import os
import shutil
import subprocess

import numpy
import pytest

from caffecli import context, standin_kernels
from caffecli.kernels import device
from caffecli.layers.dropout import DropoutLayer
from caffecli.net import Net
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from conftest import enter_gpu_mode, real_gpu_reason

FAMILIES = ["im2col", "pooling", "lrn", "dropout", "solvers", "argmax", "softmax_loss",
            "batch_norm", "scale", "relu", "reduce"]
ON_A_GPU = real_gpu_reason() is None
needs_compiler = pytest.mark.skipif(standin_kernels.compiler() is None,
                                    reason="the stand-in device needs a C++ compiler for "
                                           "device kernels")


@pytest.fixture
def kernel_device(monkeypatch):
    """The device the kernels run on (the GPU, else the stand-in), with the CAFFE engine's
    code (cuDNN off); the test starts in CPU mode and switches itself."""
    if not ON_A_GPU and standin_kernels.compiler() is None:
        pytest.skip("no GPU, and the stand-in device needs a C++ compiler for device kernels")
    monkeypatch.setenv("CAFFECLI_CUDNN", "0")
    enter_gpu_mode(monkeypatch)
    context.set_mode_cpu()
    yield
    context.set_mode_cpu()


def run(text, shape, dtype, seed=1, x=None, param_diffs=False):
    """Every blob's data and x's diff (and with ``param_diffs`` the parameters' diffs) after
    one forward and backward of the net ``text`` (input x: ``x``, or normal values), only the
    data for a net with no backward."""
    rs = numpy.random.RandomState(seed)
    backward = "ArgMax" not in text
    context.set_random_seed(7)
    net = Net(parse_text(('input: "x" input_shape { %s } force_backward: %s '
                          % (" ".join("dim: %d" % d for d in shape), str(backward).lower()))
                         + text, caffe_pb2.NetParameter()), caffe_pb2.TRAIN, dtype=dtype,
              log=False)
    net.blob_by_name("x").data[...] = rs.randn(*shape) if x is None else x
    net.forward_pass()
    params = [p.data.copy() for layer in net.layers for p in layer.blobs]
    if not backward:
        return [net.blob_by_name(n).data.copy() for n in net.blob_names] + params
    for name in net.blob_names:
        if name != "x":
            blob = net.blob_by_name(name)
            blob.diff[...] = rs.randn(*blob.shape)
    for layer in net.layers:
        for p in layer.blobs:
            p.diff[...] = 0.5          # gradients accumulate, as in Caffe
    net.backward_pass()
    return [net.blob_by_name(n).data.copy() for n in net.blob_names] + params + \
        [net.blob_by_name("x").diff.copy()] + \
        [p.diff.copy() for layer in net.layers for p in layer.blobs if param_diffs]


def launches(monkeypatch):
    """The names of the device kernels launched from now on, as a list that grows."""
    launched = []
    for kind in ("launch", "launch_blocks"):
        def counted(xp, family, name, *args, real=getattr(device, kind), **kwargs):
            launched.append(name)
            return real(xp, family, name, *args, **kwargs)
        monkeypatch.setattr(device, kind, counted)
    return launched


def grids(monkeypatch):
    """{kernel name: the grid of its last launch}, from now on."""
    seen, real_function = {}, device.function

    def spying(xp, family, name, dtype):
        fn = real_function(xp, family, name, dtype)

        def call(grid, block, args, **kwargs):
            seen[name] = grid
            return fn(grid, block, args, **kwargs)
        return call
    monkeypatch.setattr(device, "function", spying)
    return seen


def on_each_side(monkeypatch, text, shape, dtype, x=None, param_diffs=False):
    """The results on the host, on the device with kernels, and the kernels launched."""
    host = run(text, shape, dtype, x=x, param_diffs=param_diffs)
    launched = launches(monkeypatch)
    context.set_mode_gpu()
    try:
        return host, run(text, shape, dtype, x=x, param_diffs=param_diffs), launched
    finally:
        context.set_mode_cpu()


def assert_same(host, dev, dtype):
    tol = 1e-5 if dtype == numpy.float32 else 1e-12
    for a, b in zip(host, dev):
        numpy.testing.assert_allclose(b, a, rtol=tol, atol=tol)


POOLS = [  # pooling_param window fields, input (h, w)
    ("kernel_size: 3 stride: 2", (13, 13)),                     # CaffeNet's (a partial window)
    ("kernel_size: 2 stride: 2", (24, 24)),                     # LeNet's
    ("kernel_size: 3 stride: 1 pad: 1", (7, 9)),                # GoogLeNet's
    ("kernel_h: 3 kernel_w: 2 stride_h: 2 stride_w: 3 pad: 1 round_mode: FLOOR", (8, 10)),
    ("global_pooling: true", (5, 6)),
    ("kernel_size: 1 stride: 2", (4, 9)),                       # a window past the input
]


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("pool", ["MAX", "AVE"])
@pytest.mark.parametrize("window,hw", POOLS)
def test_pooling_kernels_compute_the_hosts_pooling(window, hw, pool, dtype, monkeypatch,
                                                   kernel_device):
    tops = 'top: "y" top: "mask"' if pool == "MAX" else 'top: "y"'
    text = ('layer { name: "p" type: "Pooling" bottom: "x" %s pooling_param { pool: %s %s } }'
            % (tops, pool, window))
    host, dev, launched = on_each_side(monkeypatch, text, (2, 3) + hw, dtype)
    assert launched == ["%s_pool_forward" % pool.lower(), "%s_pool_backward" % pool.lower()]
    assert_same(host, dev, dtype)


CONVS = [
    ("Convolution", "num_output: 4 kernel_size: 3 stride: 2 pad: 1", (9, 11)),
    ("Convolution", "num_output: 6 kernel_h: 2 kernel_w: 3 dilation: 2 pad: 2 group: 3",
     (8, 7)),
    ("Convolution", "num_output: 3 kernel_size: 5", (12, 12)),                # LeNet-like
    ("Convolution", "num_output: 2 kernel_size: 4 stride: 4", (9, 9)),        # gaps
    ("Deconvolution", "num_output: 4 kernel_size: 3 stride: 2 pad: 1", (5, 6)),
    ("Deconvolution", "num_output: 3 kernel_size: 4 stride: 3 dilation: 2", (4, 4)),
]


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("kind,param,hw", CONVS)
def test_im2col_kernels_compute_the_hosts_convolution(kind, param, hw, dtype, monkeypatch,
                                                      kernel_device):
    text = ('layer { name: "c" type: "%s" bottom: "x" top: "y" convolution_param { %s '
            'weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" } } }'
            % (kind, param))
    host, dev, launched = on_each_side(monkeypatch, text, (3, 6) + hw, dtype, param_diffs=True)
    # Convolution: columns forward, again for the weights' gradient, col2im backward, the
    # product moved into place with the bias (Deconvolution: col2im forward, im2col backward);
    # the bias gradient's sums
    assert set(launched) == {"im2col", "col2im", "channel_sums"} | (
        {"images_first_bias"} if kind == "Convolution" else set())
    assert_same(host, dev, dtype)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("size,channels", [(5, 12), (3, 2), (5, 3), (1, 4), (7, 7)])
def test_lrn_kernels_compute_the_hosts_lrn(size, channels, dtype, monkeypatch, kernel_device):
    text = ('layer { name: "n" type: "LRN" bottom: "x" top: "y" lrn_param { local_size: %d '
            'alpha: 0.3 beta: 0.75 k: 2 } }' % size)
    host, dev, launched = on_each_side(monkeypatch, text, (3, channels, 5, 6), dtype)
    assert launched == ["lrn_forward", "lrn_backward"]
    assert_same(host, dev, dtype)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("in_place", [False, True])
def test_the_dropout_kernel_draws_the_array_codes_mask(in_place, dtype, monkeypatch,
                                                       kernel_device):
    """On the device the kernel and the array code draw the same mask from the same key of
    the stream, to the bit (a seeded GPU run repeats), in place too."""
    text = ('layer { name: "s" type: "Scale" bottom: "x" top: "s" scale_param { '
            'filler { value: 1 } } } '
            'layer { name: "d" type: "Dropout" bottom: "s" top: "%s" dropout_param { '
            'dropout_ratio: 0.3 } }' % ("s" if in_place else "y"))
    shape = (4, 5, 7, 3)
    launched = launches(monkeypatch)
    context.set_mode_gpu()
    try:
        kernel = run(text, shape, dtype)
        assert [n for n in launched if n.startswith("dropout")] == ["dropout_forward"]
        monkeypatch.setattr(DropoutLayer, "forward_gpu", DropoutLayer.forward)
        array_code = run(text, shape, dtype)
    finally:
        context.set_mode_cpu()
    assert [n for n in launched if n.startswith("dropout")] == ["dropout_forward"]
    dropped = kernel[1 if in_place else 2] == 0             # blobs x, s (, y)
    assert 0.2 < dropped.mean() < 0.4
    for a, b in zip(array_code, kernel):
        numpy.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("param", ["top_k: 1", "top_k: 3 out_max_val: true", "axis: 1 top_k: 2",
                                   "axis: -1 top_k: 4 out_max_val: true"])
def test_the_argmax_kernel_ranks_as_the_hosts_sort(param, dtype, monkeypatch, kernel_device):
    """Ties rank the larger index first and NaN last, on both sides."""
    x = numpy.round(numpy.random.RandomState(2).randn(3, 5, 2, 4), 0)      # many ties
    x[0, 1, 0, 0] = x[1, 0, 1, 3] = numpy.nan
    text = 'layer { name: "a" type: "ArgMax" bottom: "x" top: "y" argmax_param { %s } }' % param
    host, dev, launched = on_each_side(monkeypatch, text, x.shape, dtype, x=x)
    assert launched == ["argmax_top_k"]
    for a, b in zip(host, dev):
        numpy.testing.assert_array_equal(b, a)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("global_stats,stored", [(False, False), (False, True), (True, False),
                                                 (True, True)])
@pytest.mark.parametrize("in_place", [False, True])
def test_the_batch_norm_kernels_compute_the_hosts_batch_norm(global_stats, stored, in_place,
                                                            dtype, monkeypatch, kernel_device):
    """Normalized data, gradient and the running sums, from zero statistics or stored ones
    (scaled by 1 / 2.5). Statistics read from the prototxt are float32 (as from a
    .caffemodel), so a float64 net runs them through the array code."""
    blobs = ('blobs { shape { dim: 3 } data: [0.5, -1, 2] } blobs { shape { dim: 3 } '
             'data: [2, 0.25, 5] } blobs { shape { dim: 1 } data: 2.5 }') if stored else ""
    text = ('layer { name: "s" type: "Scale" bottom: "x" top: "s" scale_param { '
            'filler { value: 1 } } } '
            'layer { name: "b" type: "BatchNorm" bottom: "s" top: "%s" batch_norm_param { '
            'use_global_stats: %s moving_average_fraction: 0.9 eps: 0.001 } %s }'
            % ("s" if in_place else "y", str(global_stats).lower(), blobs))
    host, dev, launched = on_each_side(monkeypatch, text, (4, 3, 5, 2), dtype)
    kernels = ["batch_norm_global_forward"] if global_stats else \
        ["batch_norm_running_stats", "batch_norm_normalize"]
    mine = [n for n in launched if n.startswith("batch_norm")]
    assert mine == ([] if stored and dtype == numpy.float64 else kernels)
    assert_same(host, dev, dtype)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("param", ["", "bias_term: true", "axis: 1 num_axes: 2 bias_term: true",
                                   "axis: 0 num_axes: -1"])
@pytest.mark.parametrize("in_place", [False, True])
def test_the_scale_kernel_computes_the_hosts_scale(param, in_place, dtype, monkeypatch,
                                                  kernel_device):
    """The product, bias and (in place) the kept input for the scale's gradient forward; the
    whole backward (the scale's and the bias's gradients, the input's) in one kernel."""
    text = ('layer { name: "r" type: "ReLU" bottom: "x" top: "r" } '
            'layer { name: "s" type: "Scale" bottom: "r" top: "%s" scale_param { %s '
            'filler { type: "gaussian" } bias_filler { type: "gaussian" } } }'
            % ("r" if in_place else "y", param))
    host, dev, launched = on_each_side(monkeypatch, text, (2, 3, 4, 5), dtype, param_diffs=True)
    assert [n for n in launched if n.startswith("scale")] == ["scale_forward", "scale_backward"]
    assert_same(host, dev, dtype)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("slope", [0, 0.1])
@pytest.mark.parametrize("in_place", [False, True])
def test_the_relu_kernels_compute_the_hosts_relu(slope, in_place, dtype, monkeypatch,
                                                kernel_device):
    x = numpy.random.RandomState(6).randn(2, 3, 4, 5)
    x[0, 0, 0, :3] = [0, numpy.nan, -0.0]
    text = ('layer { name: "s" type: "Scale" bottom: "x" top: "s" scale_param { '
            'filler { value: 1 } } } '
            'layer { name: "r" type: "ReLU" bottom: "s" top: "%s" relu_param { '
            'negative_slope: %g } }' % ("s" if in_place else "y", slope))
    host, dev, launched = on_each_side(monkeypatch, text, x.shape, dtype, x=x)
    assert [n for n in launched if n.startswith("relu")] == ["relu_forward", "relu_backward"]
    for a, b in zip(host, dev):
        numpy.testing.assert_array_equal(b, a)


def softmax_loss(param, labels, dtype):
    """Loss, x's diff and the bad-label error (or None) of SoftmaxWithLoss over (2, 5, 3)."""
    net = Net(parse_text('force_backward: true input: "x" input_shape { dim: 2 dim: 5 dim: 3 } '
                         'input: "l" input_shape { dim: 2 dim: 3 } layer { name: "s" type: '
                         '"SoftmaxWithLoss" bottom: "x" bottom: "l" top: "loss" %s }' % param,
                         caffe_pb2.NetParameter()), caffe_pb2.TRAIN, dtype=dtype, log=False)
    net.blob_by_name("x").data[...] = numpy.random.RandomState(4).randn(2, 5, 3) * 3
    net.blob_by_name("l").data[...] = labels
    try:
        loss = net.forward_pass()
    except Exception as exc:       # a label out of range, named when the loss comes back NaN
        return None, None, str(exc)
    net.backward_pass()
    return loss, net.blob_by_name("x").diff.copy(), None


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("param,labels", [
    ("", [[0, 4, 2], [1, 1, 3]]),
    ("loss_param { ignore_label: 1 }", [[0, 4, 2], [1, 1, 3]]),
    ("loss_param { ignore_label: 4 normalization: BATCH_SIZE } loss_weight: 2.5",
     [[4, 4, 2], [1, 0, 3]]),
    ("loss_param { ignore_label: 0 normalization: FULL }", [[0, 0, 0], [0, 0, 0]]),
    ("loss_param { normalization: NONE }", [[0, 7, 2], [1, 1, 3]]),        # 7: no such class
])
def test_the_softmax_loss_kernels_compute_the_hosts_loss(param, labels, dtype, monkeypatch,
                                                        kernel_device):
    host = softmax_loss(param, labels, dtype)
    launched, grid = launches(monkeypatch), grids(monkeypatch)
    context.set_mode_gpu()
    try:
        dev = softmax_loss(param, labels, dtype)
    finally:
        context.set_mode_cpu()
    assert dev[2] == host[2]
    if host[2] is not None:
        assert "label value 7 out of range [0, 5)" in host[2]
        return
    assert launched == ["softmax_loss_forward", "softmax_loss_total", "softmax_loss_backward"]
    assert grid["softmax_loss_total"] == (1,)       # one block makes the whole sum
    tol = 1e-6 if dtype == numpy.float32 else 1e-13
    numpy.testing.assert_allclose(dev[0], host[0], rtol=tol)
    numpy.testing.assert_allclose(dev[1], host[1], rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("text,shape", [
    ('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { '
     'num_output: 7 weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } } }',
     (5, 3, 2)),
    ('layer { name: "b" type: "Bias" bottom: "x" top: "y" bias_param { axis: 1 num_axes: 2 '
     'filler { type: "gaussian" } } }', (3, 4, 5, 6)),
    ('layer { name: "p" type: "Power" bottom: "x" top: "s" } '
     'layer { name: "s" type: "Scale" bottom: "s" top: "s" scale_param { bias_term: true '
     'filler { type: "gaussian" } bias_filler { type: "gaussian" } } }', (2, 5, 33, 31)),
    # one image: Caffe writes the scale's sums where it otherwise adds them
    ('layer { name: "s" type: "Scale" bottom: "x" top: "y" scale_param { '
     'filler { type: "gaussian" } } }', (1, 4, 3, 3)),
    # a scale from a second bottom: the sums of dy * x written into its diff (channel_sums)
    ('layer { name: "r" type: "Reduction" bottom: "x" top: "r" reduction_param { axis: 2 } } '
     'layer { name: "s" type: "Scale" bottom: "x" bottom: "r" top: "y" '
     'scale_param { axis: 0 } }', (3, 4, 5, 2)),
])
def test_per_channel_gradients_are_one_block_reduction_per_channel(text, shape, dtype,
                                                                   monkeypatch, kernel_device):
    """Bias gradients by channel_sums, Scale's whole backward by scale_backward: a block per
    channel (only 3 blocks here, so on a GPU the blocks also stride over the channels) summing
    a grid-stride share per thread; the parameters' diffs start at 0.5, so adding and writing
    differ."""
    monkeypatch.setattr(device, "MAX_BLOCKS", 3)
    grid = grids(monkeypatch)
    host, dev, launched = on_each_side(monkeypatch, text, shape, dtype, param_diffs=True)
    learned_scale = '"Scale"' in text and "Reduction" not in text
    name = "scale_backward" if learned_scale else "channel_sums"
    assert name in launched and grid[name] == (3,)
    assert_same(host, dev, dtype)


def test_kernels_turned_off_leave_the_array_code(monkeypatch, kernel_device):
    monkeypatch.setenv("CAFFECLI_DEVICE_KERNELS", "0")
    text = 'layer { name: "p" type: "Pooling" bottom: "x" top: "y" pooling_param { pool: MAX ' \
           'kernel_size: 2 stride: 2 } }'
    host, dev, launched = on_each_side(monkeypatch, text, (2, 3, 6, 6),
                                       numpy.float32)
    assert launched == []
    assert_same(host, dev, numpy.float32)
    assert not device.usable(numpy, numpy.zeros(2, numpy.float32))        # no device module


@needs_compiler
def test_the_standin_checks_each_argument_against_the_kernels_signature(standin):
    """What a GPU would misread silently, the stand-in refuses."""
    f32 = numpy.float32
    col = standin.zeros((1, 2, 2, 1, 2, 2), f32)
    x = standin.ones((1, 1, 3, 3), f32)
    geometry = device.ints(1, 1, 3, 3, 2, 2, 0, 0, 1, 1, 1, 1, 2, 2)
    fn = device.function(standin, "im2col", "im2col", f32)

    def launch(*args):
        fn((1,), (256,), args)
    launch(numpy.int32(col.size), x, *geometry, col)
    assert float(col.sum()) == col.size                                  # every window is 1
    with pytest.raises(TypeError, match="numpy int32 scalar"):
        launch(col.size, x, *geometry, col)                              # a Python int
    with pytest.raises(TypeError, match="array of float64"):
        launch(numpy.int32(col.size), x.astype(numpy.float64), *geometry, col)
    with pytest.raises(ValueError, match="not C-contiguous"):
        launch(numpy.int32(col.size), standin.ones((1, 1, 3, 6), f32)[..., ::2], *geometry, col)
    with pytest.raises(TypeError, match="host"):
        launch(numpy.int32(col.size), numpy.ones((1, 1, 3, 3), f32), *geometry, col)
    with pytest.raises(TypeError, match="takes 17 arguments"):
        launch(numpy.int32(col.size), x, *geometry)
    with pytest.raises(ValueError, match="grid and block"):
        fn((0,), (256,), (numpy.int32(col.size), x) + geometry + (col,))
    with pytest.raises(AttributeError, match="no kernel im2cols"):
        device.function(standin, "im2col", "im2cols", f32)


def test_built_kernels_go_to_a_writable_folder(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert standin_kernels._cache_folder() == str(tmp_path / "cache" / "caffecli" /
                                                  "standin-kernels")
    blocked = tmp_path / "file"
    blocked.write_text("")                     # a file where the cache folder would go
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    folder = standin_kernels._cache_folder()
    assert not folder.startswith(str(blocked)) and os.access(folder, os.W_OK)


@needs_compiler
def test_kernel_launches_are_recorded_by_a_graph_capture(standin):
    """A launch is one device operation: captured, it runs again at each replay."""
    f32 = numpy.float32
    x = standin.asarray(numpy.arange(24, dtype=f32).reshape(1, 1, 4, 6))
    top = standin.zeros((1, 1, 2, 3), f32)
    arg = standin.zeros((1, 1, 2, 3), numpy.int32)
    geometry = device.ints(4, 6, 2, 3, 2, 2, 2, 2, 0, 0)
    stream = standin.cuda.Stream()
    device.function(standin, "pooling", "max_pool_forward", f32)     # built before capturing
    with stream:
        stream.begin_capture()
        device.launch(standin, "pooling", "max_pool_forward", top.size, f32, x, *geometry,
                      top, arg, numpy.int32(0), top)
        graph = stream.end_capture()
    assert float(top.sum()) == 0                       # a capture computes nothing
    graph.launch()
    numpy.testing.assert_array_equal(top.get().ravel(), [7, 9, 11, 19, 21, 23])
    x *= 2
    graph.launch()
    numpy.testing.assert_array_equal(top.get().ravel(), [14, 18, 22, 38, 42, 46])


KERNELS = {"im2col": ["im2col", "col2im", "images_first_bias"],
           "lrn": ["lrn_forward", "lrn_backward"],
           "dropout": ["dropout_forward"], "argmax": ["argmax_top_k"],
           "softmax_loss": ["softmax_loss_forward", "softmax_loss_total",
                            "softmax_loss_backward"], "reduce": ["channel_sums", "scale_backward"],
           "batch_norm": ["batch_norm_global_forward", "batch_norm_running_stats",
                          "batch_norm_normalize"], "scale": ["scale_forward"],
           "relu": ["relu_forward", "relu_backward"],
           "solvers": ["%s_update" % kind for kind in
                       ("sgd", "nesterov", "adagrad", "rmsprop", "adadelta", "adam")],
           "pooling": ["max_pool_forward", "max_pool_backward", "ave_pool_forward",
                       "ave_pool_backward"]}


def assert_entries(family, ptx):
    for name in KERNELS[family]:
        assert ".entry %s(" % name in ptx


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc (the CUDA toolkit) is not "
                    "installed: the device kernels are compiled for a GPU where it is")
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("family", FAMILIES)
def test_nvcc_compiles_the_device_kernels(family, dtype, tmp_path):
    src = tmp_path / ("%s.cu" % family)
    src.write_text(device.source(family, dtype))
    done = subprocess.run(["nvcc", "--ptx", "-o", str(tmp_path / "k.ptx"),
                           str(src)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert_entries(family, (tmp_path / "k.ptx").read_text())


def nvrtc():
    """cuda-python's NVRTC bindings (the compiler cupy's RawModule uses), or None."""
    try:
        from cuda.bindings import nvrtc as module
        return module if module.nvrtcVersion()[0] == module.nvrtcResult.NVRTC_SUCCESS else None
    except Exception:   # not installed, or no NVRTC library to load
        return None


@pytest.mark.skipif(nvrtc() is None, reason="NVRTC (cuda-python's cuda.bindings.nvrtc) is not "
                    "installed: cupy compiles the kernels with it on a GPU machine")
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("family", FAMILIES)
def test_nvrtc_compiles_the_device_kernels_for_an_h100(family, dtype):
    """NVRTC, as cupy runs it (no headers, only its built-in functions), for sm_90."""
    rt = nvrtc()
    _, program = rt.nvrtcCreateProgram(device.source(family, dtype).encode(),
                                       b"%s.cu" % family.encode(), 0, [], [])
    options = [b"--gpu-architecture=compute_90"]
    result = rt.nvrtcCompileProgram(program, len(options), options)[0]
    size = rt.nvrtcGetProgramLogSize(program)[1]
    log = b" " * size
    rt.nvrtcGetProgramLog(program, log)
    assert result == rt.nvrtcResult.NVRTC_SUCCESS, log.decode(errors="replace")
    size = rt.nvrtcGetPTXSize(program)[1]
    ptx = b" " * size
    rt.nvrtcGetPTX(program, ptx)
    assert_entries(family, ptx.decode(errors="replace"))
