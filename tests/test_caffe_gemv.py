"""Caffe's BLAS reductions in OpenBLAS's order (kernels/caffe_gemv.py): the gemv over the items
(sgemv_n against a vector of ones: the bias gradients of InnerProduct, BatchNorm's and Scale's
second sums, Softmax's channel sum), the row gemv (sgemv_t), sdot and sasum; numpy's order and
the compiled twins against value-by-value specs, and against the host's own OpenBLAS on one
thread where its kernels are the SKYLAKEX ones Caffe's golden numbers used."""
import ctypes

import numpy
import pytest

import host_blas
from caffecli.kernels import blas_threads, caffe_gemv, caffe_gemv_jit, jit

F = numpy.float32


def spec_items(t, c, channels, start=F(0)):
    """Row c of OpenBLAS's single-threaded sgemv_n over the columns t (items,) of a matrix of
    ``channels`` rows, into y = start, written out value by value."""
    n = len(t)
    if not (n == 4 or n > 48 or channels > 16384):    # the SKYLAKEX small kernel
        total = F(0)
        for v in t:
            total = F(total + v)
        return F(start + total)
    body = channels - channels % 4
    if c >= body:                                      # the scalar loops after the kernels
        total, i = F(0), 0
        while body == 0 and i + 4 <= n:
            if channels == 1:
                total = F(total + F(F(F(t[i] + t[i + 1]) + t[i + 2]) + t[i + 3]))
            else:
                total = F(total + F(t[i] + t[i + 1]))
                total = F(total + F(t[i + 2] + t[i + 3]))
            i += 4
        for v in t[i:]:
            total = F(total + v)
        return F(start + total)
    last = body % 4096
    paired = body - last <= c < body - last + (4 if last & 4 else 0) + (8 if last & 8 else 0)
    y, i = F(start), 0
    widths = [8] * (n // 8) + [w for w in (4, 2, 1) if n & w]
    for w in widths:
        group = [F(F(0) + v) for v in t[i:i + w]]
        if paired and w >= 4:
            even, odd = group[0], group[1]
            for k in range(2, w, 2):
                even, odd = F(even + group[k]), F(odd + group[k + 1])
            total = F(even + odd)
        else:
            total = group[0]
            for v in group[1:]:
                total = F(total + v)
        y = F(y + total)
        i += w
    return F(y + F(0))


def _values(rng, shape):
    return (rng.standard_normal(shape) * 10 ** rng.uniform(-4, 4, shape)).astype(F)


ITEMS = [1, 3, 4, 5, 8, 9, 12, 15, 48, 49, 51, 64, 100]
CHANNELS = [1, 2, 3, 4, 5, 7, 8, 12, 13, 17, 20]


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("items", ITEMS)
def test_item_totals_follow_openblas_sgemv_n_order(items):
    """Each channel's total, from zero and added to a start (beta 1), by caffe_gemv's numpy
    code and by the compiled gemv_items, is the spec's: the small kernel's order below 49
    items (but 4), the generic path's scalar loops, its groups of 8, 4, 2 and 1 items and the
    paired columns of its 8- and 4-item kernels for the first 4 and 8 channels."""
    gemv_items = jit.kernel(caffe_gemv_jit.gemv_items)
    for channels in CHANNELS:
        rng = numpy.random.default_rng(100 * channels + items)
        t = _values(rng, (items, channels))
        start = _values(rng, (channels,))
        from_zero = caffe_gemv.item_totals(t)
        added = caffe_gemv.item_totals(t, start)
        for c in range(channels):
            column = numpy.ascontiguousarray(t[:, c])
            assert from_zero[c] == spec_items(column, c, channels), (channels, c)
            assert added[c] == spec_items(column, c, channels, start[c]), (channels, c)
            assert gemv_items(column, c, channels, F(0), F(0)) == from_zero[c]
            assert gemv_items(column, c, channels, start[c], F(0)) == added[c]


def test_item_totals_take_leading_axes():
    """(outer, items, channels) gives each outer item's totals, as the 2-D call does."""
    rng = numpy.random.default_rng(3)
    t = _values(rng, (3, 9, 6))
    got = caffe_gemv.item_totals(t)
    for o in range(3):
        assert got[o].tobytes() == caffe_gemv.item_totals(t[o]).tobytes()


def test_the_paired_columns_are_not_the_running_sum():
    """For these values the 4-item kernel's pairs (0 + 2) + (1 + 3) differ from the running sum
    (so the orders are told apart), and the small kernel's in-order total is added to start
    after it is summed, not summed onto start."""
    t = numpy.array([[1e8], [1], [-1e8], [1]], F).repeat(4, axis=1)
    assert caffe_gemv.item_totals(t)[0] == F(2)
    assert F(F(F(F(1e8) + F(1)) + F(-1e8)) + F(1)) != F(2)
    t = numpy.array([[1], [1], [1]], F)
    assert caffe_gemv.item_totals(t, numpy.array([1e8], F))[0] == F(F(1e8) + F(3))


VERIFIED_OPENBLAS = ("0.3.30",)   # versions whose kernels these orders were read from


def _skylakex_openblas():
    """Whether the OpenBLAS builds run SKYLAKEX kernels (host_blas) and scipy's, the one its
    BLAS wrappers call, is a version whose kernels were checked against the golden cases
    (``VERIFIED_OPENBLAS``: older ones have other gemv kernels, newer ones may)."""
    blas_threads.available()
    if not host_blas.skylakex():
        return False
    for lib in blas_threads._loaded():
        if hasattr(lib, "scipy_openblas_get_config"):
            lib.scipy_openblas_get_config.restype = ctypes.c_char_p
            return lib.scipy_openblas_get_config().decode().split()[1] in VERIFIED_OPENBLAS
    return False


host_openblas = pytest.mark.skipif(
    not blas_threads.available() or not _skylakex_openblas(),
    reason="scipy's OpenBLAS is not a verified version (%s) running SKYLAKEX kernels, or cannot "
           "be held to one thread" % ", ".join(VERIFIED_OPENBLAS))


@host_openblas
@pytest.mark.parametrize("beta", [0.0, 1.0])
def test_item_totals_are_the_hosts_openblas_sgemv(beta):
    """caffe_gemv.item_totals equals scipy's own sgemv (Caffe's gemv(CblasTrans) with a vector
    of ones) bit for bit on one thread, across the small kernel, the generic path, blocks of
    4096 rows and more than 16384 rows."""
    from scipy.linalg import blas
    rng = numpy.random.default_rng(int(beta))
    with blas_threads.one_thread():
        for items in [1, 2, 4, 5, 8, 9, 47, 49, 64, 100]:
            for channels in [1, 2, 3, 4, 6, 8, 13, 100, 4099, 8200, 16385, 20003]:
                t = (rng.standard_normal((items, channels)) * 3).astype(F)
                y = (rng.standard_normal(channels) * 3).astype(F)
                want = blas.sgemv(1.0, t.T, numpy.ones(items, F), beta=beta, y=y.copy())
                got = caffe_gemv.item_totals(t, y if beta else None)
                assert got.tobytes() == want.tobytes(), (items, channels)


SIZES = [0, 1, 7, 8, 9, 31, 32, 33, 64, 100, 255, 256, 257, 300, 1000, 4099, 20011]


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_compiled_dot_and_asum_are_the_numpy_orders(dtype):
    """caffe_gemv_jit.dot and asum give caffe_gemv's bits (sdot's tail then its kernel in a
    double total; sasum's five accumulators) at every size, and the orders are not the plain
    running sum (a value far larger than the rest)."""
    rng = numpy.random.default_rng(7)
    for n in SIZES:
        a = (rng.standard_normal(n) * 3).astype(dtype)
        b = (rng.standard_normal(n) * 3).astype(dtype)
        if n:
            assert caffe_gemv_jit.dot(a, b).tobytes() == caffe_gemv.dot(a, b).tobytes(), n
        assert caffe_gemv_jit.asum(a).tobytes() == caffe_gemv.asum(a).tobytes(), n
    x = numpy.ones(300, F)
    x[0] = 1e8
    running = F(0)
    for v in x:
        running = F(running + v)
    assert caffe_gemv.asum(x) != running


def spec_asum(x):
    """OpenBLAS's generic sasum kernel, value by value: sum k takes values k and k + 4 of each
    8, a fifth the rest, then (((0 + 1) + 2) + 3) + 4."""
    n8 = len(x) - len(x) % 8
    sums = [F(0)] * 5
    for i in range(0, n8, 8):
        for k in range(8):
            sums[k % 4] = F(sums[k % 4] + abs(x[i + k]))
    for v in x[n8:]:
        sums[4] = F(sums[4] + abs(v))
    return F(F(F(F(sums[0] + sums[1]) + sums[2]) + sums[3]) + sums[4])


def test_asum_follows_the_generic_kernel():
    rng = numpy.random.default_rng(6)
    for n in SIZES:
        x = (rng.standard_normal(n) * 10 ** rng.uniform(-3, 3, n)).astype(F)
        assert caffe_gemv.asum(x) == spec_asum(x), n


@host_openblas
def test_dot_is_the_hosts_openblas():
    """caffe_gemv.dot equals scipy's own sdot on one thread."""
    from scipy.linalg import blas
    rng = numpy.random.default_rng(8)
    with blas_threads.one_thread():
        for n in SIZES[1:]:
            a = (rng.standard_normal(n) * 3).astype(F)
            b = (rng.standard_normal(n) * 3).astype(F)
            assert caffe_gemv.dot(a, b) == F(blas.sdot(a, b)), n


def test_blob_sums_are_caffes_blas_calls():
    """Blob.sumsq_diff and asum_data (gradient clipping, the debug lines) are caffe_cpu_dot and
    caffe_cpu_asum of the host values."""
    from caffecli.blob import Blob
    rng = numpy.random.default_rng(9)
    blob = Blob((3, 100))
    blob.data[...] = rng.standard_normal((3, 100))
    blob.diff[...] = rng.standard_normal((3, 100))
    diff, data = blob.diff.reshape(-1), blob.data.reshape(-1)
    assert blob.sumsq_diff() == float(caffe_gemv.dot(diff, diff))
    assert blob.asum_data() == float(caffe_gemv.asum(data))


@host_openblas
def test_row_totals_are_the_hosts_openblas_sgemv():
    """caffe_gemv.row_totals (beta 0 and 1, alpha 1 and not) equals scipy's own sgemv (Caffe's
    gemv(CblasNoTrans) with a vector of ones) on one thread: every row kernel (four, two, one
    rows), blocks of 4096, the fused tails, and the SKYLAKEX kernels for rows of 2 to 8 values
    in each of their blocks of rows (16, 8, 4, a pair, the last)."""
    from scipy.linalg import blas
    rng = numpy.random.default_rng(11)
    with blas_threads.one_thread():
        for rows in [1, 2, 3, 4, 5, 6, 7, 9, 13, 16, 17, 24, 33, 100]:
            for n in [1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 13, 16, 31, 100, 196, 4095, 4096, 4097,
                      9000]:
                for alpha in (1.0, 1 / 37):
                    a = (rng.standard_normal((rows, n)) * 3).astype(F)
                    y = (rng.standard_normal(rows) * 3).astype(F)
                    ones = numpy.ones(n, F)
                    want = blas.sgemv(alpha, a.T, ones, trans=1)
                    assert caffe_gemv.row_totals(a, alpha).tobytes() == want.tobytes()
                    want = blas.sgemv(alpha, a.T, ones, beta=1.0, y=y.copy(), trans=1)
                    got = caffe_gemv.row_totals(a, alpha, y)
                    assert got.tobytes() == want.tobytes(), (rows, n, alpha)


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("items", [3, 4, 9, 48, 64, 100])
@pytest.mark.parametrize("channels", [1, 3, 6, 13, 500, 4099])
def test_add_item_totals_is_item_totals_with_a_start(items, channels):
    """caffe_gemv_jit.add_item_totals (an inner product's bias gradient, channels split across
    the threads, most of them a row at a time) is caffe_gemv.item_totals from the diff."""
    rng = numpy.random.default_rng(items * channels)
    t = _values(rng, (items, channels))
    start = _values(rng, (channels,))
    got = caffe_gemv_jit.add_item_totals(t, start.copy())
    assert got.tobytes() == caffe_gemv.item_totals(t, start).tobytes()


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
@pytest.mark.parametrize("n", [2, 3, 4, 5, 6, 7, 8])
def test_short_rows_compiled_are_numpys(n):
    """Rows of 2 to 8 values: the compiled row sums (caffe_gemv_jit's _gemv_row through
    row_kernel's block codes) and the per-image parts added in order (matrix_row_parts,
    add_parts) give caffe_gemv.row_totals' bits, from zero and from a start, alpha 1 and not
    (the orders themselves: the host-OpenBLAS test above)."""
    rng = numpy.random.default_rng(n)
    gemv_row = jit.kernel(caffe_gemv_jit._gemv_row)
    box = numpy.empty(1, F)
    for rows in (3, 7, 13, 24, 33):
        a = _values(rng, (rows, n))
        start = _values(rng, (rows,))
        for alpha in (F(1), F(1 / 37)):
            want = caffe_gemv.row_totals(a, alpha, start)
            got = [gemv_row(a[r], alpha, caffe_gemv_jit.row_kernel(r, rows, n), start[r], F(0),
                            box) for r in range(rows)]
            assert numpy.array(got, F).tobytes() == want.tobytes(), (rows, alpha)
        parts = numpy.empty((rows, caffe_gemv_jit.row_part_count(n)), F)
        jit.kernel(caffe_gemv_jit.matrix_row_parts)(a, F(0), parts, box)
        added = start.copy()
        jit.kernel(caffe_gemv_jit.add_parts)(parts[None], added)
        assert added.tobytes() == caffe_gemv.row_totals(a, 1, start).tobytes()
