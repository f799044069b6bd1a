"""BatchNorm with the batch's statistics: the compiled passes (kernels/batch_norm_jit.py)
against the layer's numpy code, bit for bit (tops, bottom diffs, running statistics), in place
or not, on one thread or split, float32 and float64; and the order of their sums (Caffe's
gemvs in OpenBLAS's order, kernels/caffe_gemv.py) against a value-by-value spec (the
second gemv's: tests/test_caffe_gemv.py)."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.kernels import caffe_gemv_jit, jit, threads
from gradcheck import make_layer

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")


F = numpy.float32


def _fma(a, b, c):
    return F(float(a) * float(b) + float(c))


def spec_row(a, alpha, kernel, start=F(0)):
    """OpenBLAS's sgemv_t order for one row times alpha added into y = start, written out value
    by value (the order kernels/caffe_gemv.py documents); ``kernel``: 1 the four-row kernel, 0
    the two-row one, 2 the one-row one."""
    n = len(a)
    body = n - n % 4
    y = F(start)
    eight = kernel in (1, 2)
    for s0 in range(0, body, 4096):
        block = a[s0:min(body, s0 + 4096)]
        width = 8 if eight else 4
        lanes, i = [F(0)] * width, 0
        if eight and len(block) & 4:
            lanes[:4] = [F(lanes[k] + block[k]) for k in range(4)]
            i = 4
        while i < len(block):
            lanes = [F(lanes[k] + block[i + k]) for k in range(width)]
            i += width
        if eight:
            lanes = [F(lanes[k + 4] + lanes[k]) for k in range(4)]
        t = F(F(lanes[0] + lanes[1]) + F(lanes[2] + lanes[3]))
        y = F(F(t * alpha) + y) if kernel == 1 else _fma(alpha, t, y)
    tail = a[body:]
    if len(tail) == 1:
        y = _fma(alpha, tail[0], y)
    elif len(tail) == 2:
        y = F(y + _fma(alpha, tail[0], F(tail[1] * alpha)))
    elif len(tail) == 3:
        y = F(y + _fma(alpha, tail[2], _fma(alpha, tail[0], F(tail[1] * alpha))))
    return y


@pytest.mark.parametrize("n", [1, 9, 12, 13, 16, 20, 27, 36, 4100, 4103])
def test_row_totals_follow_openblas_gemv_order(n):
    """Each row's total times alpha, from zero and added to a start (beta 1), by the compiled
    kernel and by caffe_gemv's numpy code, is the value-by-value spec of OpenBLAS's order:
    eight lanes for the leading multiple of four rows (rows 0-3 of 7 or 5), four for a pair of
    the last (rows 4-5 of 7), eight for an odd last row (row 6 of 7, 4 of 5, each fused into y),
    blocks of 4096, the fused tail (rows of 2 to 8 values: tests/test_caffe_gemv.py)."""
    from caffecli.kernels import caffe_gemv
    rng = numpy.random.default_rng(n)
    gemv_row = jit.kernel(caffe_gemv_jit._gemv_row)
    row_kernel = jit.kernel(caffe_gemv_jit.row_kernel)
    box = numpy.empty(1, F)
    alpha = F(1.0 / 37)
    for count, kernels in ((7, ((0, 1), (3, 1), (4, 0), (5, 0), (6, 2))), (5, ((4, 2),))):
        rows = (rng.standard_normal((count, n)) * 10 ** rng.uniform(-3, 3, (count, n))
                ).astype(F)
        numpy_totals = caffe_gemv.row_totals(rows, alpha)
        start = (rng.standard_normal(count) * 100).astype(F)
        numpy_added = caffe_gemv.row_totals(rows, alpha, start)
        for r, kind in kernels:
            assert row_kernel(r, count, n) == (kind if n != 1 else kind)
            want = spec_row(rows[r], alpha, kind)
            assert numpy_totals[r] == want
            assert gemv_row(rows[r], alpha, kind, F(0), F(0), box) == want
            want = spec_row(rows[r], alpha, kind, start[r])
            assert numpy_added[r] == want
            assert gemv_row(rows[r], alpha, kind, start[r], F(0), box) == want
        assert numpy_totals.dtype == F


def test_the_orders_differ_from_a_plain_sum():
    """The lanes' order is not the values one after another (for these values), and a total of
    negative zeros is +0.0, as a sum from zero."""
    from caffecli.kernels import caffe_gemv
    a = numpy.array([[1e8, 1, 1, 1, -1e8, 1, 1, 1]] * 4, F)
    plain = F(0)
    for v in a[0]:
        plain = F(plain + v)
    assert caffe_gemv.row_totals(a, 1)[0] != plain
    assert not numpy.signbit(caffe_gemv.row_totals(numpy.full((4, 3), -0.0, F), 1)).any()
    assert not numpy.signbit(caffe_gemv.item_totals(numpy.full((3, 2), -0.0, F))).any()


# channels fewer than four (pairs of items) and more, rows in the wide and narrow kernels
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
    with numpy.errstate(over="ignore"):   # numpy's squares of 3e30 overflow, as Caffe's
        assert_compiled_is_numpys(
            'type: "BatchNorm" batch_norm_param { use_global_stats: false }', x, dy, monkeypatch)


def assert_compiled_is_numpys(text, x, dy, monkeypatch):
    """The layer of ``text`` forward and backward on x, dy, compiled and with CAFFECLI_JIT=0:
    the same top and bottom diff, bit for bit."""
    results = []
    for jit_on in ("0", "1"):
        monkeypatch.setenv("CAFFECLI_JIT", jit_on)
        layer = make_layer(text)
        bottom, top = Blob(x.shape), Blob()
        layer.SetUp([bottom], [top])
        bottom.data[...] = x
        layer.Forward([bottom], [top])
        top.diff[...] = dy
        layer.Backward([top], [True], [bottom])
        results.append([top.data.copy(), bottom.diff.copy()])
    for a, b in zip(*results):
        numpy.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("shape", [(1, 5), (4, 12), (7, 9), (6, 4103), (9, 30), (3, 8198)])
def test_compiled_row_totals_are_caffe_gemvs(shape, monkeypatch):
    """caffe_gemv_jit.row_totals (MVN's rows), split across one thread or two, against
    caffe_gemv's numpy code bit for bit: rows in fours and the narrow last rows, tails, blocks
    of 4096."""
    from caffecli.kernels import caffe_gemv
    rng = numpy.random.default_rng(shape[1])
    rows = (rng.standard_normal(shape) * 10 ** rng.uniform(-3, 3, shape)).astype(F)
    want = caffe_gemv.row_totals(rows, F(0.25))
    monkeypatch.setattr(threads, "MIN_PART_ELEMENTS", 1)
    for count in ("1", "2"):
        monkeypatch.setenv("OMP_NUM_THREADS", count)
        got = caffe_gemv_jit.row_totals(rows, 0.25, numpy.full(shape[0], numpy.nan, F))
        numpy.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("across,normalize", [(False, True), (True, True), (False, False)])
def test_mvn_compiled_sums_are_numpys(across, normalize, monkeypatch):
    """MVN forward and backward with its sums compiled and with CAFFECLI_JIT=0: the same bits."""
    shape = (3, 5, 7, 9)
    rng = numpy.random.default_rng(3)
    x = (rng.standard_normal(shape) * 2 + 1).astype(F)
    dy = rng.standard_normal(shape).astype(F)
    assert_compiled_is_numpys('type: "MVN" mvn_param { across_channels: %s normalize_variance: %s }'
                              % (str(across).lower(), str(normalize).lower()), x, dy, monkeypatch)
