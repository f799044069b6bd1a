"""Softmax, the loss layers and Accuracy: hand-computed values, gradients, Caffe's quirks, errors."""
import math

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
    """Set up and run one forward pass; returns (layer, bottoms, tops, weighted loss)."""
    layer = make_layer(text)
    bottom = blobs_from(bottoms, dtype)
    top = [Blob(dtype=dtype) for _ in range(n_tops)]
    layer.SetUp(bottom, top)
    loss = layer.Forward(bottom, top)
    return layer, bottom, top, loss


def grad(layer, bottom, top, weight=1.0, propagate_down=None):
    top[0].diff[...] = weight
    layer.Backward(top, propagate_down or [True] + [False] * (len(bottom) - 1), bottom)
    return bottom[0].diff.copy()


def expect_error(text, bottoms, n_tops=1, match=None, backward_down=None):
    """The layer raises CaffeError naming itself, in set-up/forward (or backward)."""
    layer = make_layer(text)
    bottom = blobs_from(bottoms, F32)
    top = [Blob() for _ in range(n_tops)]
    with pytest.raises(CaffeError, match=match) as err:
        layer.SetUp(bottom, top)
        layer.Forward(bottom, top)
        if backward_down is not None:
            layer.Backward(top, backward_down, bottom)
    assert "under_test" in str(err.value)


def rnd(*shape, seed=0, lo=-1.0, hi=1.0):
    return numpy.random.RandomState(seed).uniform(lo, hi, size=shape)


def labels(shape, classes, seed=0):
    return numpy.random.RandomState(seed).randint(0, classes, size=shape).astype(F64)


def np_softmax(x, axis):
    e = numpy.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# ---- Softmax -----------------------------------------------------------------------------
@pytest.mark.parametrize("axis,shape", [(1, (2, 5)), (0, (3, 4)), (1, (2, 3, 2, 2)),
                                        (2, (2, 3, 4)), (-1, (2, 3, 4))])
def test_softmax_values_and_gradient(axis, shape):
    x = rnd(*shape, seed=3) * 3
    text = 'type: "Softmax" softmax_param { axis: %d }' % axis
    _, _, top, _ = run(text, [x])
    numpy.testing.assert_allclose(top[0].data, np_softmax(x, axis), rtol=1e-12)
    assert check_gradient(text, [x]) == x.size


def test_softmax_hand_values_large_inputs_and_float32():
    _, _, top, _ = run('type: "Softmax"', [[[0.0, math.log(2.0)], [1000.0, 1000.0]]], dtype=F32)
    assert top[0].data.dtype == F32
    numpy.testing.assert_allclose(top[0].data, [[1 / 3, 2 / 3], [0.5, 0.5]], rtol=1e-6)
    assert check_gradient('type: "Softmax"', [rnd(3, 4)], dtype=F32, threshold=1e-2) > 0


def test_softmax_axis_out_of_range():
    expect_error('type: "Softmax" softmax_param { axis: 2 }', [rnd(2, 3)], match="axis")


# ---- SoftmaxWithLoss ---------------------------------------------------------------------
SML = 'type: "SoftmaxWithLoss" %s'


def test_softmax_loss_uniform_is_log_classes():
    _, _, top, loss = run(SML % "", [numpy.zeros((2, 4)), [0, 3]])
    assert top[0].shape == ()
    assert float(top[0].data) == pytest.approx(math.log(4))
    assert loss == pytest.approx(math.log(4))  # default loss weight 1


@pytest.mark.parametrize("param,norm", [
    ("", 3), ("loss_param { normalization: VALID }", 3), ("loss_param { normalization: FULL }", 4),
    ("loss_param { normalization: BATCH_SIZE }", 2), ("loss_param { normalization: NONE }", 1),
    ("loss_param { normalize: true }", 3), ("loss_param { normalize: false }", 2),
    ("loss_param { normalize: false normalization: FULL }", 4)])
