"""One gradient-check case per layer with a backward, shared by the float32 CPU sweep
(test_gradient_float32.py) and the device sweep (test_gpu.py).

Each case is (id, layer text, bottoms(rs) -> list of arrays, check_gradient keywords). Inputs
of layers with kinks or max decisions are distinct values 0.05 apart, so no decision flips
within Caffe's 1e-2 step.
"""
import numpy


def spaced(*shape, offset=0.0):
    """Distinct values 0.05 apart around 0 (plus ``offset``), in a random order."""
    def make(rs):
        n = int(numpy.prod(shape))
        return (rs.permutation(n) - n / 2.0).reshape(shape) * 0.05 + offset
    return make


def normal(*shape, scale=1.0):
    return lambda rs: rs.randn(*shape) * scale


def positive(*shape):
    return lambda rs: rs.uniform(0.5, 1.5, size=shape)


def probs(n, k):
    return lambda rs: rs.dirichlet(numpy.ones(k), size=n) * 0.8 + 0.2 / k


def labels(n, k, shape=None):
    return lambda rs: rs.randint(0, k, size=shape or (n,)).astype(float)


def binary(*shape):
    return lambda rs: rs.randint(0, 2, size=shape).astype(float)


def fixed(array):
    return lambda rs: numpy.asarray(array, dtype=float)


FILL = 'weight_filler { type: "gaussian" std: 0.3 } bias_filler { type: "gaussian" std: 0.3 }'
KINK = {"kink": 0.0, "kink_range": 0.01}

