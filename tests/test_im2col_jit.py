"""The compiled im2col and col2im (any stride) of kernels/im2col_jit.py against numpy's, bit
for bit, split across numba's threads, and the column maker's choice between them."""
import numpy
import pytest

from caffecli.kernels import im2col as ic
from caffecli.kernels import im2col_jit, jit
from caffecli.kernels import threads as kernel_threads
from caffecli.layers import _base_conv as base_conv

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")


GEOMETRIES = [((5, 5), (0, 0), (1, 1), (12, 12)), ((3, 3), (1, 1), (1, 1), (7, 5)),
              ((3, 2), (2, 1), (2, 3), (6, 9)), ((1, 4), (0, 3), (1, 1), (3, 4)),
              ((2, 2), (1, 1), (4, 4), (3, 3))]    # some windows lie wholly in the padding
# strided ones: CaffeNet's conv1 shrunk, windows past the image, uneven strides
STRIDED = [((3, 3), (1, 1), (1, 1), (7, 7), (2, 2)), ((11, 11), (0, 0), (1, 1), (27, 27), (4, 4)),
           ((3, 2), (2, 1), (2, 3), (9, 10), (3, 2)), ((2, 2), (1, 1), (4, 4), (5, 5), (2, 3)),
           ((1, 3), (0, 2), (1, 1), (6, 5), (2, 1)),
           # im2col by column phases (dilation 1, a kernel as wide as the stride): padded, an
           # image width no multiple of the stride, windows wholly in the padding
           ((5, 3), (2, 1), (1, 1), (9, 10), (1, 2)), ((2, 2), (3, 3), (1, 1), (5, 5), (2, 2)),
           ((7, 7), (3, 3), (1, 1), (11, 13), (2, 2))]
# the (channels, images) ranges of each thread's part, for 3 channels and 4 images
SPLITS = {"1": [((0, 3), (0, 4))], "2": [((0, 3), (0, 2)), ((0, 3), (2, 4))],
          "5": [((0, 3), (0, 1)), ((0, 3), (1, 2)), ((0, 3), (2, 3)), ((0, 3), (3, 4))]}