def test_softmax_loss_normalization(param, norm):
    # 2 x 3 x 2 predictions, labels per (n, h); one position ignored (label 7)
    x = rnd(2, 3, 2, seed=5) * 2
    y = numpy.array([[0, 2], [7, 1]], dtype=F64)
    text = SML % ("loss_param { ignore_label: 7 } " + param).replace("} loss_param {", "")
    layer, bottom, top, _ = run(text, [x, y])
    p = np_softmax(x, 1)
    nll = -(math.log(p[0, 0, 0]) + math.log(p[0, 2, 1]) + math.log(p[1, 1, 1]))
    assert float(top[0].data) == pytest.approx(nll / norm, rel=1e-10)
    d = grad(layer, bottom, top, weight=2.0)
    want = p.copy()
    for n, c, h in ((0, 0, 0), (0, 2, 1), (1, 1, 1)):
        want[n, c, h] -= 1
    want[1, :, 0] = 0  # the ignored position gets no gradient
    numpy.testing.assert_allclose(d, want * 2.0 / norm, rtol=1e-10, atol=1e-14)


def test_softmax_loss_all_ignored_normalizer_is_one():
    _, _, top, _ = run(SML % "loss_param { ignore_label: 1 }", [rnd(2, 3), [1, 1]])
    assert float(top[0].data) == 0.0


def test_softmax_loss_floor_at_flt_min():
    _, _, top, _ = run(SML % "", [[[0.0, -200.0]], [1]], dtype=F32)
    assert float(top[0].data) == pytest.approx(-math.log(numpy.finfo(F32).tiny), rel=1e-5)


@pytest.mark.parametrize("param,shape,lab_shape", [
    ("", (3, 4), (3,)), ("loss_param { ignore_label: 0 normalization: FULL }", (2, 3, 2, 2),
                         (2, 1, 2, 2)),
    ("softmax_param { axis: 2 } loss_param { normalization: BATCH_SIZE }", (2, 2, 3), (2, 2)),
    ("loss_param { normalization: NONE }", (2, 4, 3), (2, 3))])
def test_softmax_loss_gradient(param, shape, lab_shape):
    axis = 2 if "axis: 2" in param else 1
    y = labels(lab_shape, shape[axis], seed=2)
    assert check_gradient(SML % param, [rnd(*shape, seed=1) * 2, y], check_bottoms=[0]) > 0
    assert check_gradient(SML % param, [rnd(*shape, seed=1) * 2, y], check_bottoms=[0],
                          dtype=F32, threshold=2e-2) > 0


def test_softmax_loss_float32_stays_float32():
    layer, bottom, top, _ = run(SML % "", [rnd(3, 4), [0, 1, 2]], dtype=F32)
    assert top[0].data.dtype == F32 and layer.prob.dtype == F32
    assert grad(layer, bottom, top).dtype == F32


def test_softmax_loss_errors():
    expect_error(SML % "", [rnd(2, 3), [[0, 1], [1, 0]]], match="(?i)number of labels")
    expect_error(SML % "", [rnd(2, 3), [0, 1, 2]], match="first dimension")
    expect_error(SML % "", [rnd(2, 3), [0, 3]], match="out of range")
    expect_error(SML % "", [rnd(2, 3), [0, -1]], match="out of range")
    expect_error(SML % "", [rnd(2, 3), [0, 1]], match="label inputs", backward_down=[True, True])
    expect_error(SML % "", [rnd(2, 3), [0, 1]], n_tops=2, match="top")
    expect_error(SML % "loss_weight: 1 loss_weight: 0", [rnd(2, 3), [0, 1]], n_tops=2)
    expect_error(SML % "softmax_param { axis: 3 }", [rnd(2, 3), [0, 1]], match="axis")


def test_softmax_loss_two_tops_fail_in_a_net():
    text = """
    layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
    layer { name: "y" type: "Input" top: "y" input_param { shape { dim: 2 } } }
    layer { name: "loss" type: "SoftmaxWithLoss" bottom: "x" bottom: "y" top: "loss" top: "prob" }
    """
    with pytest.raises(CaffeError):
        Net(parse_text(text, caffe_pb2.NetParameter()), TRAIN, log=False)


