"""Golden cases whose every value is Caffe's own bit for bit on the host, not only within the
case's tolerance: layers whose arithmetic caffecli follows step by step (the C library's exp,
log and tanh, kernels/libm.py; the loss loops' order; the recurrent layers' step-by-step
shared gradients; AVE pooling's quotient rounded to the data's type)."""
import platform

import numpy
import pytest

from caffecli.kernels import jit

pytestmark = [
    pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed"),
    pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                       reason="Caffe's golden numbers used glibc's math functions")]

BIT_EXACT = ["tanh", "sigmoid", "exp", "log", "elu", "bnll", "swish", "lstmunit", "lstm", "rnn",
             "sigmoidce", "infogain", "multinomial", "pool"]


@pytest.mark.parametrize("family", BIT_EXACT)
def test_golden_cases_of_these_layers_are_caffes_bit_for_bit(family, monkeypatch):
    """Every value of these families' golden cases (forward, input and parameter gradients) is
    Caffe's to the bit on the host, not only within the case's tolerance."""
    import golden
    names = [n for n in golden.case_names() if n.split("__")[0] == family]
    if not names:
        golden.require_golden()
    compared = []

    def same_bits(got, want, rtol, atol, what):
        got = numpy.asarray(got, numpy.float32)
        want = numpy.asarray(want[()] if hasattr(want, "shape") else want, numpy.float32)
        assert ((got == want) | (numpy.isnan(got) & numpy.isnan(want))).all(), what
        compared.append(got.size)
    monkeypatch.setattr(golden, "assert_close", same_bits)
    for name in names:
        golden.run_layer_case(name)
    assert sum(compared) > 0