CASES = [
    # vision
    ("Convolution", 'type: "Convolution" convolution_param { num_output: 3 kernel_size: 3 pad: 1 '
     'stride: 2 %s }' % FILL, [spaced(2, 2, 5, 5)], {}),
    ("Convolution_group_dilation", 'type: "Convolution" convolution_param { num_output: 4 '
     'kernel_size: 2 dilation: 2 group: 2 %s }' % FILL, [normal(2, 2, 5, 5)], {}),
    ("Deconvolution", 'type: "Deconvolution" convolution_param { num_output: 2 kernel_size: 3 '
     'stride: 2 %s }' % FILL, [normal(2, 3, 3, 3)], {}),
    ("Im2col", 'type: "Im2col" convolution_param { kernel_size: 2 stride: 1 }',
     [normal(2, 2, 3, 3)], {}),
    ("Pooling_MAX", 'type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }',
     [spaced(2, 2, 5, 5)], {}),
    ("Pooling_AVE", 'type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }',
     [normal(2, 2, 5, 5)], {}),
    ("SPP", 'type: "SPP" spp_param { pyramid_height: 2 }', [spaced(2, 2, 4, 4)], {}),
    ("LRN", 'type: "LRN" lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 }',
     [normal(2, 5, 3, 3)], {}),
    ("LRN_within", 'type: "LRN" lrn_param { local_size: 3 alpha: 0.5 norm_region: '
     'WITHIN_CHANNEL }', [normal(2, 2, 4, 4)], {}),
    ("Crop", 'type: "Crop" crop_param { axis: 2 offset: 1 }', [normal(2, 2, 4, 4),
                                                                normal(2, 2, 2, 3)],
     {"check_bottoms": [0]}),
    # neurons
    ("ReLU", 'type: "ReLU" relu_param { negative_slope: 0.1 }', [spaced(2, 3, 4)], KINK),
    ("PReLU", 'type: "PReLU"', [spaced(2, 3, 4)], KINK),
    ("ELU", 'type: "ELU" elu_param { alpha: 0.5 }', [spaced(2, 3, 4)], KINK),
    ("Sigmoid", 'type: "Sigmoid"', [normal(2, 3, 4)], {}),
    ("TanH", 'type: "TanH"', [normal(2, 3, 4)], {}),
    ("AbsVal", 'type: "AbsVal"', [spaced(2, 3, 4)], KINK),
    ("BNLL", 'type: "BNLL"', [normal(2, 3, 4)], {}),
    ("Power", 'type: "Power" power_param { power: 2 scale: 0.5 shift: 1 }', [normal(2, 3)], {}),
    ("Exp", 'type: "Exp" exp_param { base: 2 scale: 0.5 }', [normal(2, 3)], {}),
    ("Log", 'type: "Log" log_param { scale: 0.5 shift: 1 }', [positive(2, 3)], {}),
    ("Swish", 'type: "Swish" swish_param { beta: 1.5 }', [normal(2, 3, 4)], {}),
    ("Clip", 'type: "Clip" clip_param { min: -0.52 max: 0.52 }', [spaced(2, 3, 4)], {}),
    ("BatchNorm", 'type: "BatchNorm"', [normal(4, 3, 2, 2)], {"check_params": False}),
    ("Scale", 'type: "Scale" scale_param { bias_term: true }', [normal(2, 3, 4)], {}),
    ("Scale_two_bottoms", 'type: "Scale" scale_param { axis: 0 }', [normal(2, 3, 4),
                                                                     normal(2, 3)], {}),
    ("Bias", 'type: "Bias"', [normal(2, 3, 4)], {}),
    ("MVN", 'type: "MVN" mvn_param { normalize_variance: true }', [normal(2, 3, 4, 2)], {}),
    ("Embed", 'type: "Embed" embed_param { num_output: 3 input_dim: 5 %s }' % FILL,
     [labels(4, 5)], {"check_bottoms": []}),
    # structure
    ("InnerProduct", 'type: "InnerProduct" inner_product_param { num_output: 4 %s }' % FILL,
     [normal(3, 2, 3)], {}),
    ("InnerProduct_transpose", 'type: "InnerProduct" inner_product_param { num_output: 4 '
     'transpose: true %s }' % FILL, [normal(3, 5)], {}),
    ("Concat", 'type: "Concat" concat_param { axis: 1 }', [normal(2, 3), normal(2, 2)], {}),
    ("Slice", 'type: "Slice" slice_param { axis: 1 slice_point: 1 }', [normal(2, 3, 2)],
     {"n_tops": 2}),
    ("Eltwise_PROD", 'type: "Eltwise" eltwise_param { operation: PROD }',
     [normal(2, 3), normal(2, 3)], {}),
    ("Eltwise_SUM", 'type: "Eltwise" eltwise_param { operation: SUM coeff: 0.5 coeff: -2 }',
     [normal(2, 3), normal(2, 3)], {}),
    ("Eltwise_MAX", 'type: "Eltwise" eltwise_param { operation: MAX }',
     [spaced(2, 3), spaced(2, 3, offset=0.025)], {}),
    ("Tile", 'type: "Tile" tile_param { axis: 1 tiles: 3 }', [normal(2, 2, 2)], {}),
    ("Reduction_SUMSQ", 'type: "Reduction" reduction_param { operation: SUMSQ axis: 1 }',
     [normal(2, 3, 2)], {}),
    ("Reduction_ASUM", 'type: "Reduction" reduction_param { operation: ASUM coeff: 2 }',
     [spaced(2, 3)], KINK),
    ("Reduction_MEAN", 'type: "Reduction" reduction_param { operation: MEAN axis: 1 }',
     [normal(2, 3, 2)], {}),
    ("Softmax", 'type: "Softmax" softmax_param { axis: 1 }', [normal(2, 5, 3)], {}),
    ("BatchReindex", 'type: "BatchReindex"', [normal(3, 2), fixed([2, 0, 2, 1])],
     {"check_bottoms": [0]}),
    ("Filter", 'type: "Filter"', [normal(4, 3), fixed([1, 0, 1, 1])], {"check_bottoms": [0]}),
    # losses
    ("SoftmaxWithLoss", 'type: "SoftmaxWithLoss" loss_weight: 1', [normal(4, 5), labels(4, 5)],
     {"check_bottoms": [0]}),
    ("SoftmaxWithLoss_ignore", 'type: "SoftmaxWithLoss" loss_weight: 1 loss_param { '
     'ignore_label: 1 normalization: VALID }', [normal(2, 3, 2, 2), labels(2, 3, (2, 1, 2, 2))],
     {"check_bottoms": [0]}),
    ("EuclideanLoss", 'type: "EuclideanLoss"', [normal(3, 4), normal(3, 4)], {}),
    ("SigmoidCrossEntropyLoss", 'type: "SigmoidCrossEntropyLoss"', [normal(3, 4),
                                                                     binary(3, 4)],
     {"check_bottoms": [0]}),
    ("HingeLoss_L1", 'type: "HingeLoss"', [spaced(4, 5), labels(4, 5)],
     {"check_bottoms": [0], "kink": 1.0, "kink_range": 0.01}),
    ("HingeLoss_L2", 'type: "HingeLoss" hinge_loss_param { norm: L2 }',
     [spaced(4, 5), labels(4, 5)], {"check_bottoms": [0]}),
    ("MultinomialLogisticLoss", 'type: "MultinomialLogisticLoss"', [probs(4, 5), labels(4, 5)],
     {"check_bottoms": [0], "stepsize": 1e-3}),
    ("InfogainLoss", 'type: "InfogainLoss"', [normal(4, 3), labels(4, 3), positive(3, 3)],
     {"check_bottoms": [0]}),
    ("ContrastiveLoss", 'type: "ContrastiveLoss" contrastive_loss_param { margin: 1.5 }',
     [normal(4, 3, scale=0.5), normal(4, 3, scale=0.5), binary(4)], {"check_bottoms": [0, 1]}),
    # recurrent
    ("LSTMUnit", 'type: "LSTMUnit"', [normal(1, 2, 3), normal(1, 2, 12), binary(1, 2)],
     {"check_bottoms": [0, 1], "n_tops": 2}),
]