# ---- EuclideanLoss -----------------------------------------------------------------------
def test_euclidean_values_and_gradients():
    a = numpy.array([[1.0, 2.0], [3.0, 4.0]])
    b = numpy.array([[0.0, 0.0], [3.0, 6.0]])
    layer, bottom, top, _ = run('type: "EuclideanLoss"', [a, b])
    assert float(top[0].data) == pytest.approx((1 + 4 + 0 + 4) / 2 / 2)
    top[0].diff[...] = 3.0
    layer.Backward(top, [True, True], bottom)
    numpy.testing.assert_allclose(bottom[0].diff, (a - b) * 3 / 2)
    numpy.testing.assert_allclose(bottom[1].diff, -(a - b) * 3 / 2)
    assert layer.allow_force_backward(1)


def test_euclidean_gradient_both_bottoms_and_same_count_shapes():
    assert check_gradient('type: "EuclideanLoss"', [rnd(3, 4, 2), rnd(3, 4, 2, seed=1)]) == 48
    assert check_gradient('type: "EuclideanLoss"', [rnd(2, 6), rnd(2, 3, 2, seed=1)]) == 24
    assert check_gradient('type: "EuclideanLoss"', [rnd(3, 4), rnd(3, 4, seed=1)],
                          dtype=F32, threshold=1e-2) == 24


def test_euclidean_errors():
    expect_error('type: "EuclideanLoss"', [rnd(2, 3), rnd(2, 4)], match="same dimension")
    expect_error('type: "EuclideanLoss"', [rnd(2, 3), rnd(3, 2)], match="first dimension")
    # 0-axis bottoms (a Reduction to one value): Caffe's LossLayer::Reshape CHECK-fails
    expect_error('type: "EuclideanLoss"', [numpy.array(1.0), numpy.array(2.0)],
                 match="first .batch. axis")
    expect_error('type: "HingeLoss"', [rnd(2, 3), numpy.array(1.0)], match="first .batch. axis")


# ---- SigmoidCrossEntropyLoss -------------------------------------------------------------
SCE = 'type: "SigmoidCrossEntropyLoss" %s'


def np_sce(x, t):
    s = 1 / (1 + numpy.exp(-x))
    return -(t * numpy.log(s) + (1 - t) * numpy.log(1 - s))


@pytest.mark.parametrize("param,norm", [("", 2), ("loss_param { normalization: VALID }", 5),
                                        ("loss_param { normalization: FULL }", 6),
                                        ("loss_param { normalize: true }", 5),
                                        ("loss_param { normalization: NONE }", 1)])
def test_sigmoid_ce_values_default_batch_size(param, norm):
    x = rnd(2, 3, seed=4) * 3
    t = numpy.array([[1, 0, 1], [0, -1, 1]], dtype=F64)  # -1 is ignored
    text = SCE % ("loss_param { ignore_label: -1 } " + param).replace("} loss_param {", "")
    layer, bottom, top, _ = run(text, [x, t])
    keep = t != -1
    assert float(top[0].data) == pytest.approx(np_sce(x, t)[keep].sum() / norm, rel=1e-10)
    d = grad(layer, bottom, top)
    want = numpy.where(keep, 1 / (1 + numpy.exp(-x)) - t, 0) / norm
    numpy.testing.assert_allclose(d, want, rtol=1e-10, atol=1e-15)


def test_sigmoid_ce_large_logits_stay_finite():
    _, _, top, _ = run(SCE % "", [[[100.0, -100.0]], [[0.0, 1.0]]], dtype=F32)
    assert float(top[0].data) == pytest.approx(200.0, rel=1e-5)


