"""The compiled im2col (stride 1) and col2im (any stride) of kernels/im2col_jit.py against
numpy's, bit for bit, and the column maker's choice between them."""
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
# strided ones (col2im): CaffeNet's conv1 shrunk, windows past the image, uneven strides
STRIDED = [((3, 3), (1, 1), (1, 1), (7, 7), (2, 2)), ((11, 11), (0, 0), (1, 1), (27, 27), (4, 4)),
           ((3, 2), (2, 1), (2, 3), (9, 10), (3, 2)), ((2, 2), (1, 1), (4, 4), (5, 5), (2, 3)),
           ((1, 3), (0, 2), (1, 1), (6, 5), (2, 1))]
# the (channels, images) ranges of each thread's part, for 3 channels and 4 images
SPLITS = {"1": [((0, 3), (0, 4))], "2": [((0, 3), (0, 2)), ((0, 3), (2, 4))],
          "5": [((0, 3), (0, 1)), ((0, 3), (1, 2)), ((0, 3), (2, 3)), ((0, 3), (3, 4))]}


def recorded_parts(monkeypatch, name, threads):
    """Run with ``threads`` threads and tiny parts; the ranges each call of im2col_jit's
    ``name`` kernel got, as a list that grows."""
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    monkeypatch.setattr(kernel_threads, "MIN_PART_ELEMENTS", 1)
    parts = []
    real = getattr(im2col_jit, name)
    monkeypatch.setattr(im2col_jit, name,
                        lambda *a, **k: parts.append(a[3:5]) or real(*a, **k))
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
@pytest.mark.parametrize("kernel,pad,dilation,img", GEOMETRIES)
@pytest.mark.parametrize("threads", ["1", "2", "5"])
def test_compiled_im2col_is_numpys(monkeypatch, dtype, kernel, pad, dilation, img, threads):
    """Same columns as numpy's im2col for any thread count, zeros where a window overhangs
    the image (the buffer's stale values overwritten)."""
    parts = recorded_parts(monkeypatch, "im2col", threads)
    n, c = 4, 3
    cols, out = maker(kernel, pad, dilation, c, img)
    x = numpy.random.RandomState(3).randn(n, c, *img).astype(dtype)
    cols.column_buffer(numpy, (c,) + kernel + (n,) + tuple(out), dtype)[...] = 7
    got = cols.im2col(numpy, x).copy()
    assert sorted(parts) == SPLITS[threads]
    monkeypatch.setenv("CAFFECLI_JIT", "0")
    numpy.testing.assert_array_equal(got, cols.im2col(numpy, x))


def test_col2im_kernel_writes_only_its_part():
    """One thread's part (channel and image ranges) leaves the rest of the output alone."""
    cols, out = maker((3, 3), (1, 1), (1, 1), 4, (5, 5))
    col = numpy.ones((4, 3, 3, 2) + tuple(out), numpy.float32)
    x = numpy.full((2, 4, 5, 5), -1, numpy.float32)
    im2col_jit.col2im(col, [1, 1], [1, 1], (1, 3), (1, 2), x)
    assert (x[1, 1:3] > 0).all()                 # a 3x3 window over ones counts its reach
    assert x[1, 1, 2, 2] == 9 and x[1, 1, 0, 0] == 4
    x[1, 1:3] = -1
    assert (x == -1).all()


def test_strided_layers_keep_numpys_im2col_and_3d_layers_both(monkeypatch):
    """A strided 2-D layer takes the compiled col2im only; a 3-D layer neither kernel."""
    calls = []
    monkeypatch.setattr(im2col_jit, "col2im", lambda *a, **k: calls.append("col2im"))
    monkeypatch.setattr(im2col_jit, "im2col", lambda *a, **k: calls.append("im2col"))
    for kernel, stride, img in [((3, 3), (2, 2), (7, 7)), ((2, 2, 2), (1, 1, 1), (4, 4, 4))]:
        out = ic.conv_out_shape(list(img), kernel, [0] * len(kernel), stride, [1] * len(kernel))
        cols = base_conv.ColumnMaker(list(kernel), list(stride), [0] * len(kernel),
                                     [1] * len(kernel))
        cols.configure(2, list(img), out)
        cols.col2im(numpy, numpy.zeros((2,) + kernel + (1,) + tuple(out), numpy.float32),
                    numpy.empty((1, 2) + img, numpy.float32))
        cols.im2col(numpy, numpy.zeros((1, 2) + img, numpy.float32))
    assert calls == ["col2im"]
    cols, out = maker((3, 3), (0, 0), (1, 1), 2, (5, 5))
    cols.col2im(numpy, numpy.zeros((2, 3, 3, 1) + tuple(out), numpy.float32),
                numpy.empty((1, 2, 5, 5), numpy.float32))
    assert len(calls) == 2   # a small job runs as one part
