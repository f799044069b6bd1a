"""Counter-based random numbers: element i of a draw is a hash (splitmix64) of the draw's key
and i, so numpy, cupy and the stand-in produce the same bits, on the device without a host
copy, and a run resumes exactly from the one key per draw taken from the rank's stream."""
import numpy

_GAMMA = numpy.uint64(0x9E3779B97F4A7C15)
_MIX1 = numpy.uint64(0xBF58476D1CE4E5B9)
_MIX2 = numpy.uint64(0x94D049BB133111EB)


def random_bits(xp, shape, key):
    """Uniform uint32 values of ``shape`` on ``xp``'s side for the 64-bit ``key`` (an int, or
    a 0-d uint64 array on that side: a captured graph's)."""
    n = 1
    for d in shape:
        n *= int(d)
    z = xp.arange(1, n + 1, dtype=numpy.uint64)
    z *= _GAMMA                                  # wraps modulo 2**64, as splitmix64 does
    z += numpy.uint64(key) if isinstance(key, int) else key
    z ^= z >> numpy.uint64(30)
    z *= _MIX1
    z ^= z >> numpy.uint64(27)
    z *= _MIX2
    z ^= z >> numpy.uint64(31)
    return (z >> numpy.uint64(32)).astype(numpy.uint32).reshape(tuple(shape))


def uint_threshold(probability):
    """The uint32 cut below which a draw has ``probability`` (Caffe's uint_thres_)."""
    return numpy.uint32(min(int(round(probability * 2.0 ** 32)), 2 ** 32 - 1))


def draw_key(stream):
    """A fresh 63-bit key from two words of a caffe_rng.Stream (one host draw per device
    draw)."""
    return ((stream.rand() << 32) | stream.rand()) & (2 ** 63 - 1)
