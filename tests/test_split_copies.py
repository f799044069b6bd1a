"""Concat, Slice, Split and Eltwise SUM with their copies and sums split across the threads
(kernels/threads.split_copy, split_sum): the values of the plain array expressions, bit for
bit, split by rows or by columns, one thread or two."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.kernels import threads
from gradcheck import make_layer


@pytest.fixture(params=["1", "2"])
def split_small(request, monkeypatch):
    """Every copy and sum split (one thread: whole) however small."""
    monkeypatch.setenv("OMP_NUM_THREADS", request.param)
    monkeypatch.setattr(threads, "MIN_PART_ELEMENTS", 1)
    monkeypatch.setattr(threads, "COPY_MIN_PART", 1)


def _blobs(shapes, rng):
    blobs = []
    for shape in shapes:
        b = Blob(shape)
        b.data[...] = rng.standard_normal(shape)
        blobs.append(b)
    return blobs


@pytest.mark.parametrize("axis, shapes", [
    (1, [(1, 3, 4, 5), (1, 2, 4, 5)]),      # one row: split by columns
    (1, [(3, 2, 4, 5), (3, 6, 4, 5)]),      # rows
    (0, [(2, 3, 4), (5, 3, 4)]),
    (2, [(2, 3, 4), (2, 3, 1), (2, 3, 6)]),
])
def test_concat_forward_backward(axis, shapes, split_small):
    rng = numpy.random.default_rng(1)
    layer = make_layer('type: "Concat" concat_param { axis: %d }' % axis)
    bottom, top = _blobs(shapes, rng), [Blob()]
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    numpy.testing.assert_array_equal(top[0].data,
                                     numpy.concatenate([b.data for b in bottom], axis))
    top[0].diff[...] = rng.standard_normal(top[0].shape)
    for b in bottom:
        b.diff[...] = 7
    down = [True] * (len(bottom) - 1) + [False]
    layer.Backward(top, down, bottom)
    parts = numpy.split(top[0].diff, numpy.cumsum([s[axis] for s in shapes])[:-1], axis)
    for b, part, d in zip(bottom, parts, down):
        numpy.testing.assert_array_equal(b.diff, part if d else numpy.full(b.shape, 7.0))


@pytest.mark.parametrize("axis, shape, points", [
    (1, (1, 5, 4, 3), [2]),          # one row: split by columns
    (1, (4, 6, 2), [1, 3]),          # rows
    (0, (7, 3), [2, 3]),
    (2, (2, 3, 8), [5]),
])
def test_slice_forward_backward(axis, shape, points, split_small):
    rng = numpy.random.default_rng(4)
    layer = make_layer('type: "Slice" slice_param { axis: %d %s }'
                       % (axis, " ".join("slice_point: %d" % p for p in points)))
    bottom, top = _blobs([shape], rng), [Blob() for _ in range(len(points) + 1)]
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    for t, want in zip(top, numpy.split(bottom[0].data, points, axis)):
        numpy.testing.assert_array_equal(t.data, want)
    for t in top:
        t.diff[...] = rng.standard_normal(t.shape)
    layer.Backward(top, [True], bottom)
    numpy.testing.assert_array_equal(bottom[0].diff,
                                     numpy.concatenate([t.diff for t in top], axis))


@pytest.mark.parametrize("tops", [1, 2, 4])
def test_split_backward_adds_in_top_order(tops, split_small):
    rng = numpy.random.default_rng(2)
    layer = make_layer('type: "Split"')
    bottom = _blobs([(3, 5, 7)], rng)
    top = [Blob() for _ in range(tops)]
    layer.SetUp(bottom, top)
    for t in top:
        t.diff[...] = rng.standard_normal(t.shape).astype(numpy.float32) * 1e4
    layer.Backward(top, [True], bottom)
    want = top[0].diff.copy()
    for t in top[1:]:
        want = want + t.diff
    assert bottom[0].diff.tobytes() == want.tobytes()


def test_eltwise_sum_forward_backward(split_small):
    rng = numpy.random.default_rng(3)
    layer = make_layer('type: "Eltwise" eltwise_param { operation: SUM }')
    bottom, top = _blobs([(2, 3, 9)] * 3, rng), [Blob()]
    layer.SetUp(bottom, top)
    layer.Forward(bottom, top)
    want = bottom[0].data + bottom[1].data + bottom[2].data
    assert top[0].data.tobytes() == want.tobytes()
    top[0].diff[...] = rng.standard_normal(top[0].shape)
    layer.Backward(top, [True, False, True], bottom)
    numpy.testing.assert_array_equal(bottom[0].diff, top[0].diff)
    numpy.testing.assert_array_equal(bottom[2].diff, top[0].diff)
    assert not numpy.array_equal(bottom[1].diff, top[0].diff)