def recorded_parts(monkeypatch, name, threads, channels=3, images=4):
    """Run with ``threads`` threads and tiny parts; the (channels, images) ranges of the parts
    that im2col_jit's ``name`` split gives numba's threads, as a list that grows."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.setattr(kernel_threads, "MIN_PART_ELEMENTS", 1)
    parts = []
    real = im2col_jit.for_native

    def recording(driver, count, elements, by_image, *args, **kw):
        if driver.__name__ == "_%s_parts" % name:
            k = kernel_threads._parts(count, elements, kw.get("min_part"))
            for a, b in ((count * i // k, count * (i + 1) // k) for i in range(k)):
                parts.append(((0, channels), (a, b)) if by_image else ((a, b), (0, images)))
        return real(driver, count, elements, by_image, *args, **kw)
    monkeypatch.setattr(im2col_jit, "for_native", recording)
    return parts


def maker(kernel, pad, dilation, channels, img, stride=(1, 1)):
    out = ic.conv_out_shape(list(img), kernel, pad, stride, dilation)
    cols = base_conv.ColumnMaker(list(kernel), list(stride), list(pad), list(dilation))
    cols.configure(channels, list(img), out)
    return cols, out


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("kernel,pad,dilation,img,stride",
                         [g + ((1, 1),) for g in GEOMETRIES] + STRIDED)
@pytest.mark.parametrize("threads", ["1", "2", "5"])
def test_compiled_col2im_is_numpys(monkeypatch, dtype, kernel, pad, dilation, img, stride,
                                   threads):
    """Same bits as numpy's col2im (its phase-split adds where strided) for any thread count,
    split by channel or (fewer than four channels a thread) by image; the output's stale values
    are overwritten."""
    parts = recorded_parts(monkeypatch, "col2im", threads)
    n, c = 4, 3
    cols, out = maker(kernel, pad, dilation, c, img, stride)
    col = numpy.random.RandomState(2).randn(c, *kernel, n, *out).astype(dtype)
    got = cols.col2im(numpy, col, numpy.full((n, c) + img, 7, dtype))
    assert sorted(parts) == SPLITS[threads]
    monkeypatch.setenv("CAFFECLI_JIT", "0")
    want = cols.col2im(numpy, col, numpy.empty((n, c) + img, dtype))
    numpy.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("kernel,pad,dilation,img,stride",
                         [g + ((1, 1),) for g in GEOMETRIES] + STRIDED)
@pytest.mark.parametrize("threads", ["1", "2", "5"])
def test_compiled_im2col_is_numpys(monkeypatch, dtype, kernel, pad, dilation, img, stride,
                                   threads):
    """Same columns as numpy's im2col (its phase-split copies where strided) for any thread
    count, zeros where a window overhangs the image (the buffer's stale values overwritten)."""
    parts = recorded_parts(monkeypatch, "im2col", threads)
    n, c = 4, 3
    cols, out = maker(kernel, pad, dilation, c, img, stride)
    x = numpy.random.RandomState(3).randn(n, c, *img).astype(dtype)
    cols.column_buffer(numpy, (c,) + kernel + (n,) + tuple(out), dtype)[...] = 7
    got = cols.im2col(numpy, x).copy()
    assert sorted(parts) == SPLITS[threads]
    monkeypatch.setenv("CAFFECLI_JIT", "0")
    numpy.testing.assert_array_equal(got, cols.im2col(numpy, x))


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("kernel,pad,dilation,img,stride", STRIDED)
@pytest.mark.parametrize("threads", ["1", "2", "5"])
def test_strided_col2im_splits_by_bands_of_rows(monkeypatch, dtype, kernel, pad, dilation, img,
                                                stride, threads):
    """A strided col2im split by channels, with fewer than BAND_PARTS channels a thread, goes
    to the threads in (channel, band of image rows) units: numpy's bits for any split, the
    output's stale values overwritten."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.setattr(kernel_threads, "MIN_PART_ELEMENTS", 1)
    units = []
    real = im2col_jit.for_native

    def recording(driver, count, *args, **kw):
        if driver.__name__ == "_phased_bands_parts":
            units.append((count, args[1]))
        return real(driver, count, *args, **kw)
    monkeypatch.setattr(im2col_jit, "for_native", recording)
    n, c = 2, 3
    cols, out = maker(kernel, pad, dilation, c, img, stride)
    col = numpy.random.RandomState(6).randn(c, *kernel, n, *out).astype(dtype)
    got = cols.col2im(numpy, col, numpy.full((n, c) + img, 7, dtype))
    bands = min(img[0], -(-im2col_jit.BAND_PARTS * int(threads) // c))
    assert units == [(c * bands, bands)]
    monkeypatch.setenv("CAFFECLI_JIT", "0")
    want = cols.col2im(numpy, col, numpy.empty((n, c) + img, dtype))
    numpy.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kernel,pad,img,stride,images", [
    ((11, 11), (0, 0), (27, 27), (4, 4), 1),   # CaffeNet's conv1 shrunk: one image a chunk
    ((3, 3), (1, 1), (7, 8), (2, 2), 2)])
@pytest.mark.parametrize("threads", ["1", "2", "5"])
def test_strided_im2col_splits_by_kernel_rows_across_channels(monkeypatch, kernel, pad, img,
                                                              stride, images, threads):
    """A strided im2col by column phases, split by channels (as many images as channels or
    fewer), goes to the threads in ranges of kernel rows counted across the channels: three
    channels split evenly. The same columns as numpy's for any split."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.setattr(kernel_threads, "MIN_PART_ELEMENTS", 1)
    bounds = []
    real = im2col_jit.for_native

    def recording(driver, count, elements, *args, **kw):
        if driver.__name__ == "_phase_rows_parts":
            k = kernel_threads._parts(count, elements, kw.get("min_part"), pooled=False)
            bounds.append(kernel_threads._bounds(count, k))
        return real(driver, count, elements, *args, **kw)
    monkeypatch.setattr(im2col_jit, "for_native", recording)
    c = 3
    cols, out = maker(kernel, pad, (1, 1), c, img, stride)
    x = numpy.random.RandomState(4).randn(images, c, *img).astype(numpy.float32)
    cols.column_buffer(numpy, (c,) + kernel + (images,) + tuple(out), numpy.float32)[...] = 7
    got = cols.im2col(numpy, x).copy()
    rows, parts = c * kernel[0], min(int(threads), c * kernel[0])
    assert bounds == [[rows * i // parts for i in range(parts + 1)]]
    monkeypatch.setenv("CAFFECLI_JIT", "0")
    numpy.testing.assert_array_equal(got, cols.im2col(numpy, x))


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("kernel,pad,dilation,img,stride",
                         [g + ((1, 1),) for g in GEOMETRIES] + STRIDED)
@pytest.mark.parametrize("groups,threads", [(1, "1"), (2, "2"), (3, "5")])
def test_col2im_by_position_is_col2ims(monkeypatch, dtype, kernel, pad, dilation, img, stride,
                                       groups, threads):
    """Columns laid out by output position with channels last, (g, n, *out, *kernel, C/g),
    give the same bits as col2im of the same columns in (C, *kernel, n, *out), for any
    thread count; the output's stale values are overwritten."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.setattr(kernel_threads, "MIN_PART_ELEMENTS", 1)
    n, c = 4, 2 * groups
    cols, out = maker(kernel, pad, dilation, c, img, stride)
    by_position = numpy.random.RandomState(4).randn(
        groups, n, *out, *kernel, c // groups).astype(dtype)
    got = numpy.full((n, c) + img, 7, dtype)
    im2col_jit.col2im_positions(by_position, stride, dilation, pad, got)
    # (g, n, oh, ow, kh, kw, c/g) -> (g, c/g, kh, kw, n, oh, ow) = (C, *kernel, n, *out)
    col = numpy.ascontiguousarray(by_position.transpose(0, 6, 4, 5, 1, 2, 3)).reshape(
        (c,) + kernel + (n,) + tuple(out))
    want = cols.col2im(numpy, col, numpy.empty((n, c) + img, dtype))
    assert got.tobytes() == want.tobytes()


def test_col2im_kernel_writes_only_its_part():
    """One thread's part (channel and image ranges) leaves the rest of the output alone."""
    cols, out = maker((3, 3), (1, 1), (1, 1), 4, (5, 5))
    col = numpy.ones((4, 3, 3, 2) + tuple(out), numpy.float32)
    x = numpy.full((2, 4, 5, 5), -1, numpy.float32)
    jit.kernel(im2col_jit._col2im)(col, 1, 1, 1, 1, 1, 3, 1, 2, x)
    assert (x[1, 1:3] > 0).all()                 # a 3x3 window over ones counts its reach
    assert x[1, 1, 2, 2] == 9 and x[1, 1, 0, 0] == 4
    x[1, 1:3] = -1
    assert (x == -1).all()


@pytest.mark.parametrize("kernel,pad,dilation,img", [
    ((3, 3), (1, 1), (1, 1), (4, 3)),     # rows of 3: a whole run spans five rows
    ((2, 5), (0, 2), (2, 1), (6, 17)),    # rows of 17: a run of 32
    ((1, 1), (0, 0), (1, 1), (1, 16))])   # one row of exactly ROW_RUN
@pytest.mark.parametrize("kind", ["_im2col", "_strided_rows"])
def test_im2col_kernel_writes_only_its_part(kernel, pad, dilation, img, kind):
    """One thread's part (channel and image ranges) writes its own windows, the values numpy's
    im2col makes, and nothing else: stride-1 rows are copied in whole runs of ROW_RUN values
    that overrun their row, which must stay inside the part's blocks."""
    c, n = 4, 3
    cols, out = maker(kernel, pad, dilation, c, img)
    x = numpy.random.RandomState(5).randn(n, c, *img).astype(numpy.float32)
    want = cols.im2col(numpy, x).copy()
    space = numpy.full(want.size + 64, numpy.nan, numpy.float32)   # room past the end
    got = space[:want.size].reshape(want.shape)
    if kind == "_im2col":
        jit.kernel(im2col_jit._im2col)(x, *dilation, *pad, 1, 3, 1, 2, got)
    else:
        jit.kernel(im2col_jit._strided_rows)(x, 1, 1, *dilation, *pad, 1, 3, 1, 2, got)
    numpy.testing.assert_array_equal(got[1:3, :, :, 1:2], want[1:3, :, :, 1:2])
    got[1:3, :, :, 1:2] = numpy.nan
    assert numpy.isnan(space).all()


def test_2d_layers_take_the_compiled_kernels_and_3d_layers_numpys(monkeypatch):
    """A 2-D layer, strided or not, takes both compiled kernels; a 3-D layer neither; a 1x1
    strided layer without padding reads its lattice (no columns to copy window by window)."""
    calls = []
    monkeypatch.setattr(im2col_jit, "col2im", lambda *a, **k: calls.append("col2im"))
    monkeypatch.setattr(im2col_jit, "im2col", lambda *a, **k: calls.append("im2col"))
    for kernel, stride, img in [((3, 3), (2, 2), (7, 7)), ((2, 2, 2), (1, 1, 1), (4, 4, 4)),
                                ((1, 1), (2, 2), (6, 6))]:
        out = ic.conv_out_shape(list(img), kernel, [0] * len(kernel), stride, [1] * len(kernel))
        cols = base_conv.ColumnMaker(list(kernel), list(stride), [0] * len(kernel),
                                     [1] * len(kernel))
        cols.configure(2, list(img), out)
        cols.col2im(numpy, numpy.zeros((2,) + kernel + (1,) + tuple(out), numpy.float32),
                    numpy.empty((1, 2) + img, numpy.float32))
        cols.im2col(numpy, numpy.zeros((1, 2) + img, numpy.float32))
    assert calls == ["col2im", "im2col"]


def test_a_small_job_runs_whole_on_the_calling_thread(monkeypatch):
    """Below the part size, the split is one part: the serial driver over the whole range."""
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    ran = []
    cols, out = maker((3, 3), (0, 0), (1, 1), 2, (5, 5))
    monkeypatch.setattr(jit, "parallel", lambda d, threaded=False: lambda bounds, *a: ran.append(
        (threaded, list(bounds))))
    cols.col2im(numpy, numpy.zeros((2, 3, 3, 1) + tuple(out), numpy.float32),
                numpy.empty((1, 2, 5, 5), numpy.float32))
    assert ran == [(False, [0, 2])]