def test_sigmoid_ce_gradient():
    t = numpy.random.RandomState(3).uniform(0, 1, size=(3, 4))
    assert check_gradient(SCE % "", [rnd(3, 4) * 3, t], check_bottoms=[0]) == 12
    assert check_gradient(SCE % "loss_param { normalization: VALID ignore_label: 1 }",
                          [rnd(2, 5) * 3, labels((2, 5), 2)], check_bottoms=[0]) == 10


def test_sigmoid_ce_errors():
    expect_error(SCE % "", [rnd(2, 3), rnd(2, 4)], match="same count")
    expect_error(SCE % "", [rnd(2, 3), rnd(2, 3)], match="label inputs",
                 backward_down=[True, True])


# ---- MultinomialLogisticLoss -------------------------------------------------------------
MLL = 'type: "MultinomialLogisticLoss"'


def test_multinomial_values_threshold_and_gradient_values():
    p = numpy.array([[0.25, 0.75], [0.0, 1.0]])
    layer, bottom, top, _ = run(MLL, [p, [0, 0]])
    assert float(top[0].data) == pytest.approx((-math.log(0.25) - math.log(1e-20)) / 2)
    d = grad(layer, bottom, top, weight=2.0)
    numpy.testing.assert_allclose(d, [[-1 / 0.25, 0], [-1 / 1e-20, 0]])


def test_multinomial_gradient():
    p = numpy.random.RandomState(0).uniform(0.2, 1.0, size=(4, 5))
    assert check_gradient(MLL, [p, labels((4,), 5)], check_bottoms=[0], stepsize=1e-3) > 0
    p4 = numpy.random.RandomState(1).uniform(0.2, 1.0, size=(2, 3, 2, 1))
    assert check_gradient(MLL, [p4, labels((2, 1, 1, 1), 6)], check_bottoms=[0],
                          stepsize=1e-3) > 0


def test_multinomial_errors():
    expect_error(MLL, [rnd(2, 3), rnd(2, 3)], match="label")
    expect_error(MLL, [rnd(2, 3), [0, 3]], match="out of range")
    expect_error(MLL, [rnd(2, 3) + 2, [0, 1]], match="label inputs", backward_down=[True, True])


# ---- InfogainLoss ------------------------------------------------------------------------
INFO = 'type: "InfogainLoss" %s'


def test_infogain_identity_matches_softmax_loss():
    x, y = rnd(4, 3, seed=2) * 2, labels((4,), 3)
    _, _, t1, _ = run(INFO % "", [x, y, numpy.eye(3)])
    _, _, t2, _ = run(SML % "", [x, y])
    assert float(t1[0].data) == pytest.approx(float(t2[0].data), rel=1e-12)


def test_infogain_values_ignore_and_gradient_values():
    x = rnd(3, 3, seed=7) * 2
    y = numpy.array([0.0, 2.0, 1.0])
    h = numpy.random.RandomState(1).uniform(0, 1, size=(3, 3))
    layer, bottom, top, _ = run(INFO % "loss_param { ignore_label: 1 }", [x, y, h])
    p = np_softmax(x, 1)
    want = -sum((h[int(y[i])] * numpy.log(p[i])).sum() for i in (0, 1)) / 2
    assert float(top[0].data) == pytest.approx(want, rel=1e-10)
    d = grad(layer, bottom, top)
    for i in (0, 1):
        row = h[int(y[i])]
        numpy.testing.assert_allclose(d[i], (p[i] * row.sum() - row) / 2, rtol=1e-10)
    numpy.testing.assert_array_equal(d[2], 0)


@pytest.mark.parametrize("param,shape,lab", [
    ("", (4, 3), (4,)), ("loss_param { normalization: FULL }", (2, 3, 2), (2, 2)),
    ("infogain_loss_param { axis: 2 } loss_param { normalization: NONE }", (2, 2, 4), (2, 2))])
def test_infogain_gradient(param, shape, lab):
    k = shape[2] if "axis: 2" in param else shape[1]
    h = numpy.random.RandomState(3).uniform(0, 1, size=(1, 1, k, k))
    bottoms = [rnd(*shape) * 2, labels(lab, k, seed=4), h]
    assert check_gradient(INFO % param, bottoms, check_bottoms=[0]) == numpy.prod(shape)


