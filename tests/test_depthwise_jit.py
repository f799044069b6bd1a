"""Depthwise convolutions (one input channel a group) plane by plane (kernels/depthwise_jit.py):
the direct sums over the kernel's offsets for every geometry, Caffe's col2im bits for the input
gradient, the fused ReLU, and the choice of the path."""
import numpy
import pytest
from google.protobuf import text_format

from caffecli.blob import Blob
from caffecli.kernels import jit
from caffecli.layers import convolution
from caffecli.layers.convolution import ConvolutionLayer
from caffecli.proto import caffe_pb2
from test_conv_algorithms import assert_direct_sums, run

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")

GEOMETRIES = [   # (N, C, H, W), outputs a group, convolution_param
    ((2, 8, 13, 11), 1, "kernel_size: 3 pad: 1"),                     # MobileNet's
    ((3, 4, 12, 12), 1, "kernel_size: 3 pad: 1 stride: 2"),           # and its stride 2
    ((2, 5, 9, 14), 2, "kernel_size: 3 pad: 1"),                      # two outputs a group
    ((1, 3, 10, 9), 1, "kernel_size: 5 pad: 2"),                      # MnasNet's 5x5
    ((2, 6, 11, 13), 1, "kernel_h: 3 kernel_w: 5 pad_h: 3 pad_w: 0 stride_h: 3 stride_w: 2"),
    ((2, 4, 12, 10), 3, "kernel_size: 3 pad: 2 dilation: 2 stride: 2"),
    ((1, 7, 7, 7), 1, "kernel_size: 3 pad: 4"),                       # a pad past the kernel
    ((2, 3, 6, 5), 1, "kernel_size: 1 stride: 2"),                    # a strided 1x1
]


def make(shape, mult, spec, dtype, bias=True, engine="DEFAULT", bottoms=1):
    lp = caffe_pb2.LayerParameter(name="dw", type="Convolution")
    text_format.Merge(spec, lp.convolution_param)
    p = lp.convolution_param
    p.num_output, p.group, p.bias_term = shape[1] * mult, shape[1], bias
    p.engine = getattr(caffe_pb2.ConvolutionParameter, engine)
    layer = ConvolutionLayer(lp)
    bottom = [Blob(shape, dtype) for _ in range(bottoms)]
    top = [Blob((1,), dtype) for _ in range(bottoms)]
    layer.SetUp(bottom, top)
    return layer, bottom, top


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("shape,mult,spec", GEOMETRIES)
def test_depthwise_computes_the_direct_sums(shape, mult, spec, dtype):
    layer, bottom, top = make(shape, mult, spec, dtype, bias=mult != 2, bottoms=1 + (mult == 3))
    assert layer.depthwise
    grads = run(layer, bottom, top, 7)
    assert_direct_sums(layer, bottom, top, grads, 1e-10 if dtype == numpy.float64 else 2e-6)


@pytest.mark.parametrize("shape,mult,spec", [g for g in GEOMETRIES if g[1] == 1])
def test_depthwise_input_gradient_is_caffes_col2im_bit_for_bit(shape, mult, spec):
    """With one output a group each column value of W^T dy is one product, and col2im adds them
    tap after tap: the plane-by-plane input gradient (gathered at stride 1, added into phase
    planes otherwise) gives the same float32 bits as ``engine: CAFFE``'s im2col path."""
    ours = make(shape, mult, spec, numpy.float32)
    caffe = make(shape, mult, spec, numpy.float32, engine="CAFFE")
    assert ours[0].depthwise and not caffe[0].depthwise
    run(*ours, 3)
    run(*caffe, 3)
    assert numpy.array_equal(ours[1][0].diff, caffe[1][0].diff)
    numpy.testing.assert_allclose(ours[2][0].data, caffe[2][0].data, rtol=1e-5, atol=1e-5)


def test_depthwise_forward_takes_the_fused_relu():
    layer, bottom, top = make((2, 6, 9, 9), 1, "kernel_size: 3 pad: 1", numpy.float32)
    run(layer, bottom, top, 5)
    plain = top[0].data.copy()
    layer.relu_after = numpy.float32(0.1)
    try:
        layer.Forward(bottom, top)
    finally:
        layer.relu_after = None
    assert (plain < 0).any()
    numpy.testing.assert_array_equal(top[0].data, numpy.where(plain > 0, plain, plain * 0.1))


def test_depthwise_weight_gradient_alone_leaves_a_read_only_input():
    """A first layer's input (a data blob, here read-only) takes no gradient: the weight and
    bias gradients alone, the same as with the input gradient."""
    layer, bottom, top = make((2, 4, 10, 10), 1, "kernel_size: 3 pad: 1 stride: 2",
                              numpy.float32)
    run(layer, bottom, top, 9)
    want = [b.diff.copy() for b in layer.blobs]
    for b in layer.blobs:
        b.diff[...] = 0
    bottom[0].data.flags.writeable = False
    layer.Backward(top, [False], bottom)
    for b, w in zip(layer.blobs, want):
        numpy.testing.assert_array_equal(b.diff, w)


@pytest.mark.parametrize("spec,shape,taken", [
    ("num_output: 32 group: 32 kernel_size: 3 pad: 1", (1, 32, 112, 112), True),   # MobileNet
    ("num_output: 64 group: 32 kernel_size: 3 pad: 1", (1, 32, 14, 14), True),     # 2 a group
    ("num_output: 32 group: 32 kernel_size: 3 engine: CAFFE", (1, 32, 14, 14), False),
    ("num_output: 20 kernel_size: 5", (64, 1, 28, 28), False),       # LeNet's conv1: one group
    ("num_output: 32 group: 16 kernel_size: 3", (1, 32, 14, 14), False),   # two channels a group
    ("num_output: 32 group: 32 kernel_size: 1", (1, 32, 14, 14), False),   # 1x1: a product
])
def test_depthwise_path_is_chosen_for_one_channel_a_group(spec, shape, taken, monkeypatch):
    lp = caffe_pb2.LayerParameter(name="dw", type="Convolution")
    text_format.Merge(spec, lp.convolution_param)
    layer = ConvolutionLayer(lp)
    layer.SetUp([Blob(shape)], [Blob((1,))])
    assert layer.depthwise == taken
    assert not (layer.depthwise and (layer.by_image or layer.wide_by_image or layer.winograd))
    monkeypatch.setattr(convolution, "DEPTHWISE_MIN_GROUPS", 1 << 40)
    layer.Reshape([Blob(shape)], [Blob((1,))])
    assert not layer.depthwise
