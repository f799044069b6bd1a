"""Every layer's gradient check again in float32 (Caffe's GradientChecker runs both float and
double): stepsize 1e-2 and threshold 1e-3 as Caffe's own float tests use."""
import numpy
import pytest

from grad_specs import CASES
from gradcheck import check_gradient


@pytest.mark.parametrize("name,text,bottoms,kw", CASES, ids=[c[0] for c in CASES])
def test_gradient_float32(name, text, bottoms, kw):
    rs = numpy.random.RandomState(5)
    checked = check_gradient(text, [make(rs) for make in bottoms], dtype=numpy.float32, **kw)
    assert checked > 0