def test_infogain_matrix_from_source(tmp_path):
    h = numpy.random.RandomState(1).uniform(0, 1, size=(1, 1, 3, 3)).astype(F32)
    blob = Blob(h.shape)
    blob.data[...] = h
    path = tmp_path / "H.binaryproto"
    path.write_bytes(blob.to_proto().SerializeToString())
    x, y = rnd(4, 3), labels((4,), 3)
    _, _, t1, _ = run(INFO % 'infogain_loss_param { source: "%s" }' % path, [x, y], dtype=F32)
    _, _, t2, _ = run(INFO % "", [x, y, h], dtype=F32)
    assert float(t1[0].data) == pytest.approx(float(t2[0].data), rel=1e-6)
    text = INFO % 'infogain_loss_param { source: "%s" }' % path
    assert check_gradient(text, [x, y], check_bottoms=[0]) == 12


def test_infogain_second_top_needs_two_weights():
    x, y = rnd(2, 3), labels((2,), 3)
    _, _, top, _ = run(INFO % "loss_weight: 1 loss_weight: 0", [x, y, numpy.eye(3)], n_tops=2)
    numpy.testing.assert_allclose(top[1].data, np_softmax(x, 1), rtol=1e-12)
    expect_error(INFO % "", [x, y, numpy.eye(3)], n_tops=2, match="loss_weight")


def test_infogain_errors(tmp_path):
    x, y = rnd(2, 3), [0.0, 1.0]
    expect_error(INFO % "", [x, y], match="source")
    expect_error(INFO % "loss_param { normalize: true }", [x, y, numpy.eye(3)],
                 match="deprecated")
    expect_error(INFO % "", [x, y, numpy.eye(2)], match="3x3")
    expect_error(INFO % 'infogain_loss_param { source: "%s" }' % (tmp_path / "none"), [x, y])
    expect_error(INFO % "", [x, y, numpy.eye(3)], match="infogain inputs",
                 backward_down=[True, False, True])
    expect_error(INFO % "", [x, [0.0, 5.0], numpy.eye(3)], match="out of range")


# ---- HingeLoss ---------------------------------------------------------------------------
def test_hinge_l1_l2_values_and_bottom_diff_quirk():
    x = numpy.array([[0.5, -2.0, 0.2], [3.0, 0.4, -0.3]])
    y = [0.0, 1.0]
    # margins max(0, 1 - s x): s = +1 at the label
    m = numpy.array([[0.5, 0.0, 1.2], [4.0, 0.6, 0.7]])
    layer, bottom, top, _ = run('type: "HingeLoss"', [x, y])
    assert float(top[0].data) == pytest.approx(m.sum() / 2)
    numpy.testing.assert_allclose(bottom[0].diff, m)  # Caffe leaves the margins there
    d = grad(layer, bottom, top, weight=2.0)
    sign = numpy.array([[-1, 0, 1], [1, -1, 1]])
    numpy.testing.assert_allclose(d, sign * 2.0 / 2)
    layer, bottom, top, _ = run('type: "HingeLoss" hinge_loss_param { norm: L2 }', [x, y])
    assert float(top[0].data) == pytest.approx((m * m).sum() / 2)
    d = grad(layer, bottom, top)
    flip = numpy.array([[-1, 1, 1], [1, -1, 1]])
    numpy.testing.assert_allclose(d, m * flip * 2 / 2)


@pytest.mark.parametrize("norm", ["L1", "L2"])
def test_hinge_gradient(norm):
    text = 'type: "HingeLoss" hinge_loss_param { norm: %s }' % norm
    x = rnd(4, 5, seed=6) * 2
    # keep inputs away from the hinge points x = +-1
    x = numpy.where(numpy.abs(numpy.abs(x) - 1) < 0.05, x * 1.2, x)
    assert check_gradient(text, [x, labels((4,), 5)], check_bottoms=[0]) == 20


