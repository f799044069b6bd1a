"""AbsVal's compiled passes (kernels/abs_jit.py) against its array code, bit for bit, and
Caffe's sign in the gradient: (0 < x) - (x < 0), so a NaN input passes no gradient."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.kernels import jit, threads
from gradcheck import make_layer

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")


def _run(x, dy, monkeypatch, jit_on):
    monkeypatch.setenv("CAFFECLI_JIT", jit_on)
    monkeypatch.setattr(jit, "PASS_MIN_PART", 1)          # split even this small blob
    monkeypatch.setattr(threads, "MIN_PART_ELEMENTS", 1)
    layer = make_layer('type: "AbsVal"')
    bottom, top = Blob(x.shape, x.dtype), Blob(dtype=x.dtype)
    layer.SetUp([bottom], [top])
    bottom.data[...] = x
    layer.Forward([bottom], [top])
    top.diff[...] = dy
    with numpy.errstate(invalid="ignore"):   # the array code's 0 * inf, as Caffe's
        layer.Backward([top], [True], [bottom])
    return top.data.copy(), bottom.diff.copy()


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
def test_abs_val_compiled_is_the_array_code_and_caffes_sign(dtype, monkeypatch):
    rng = numpy.random.default_rng(2)
    x = rng.standard_normal((4, 3, 50, 7)).astype(dtype)
    special = [numpy.nan, -numpy.nan, 0.0, -0.0, numpy.inf, -numpy.inf, 1e-45, -1e-300]
    x.reshape(-1)[:len(special)] = special
    dy = rng.standard_normal(x.shape).astype(dtype)
    dy.reshape(-1)[8:12] = [numpy.inf, -numpy.inf, numpy.nan, -2.0]
    x.reshape(-1)[8:12] = [0.0, 0.0, 3.0, -0.0]
    reference = _run(x, dy, monkeypatch, "0")
    compiled = _run(x, dy, monkeypatch, "1")
    for a, b in zip(reference, compiled):
        assert a.tobytes() == b.tobytes()
    y, dx = compiled
    assert y.tobytes() == numpy.abs(x).tobytes()
    flat_x, flat_dy, flat_dx = x.reshape(-1), dy.reshape(-1), dx.reshape(-1)
    assert flat_dx[0] == 0 and flat_dx[1] == 0          # NaN input: Caffe's sign is 0
    assert numpy.isnan(flat_dx[8]) and numpy.isnan(flat_dx[9])   # 0 * inf
    assert numpy.isnan(flat_dx[10])                     # 1 * NaN
    assert flat_dx[11] == 0 and numpy.signbit(flat_dx[11])   # +0 * -2 = -0, as Caffe
    rest = slice(12, None)
    numpy.testing.assert_array_equal(flat_dx[rest], numpy.sign(flat_x[rest]) * flat_dy[rest])
