"""BatchNorm with the batch's statistics: the compiled passes (kernels/batch_norm_jit.py)
against the layer's numpy code, bit for bit (tops, bottom diffs, running statistics), in place
or not, on one thread or split, float32 and float64; and the order of the kernels' sums."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.kernels import batch_norm_jit, jit, threads
from gradcheck import make_layer

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")


def test_row_sums_add_in_order_from_zero():
    """A row's sum is its values added one after another from zero: not numpy's pairwise sum
    (for these values), and never -0.0 (a sum from zero)."""
    row_sum = jit.kernel(batch_norm_jit._row_sum)
    a = numpy.array([1e8, 1, -1e8, 1, 1, 1, 1, 1, 1, 1, 0.5], numpy.float32)
    want = numpy.float32(0)
    for v in a:
        want = numpy.float32(want + v)
    assert row_sum(a, a.size, numpy.float32(0)) == want == 7.5
    assert a.sum() != want
    negative_zeros = numpy.full(3, -0.0, numpy.float32)
    assert not numpy.signbit(row_sum(negative_zeros, 3, numpy.float32(0)))


# the last: items four at a time (batch_norm_jit._item_sums), then the rest
SHAPES = [(2, 3, 1, 1), (4, 5, 3, 7), (3, 2, 12, 13), (2, 3, 5), (9, 2, 4, 3)]


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("in_place", [False, True])
def test_training_batch_norm_compiled_is_numpys(dtype, shape, in_place, monkeypatch):
    """Two forward-backward steps (the running statistics carry over) with CAFFECLI_JIT=0, and
    compiled on one thread and split per channel across two."""
    rng = numpy.random.default_rng(7)
    xs = [(rng.standard_normal(shape) * 3 + 1).astype(dtype) for _ in range(2)]
    dys = [rng.standard_normal(shape).astype(dtype) for _ in range(2)]
    results = []
    for jit_on, count in (("0", "1"), ("1", "1"), ("1", "2")):
        monkeypatch.setenv("CAFFECLI_JIT", jit_on)
        monkeypatch.setenv("OMP_NUM_THREADS", count)
        monkeypatch.setattr(threads, "MIN_PART_ELEMENTS", 1)   # split even these small blobs
        layer = make_layer('type: "BatchNorm" batch_norm_param { use_global_stats: false }')
        bottom = Blob(shape, dtype)
        top = bottom if in_place else Blob(dtype=dtype)
        layer.SetUp([bottom], [top])
        seen = []
        for x, dy in zip(xs, dys):
            bottom.data[...] = x
            layer.Forward([bottom], [top])
            seen.append(top.data.copy())
            top.diff[...] = dy
            layer.Backward([top], [True], [bottom])
            seen.append(bottom.diff.copy())
        seen += [b.data.copy() for b in layer.blobs]
        results.append(seen)
    want = results[0]
    assert not numpy.array_equal(want[0], xs[0]) and numpy.abs(want[1]).sum() > 0
    for got in results[1:]:
        for a, b in zip(got, want):
            assert a.dtype == b.dtype
            numpy.testing.assert_array_equal(a, b)


def test_training_batch_norm_compiled_with_extreme_values(monkeypatch):
    """A constant channel (zero variance), huge and tiny values: the same bits either way."""
    shape = (3, 3, 4, 4)
    x = numpy.ones(shape, numpy.float32)
    x[:, 1] = numpy.float32(3e30) * numpy.arange(48).reshape(3, 4, 4)
    x[:, 2] = numpy.float32(1e-30) * numpy.arange(48).reshape(3, 4, 4)
    dy = numpy.linspace(-1, 1, x.size, dtype=numpy.float32).reshape(shape)
    results = []
    for jit_on in ("0", "1"):
        monkeypatch.setenv("CAFFECLI_JIT", jit_on)
        layer = make_layer('type: "BatchNorm" batch_norm_param { use_global_stats: false }')
        bottom, top = Blob(shape), Blob()
        layer.SetUp([bottom], [top])
        bottom.data[...] = x
        with numpy.errstate(over="ignore"):   # numpy's squares of 3e30 overflow, as Caffe's
            layer.Forward([bottom], [top])
        top.diff[...] = dy
        layer.Backward([top], [True], [bottom])
        results.append([top.data.copy(), bottom.diff.copy()])
    for a, b in zip(*results):
        numpy.testing.assert_array_equal(a, b)
