"""Dropout in TRAIN with the compiled passes (kernels/dropout_jit.py) against the array code:
the same mask, top and bottom diff bit for bit, the same words taken from the stream, in place
or not, split across threads or not, float32 and float64."""
import numpy
import pytest

from caffecli import caffe_rng, context
from caffecli.blob import Blob
from caffecli.kernels import jit, threads
from gradcheck import make_layer

pytestmark = pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")


@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64])
@pytest.mark.parametrize("in_place", [False, True])
@pytest.mark.parametrize("ratio", [0.5, 0.0, 0.9])
def test_dropout_compiled_is_the_array_code(dtype, in_place, ratio, monkeypatch):
    rng = numpy.random.default_rng(5)
    x = rng.standard_normal((4, 3, 11, 5)).astype(dtype)
    x.reshape(-1)[:4] = [numpy.inf, -numpy.inf, numpy.nan, -0.0]
    dy = rng.standard_normal(x.shape).astype(dtype)
    monkeypatch.setattr(jit, "PASS_MIN_PART", 1)           # split even this small blob
    monkeypatch.setattr(threads, "MIN_PART_ELEMENTS", 1)
    monkeypatch.setattr(caffe_rng, "COMPILED_MIN_WORDS", 1)  # the compiled words (with numba)
    results = []
    for jit_on in ("0", "1"):
        monkeypatch.setenv("CAFFECLI_JIT", jit_on)
        context.set_random_seed(11)
        layer = make_layer('type: "Dropout" dropout_param { dropout_ratio: %g }' % ratio)
        bottom = Blob(x.shape, dtype)
        top = bottom if in_place else Blob(dtype=dtype)
        layer.SetUp([bottom], [top])
        bottom.data[...] = x
        with numpy.errstate(invalid="ignore"):   # inf * 0, as Caffe's
            layer.Forward([bottom], [top])
        y = top.data.copy()
        top.diff[...] = dy
        layer.Backward([top], [True], [bottom])
        results.append((y, bottom.diff.copy(), layer.mask.copy(), context.rng().rand()))
    (y0, dx0, m0, next0), (y1, dx1, m1, next1) = results
    assert y0.tobytes() == y1.tobytes() and dx0.tobytes() == dx1.tobytes()
    assert m0.tobytes() == m1.tobytes() and next0 == next1   # the same words were taken
    kept = m1.reshape(-1)[4:]
    if ratio:
        assert 0 < kept.mean() < 1
    else:
        assert kept.all()