def test_hinge_errors():
    expect_error('type: "HingeLoss"', [rnd(2, 3), [0.0, 3.0]], match="out of range")
    expect_error('type: "HingeLoss"', [rnd(2, 3), [0.0, 1.0]], match="label inputs",
                 backward_down=[True, True])


# ---- ContrastiveLoss ---------------------------------------------------------------------
CON = 'type: "ContrastiveLoss" contrastive_loss_param { margin: %g %s }'


def test_contrastive_values():
    a = numpy.array([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]])
    b = numpy.array([[0.3, 0.4], [0.3, 0.4], [3.0, 4.0]])  # distances 0.5, 0.5, 5
    sim = [1.0, 0.0, 0.0]
    _, _, top, _ = run(CON % (2.0, ""), [a, b, sim])
    assert float(top[0].data) == pytest.approx((0.25 + 1.5 ** 2 + 0) / 3 / 2)
    _, _, top, _ = run(CON % (2.0, "legacy_version: true"), [a, b, sim])
    assert float(top[0].data) == pytest.approx((0.25 + 1.75 + 0) / 3 / 2)


@pytest.mark.parametrize("legacy", ["", "legacy_version: true"])
def test_contrastive_gradient_both_features(legacy):
    r = numpy.random.RandomState(0)
    a, b = r.uniform(-1, 1, (6, 3)), r.uniform(-1, 1, (6, 3))
    sim = numpy.array([1, 0, 0, 1, 0, 0], dtype=F64)
    n = check_gradient(CON % (1.5, legacy), [a, b, sim], check_bottoms=[0, 1])
    assert n == 36
    layer = make_layer(CON % (1.5, legacy))
    assert layer.allow_force_backward(1) and not layer.allow_force_backward(2)


def test_contrastive_errors():
    expect_error(CON % (1, ""), [rnd(2, 3), rnd(2, 4), [1.0, 0.0]], match="features")
    expect_error(CON % (1, ""), [rnd(2, 3, 2), rnd(2, 3, 2), [1.0, 0.0]], match="features")


# ---- Accuracy ----------------------------------------------------------------------------
ACC = 'type: "Accuracy" %s'


def test_accuracy_top1_and_ties_count_against():
    x = numpy.array([[0.1, 0.9, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.7, 0.2, 0.1]])
    # row 1 is a tie between classes 0 and 1: neither label is top-1 correct
    _, _, top, _ = run(ACC % "", [x, [1.0, 0.0, 2.0, 1.0]])
    assert float(top[0].data) == pytest.approx(2 / 4)
    _, _, top, _ = run(ACC % "", [x, [1.0, 1.0, 2.0, 0.0]])
    assert float(top[0].data) == pytest.approx(3 / 4)
    _, _, top, _ = run(ACC % "accuracy_param { top_k: 2 }", [x, [0.0, 0.0, 1.0, 2.0]])
    assert float(top[0].data) == pytest.approx(3 / 4)


def test_accuracy_per_class_ignore_and_spatial():
    x = numpy.array([[0.9, 0.1, 0.0], [0.2, 0.8, 0.0], [0.6, 0.4, 0.0], [0.1, 0.0, 0.9]])
    y = [0.0, 0.0, 1.0, 2.0]
    _, _, top, _ = run(ACC % "accuracy_param { ignore_label: 2 }", [x, y], n_tops=2)
    assert float(top[0].data) == pytest.approx(1 / 3)
    assert top[1].shape == (3,)
    numpy.testing.assert_allclose(top[1].data, [0.5, 0.0, 0.0])  # class 2: no samples -> 0
    xs = numpy.moveaxis(x.reshape(2, 2, 3), 2, 1)  # (N=2, C=3, W=2)
    _, _, top, _ = run(ACC % "", [xs, numpy.reshape(y, (2, 2))])
    assert float(top[0].data) == pytest.approx(2 / 4)
    _, _, top, _ = run(ACC % "accuracy_param { axis: 1 ignore_label: 0 }",
                       [x[:2], [0.0, 0.0]])
    assert float(top[0].data) == 0.0  # nothing counted


