"""C's math where Caffe relies on it: pow in double (nan for a negative base and a fractional
exponent, inf on overflow, where Python raises)."""
import numpy


def c_pow(a, b):
    with numpy.errstate(all="ignore"):
        return float(numpy.power(numpy.float64(a), numpy.float64(b)))