def test_accuracy_float32_and_errors():
    _, _, top, _ = run(ACC % "", [rnd(4, 3), [0.0, 1.0, 2.0, 0.0]], dtype=F32)
    assert top[0].data.dtype == F32
    expect_error(ACC % "accuracy_param { top_k: 4 }", [rnd(2, 3), [0.0, 1.0]], match="top_k")
    expect_error(ACC % "", [rnd(2, 3), [0.0, 1.0, 2.0]], match="(?i)number of labels")
    expect_error(ACC % "", [rnd(2, 3), [0.0, 3.0]], match="out of range")
    expect_error(ACC % "", [rnd(2, 3), [0.0, 1.0]], match="backward",
                 backward_down=[True, False])


def test_a_zero_loss_is_positive_zero_as_caffe_logs_it():
    """Caffe subtracts each term from a loss that starts at 0, so a perfect prediction gives
    +0 ('loss = 0' in the log), not -0."""
    net = Net(parse_text('''
layer { name: "in" type: "Input" top: "x" top: "lab" top: "p" top: "H" top: "s" top: "t"
  input_param { shape { dim: 1 dim: 2 } shape { dim: 1 } shape { dim: 1 dim: 2 }
                shape { dim: 1 dim: 1 dim: 2 dim: 2 } shape { dim: 1 dim: 2 }
                shape { dim: 1 dim: 2 } } }
layer { name: "sm" type: "SoftmaxWithLoss" bottom: "x" bottom: "lab" top: "l1" }
layer { name: "mn" type: "MultinomialLogisticLoss" bottom: "p" bottom: "lab" top: "l2" }
layer { name: "ig" type: "InfogainLoss" bottom: "x" bottom: "lab" bottom: "H" top: "l3" }
layer { name: "sc" type: "SigmoidCrossEntropyLoss" bottom: "s" bottom: "t" top: "l4" }
''', caffe_pb2.NetParameter()), TRAIN, log=False)
    for name, value in (("x", [[0, -200]]), ("lab", [0]), ("p", [[1, 0]]),
                        ("H", numpy.eye(2).reshape(1, 1, 2, 2)), ("s", [[100, -100]]),
                        ("t", [[1, 0]])):
        net.blob_by_name(name).data[...] = value
    assert net.forward_pass() == 0
    for top in ("l1", "l2", "l3", "l4"):
        value = float(net.blob_by_name(top).data)
        assert value == 0 and math.copysign(1, value) == 1, top


def test_contrastive_loss_is_caffes_loop_on_the_host():
    """ContrastiveLoss's forward on the host: each pair's squared distance by caffe_cpu_dot
    (OpenBLAS's sdot order), the pairs' terms added one after another, then / num / 2 (a
    batch past numpy's pairwise blocks and a feature past sdot's 32-value kernel)."""
    from caffecli.kernels import caffe_gemv
    F = numpy.float32
    rng = numpy.random.default_rng(0)
    num, ch = 37, 45
    a = rng.standard_normal((num, ch, 1, 1)).astype(F)
    b = rng.standard_normal((num, ch, 1, 1)).astype(F)
    y = (rng.random((num, 1, 1, 1)) > 0.5).astype(F)
    layer = make_layer('type: "ContrastiveLoss" contrastive_loss_param { margin: 8 }')
    bottom, top = [Blob(a.shape), Blob(b.shape), Blob(y.shape)], [Blob()]
    for blob, values in zip(bottom, (a, b, y)):
        blob.data[...] = values
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    d = (a - b).reshape(num, ch)
    loss = F(0)
    for i in range(num):
        dsq = caffe_gemv.dot(d[i], d[i])
        dist = max(F(8) - numpy.sqrt(dsq), F(0))
        loss = F(loss + (dsq if y[i, 0, 0, 0] else F(dist * dist)))
    assert top[0].data[()] == F(F(loss / F(num)) / F(2))
