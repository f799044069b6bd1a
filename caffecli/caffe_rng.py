"""Caffe's random numbers, value for value: the boost::mt19937 behind each Caffe::RNG, and
boost 1.74's distributions as math_functions.cpp draws through it (uniform_real, normal and
its exponential tail by ziggurat, bernoulli, uniform_int for caffe::shuffle).

numpy's MT19937, seeded as boost seeds it (init_genrand), gives the same 32-bit words; the
distributions below turn words into values with boost's arithmetic in the value's own
precision, so a seeded run fills, drops out and crops as a seeded Caffe run does (CPU mode:
Caffe's GPU mode draws from cuRAND instead). A stream holds no words ahead: a draw whose
word count depends on the words (the normal's rejections) reads them ahead, then skips
exactly the ones it used, so a stream's state is always mt19937's.
"""
import numpy

from .kernels import jit
from .util import ziggurat

_NORMAL_X, _NORMAL_Y = numpy.array(ziggurat.NORMAL_X), numpy.array(ziggurat.NORMAL_Y)
_EXP_X, _EXP_Y = numpy.array(ziggurat.EXPONENTIAL_X), numpy.array(ziggurat.EXPONENTIAL_Y)
_MT_SIZE = 624
_CHUNK = 1 << 20  # values drawn per pass: the words of a pass stay in cache
COMPILED_MIN_WORDS = 1 << 16  # words a draw at least for the compiled generator: it reads and
                              # sets numpy's state (90 + 77 us), which fewer words do not repay


def _init_genrand(seed):
    """mt19937's key for a 32-bit seed (boost's and std's seed(value)): numpy's legacy
    seeding of an integer is that same init_genrand."""
    return numpy.random.RandomState(seed & 0xFFFFFFFF).get_state()[1]


def _twisted(word, following, distant):
    """mt19937's twist of one key word, from the next one and the one 397 ahead."""
    y = (numpy.int64(word) & 0x80000000) | (numpy.int64(following) & 0x7FFFFFFF)
    mixed = numpy.int64(distant) ^ (y >> 1)
    return mixed ^ 0x9908B0DF if y & 1 else mixed


def _mt19937(key, pos, out):
    """mt19937's next out.size words into out: from its key (624 words, twisted in place when
    used up) at ``pos``, each tempered; returns the position after (numpy's MT19937 and
    boost's, word for word)."""
    n = 0
    while n < out.size:
        if pos >= 624:   # the twist, in the three runs of its indices (each vectorizes)
            for i in range(227):
                key[i] = _twisted(key[i], key[i + 1], key[i + 397])
            for i in range(227, 623):
                key[i] = _twisted(key[i], key[i + 1], key[i - 227])
            key[623] = _twisted(key[623], key[0], key[396])
            pos = 0
        take = min(624 - pos, out.size - n)
        for j in range(take):
            y = numpy.int64(key[pos + j])
            y ^= y >> 11
            y ^= (y << 7) & 0x9D2C5680
            y ^= (y << 15) & 0xEFC60000
            y ^= y >> 18
            out[n + j] = y
        pos += take
        n += take
    return pos


class Stream:
    """One Caffe::RNG: mt19937 seeded with a 32-bit seed."""

    def __init__(self, seed):
        self.bits = numpy.random.MT19937()
        self.bits.state = {"bit_generator": "MT19937",
                           "state": {"key": _init_genrand(int(seed)), "pos": _MT_SIZE}}

    @classmethod
    def unseeded(cls):
        """A stream seeded from the system's entropy (Caffe's cluster_seedgen)."""
        return cls(int(numpy.random.SeedSequence().generate_state(1)[0]))

    @property
    def state(self):
        return self.bits.state

    @state.setter
    def state(self, value):
        self.bits.state = value

    def words(self, n):
        """The next ``n`` words (uint32), consumed: from ``COMPILED_MIN_WORDS`` on compiled
        (``_mt19937``: 6.5 -> 1.7 ns a word, numpy's random_raw calling its generator once a
        word), else numpy's."""
        if n < COMPILED_MIN_WORDS or not jit.usable():
            return self.bits.random_raw(int(n)).astype(numpy.uint32)
        state = self.bits.state["state"]
        key, out = state["key"].astype(numpy.uint32), numpy.empty(int(n), numpy.uint32)
        pos = jit.kernel(_mt19937)(key, int(state["pos"]), out)
        self.bits.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": pos}}
        return out

    def peek(self, n):
        """The next ``n`` words, left in the stream."""
        state = self.bits.state
        try:
            return self.words(n)
        finally:
            self.bits.state = state

    def skip(self, n):
        while n > 0:
            k = min(n, _CHUNK)
            self.words(k)
            n -= k

    def rand(self):
        """caffe_rng_rand(): one word."""
        return int(self.bits.random_raw())

    def child(self):
        """``new Caffe::RNG(caffe_rng_rand())``: a stream seeded by this one's next word."""
        return Stream(self.rand())

    def uniform(self, n, a, b, dtype=numpy.float32):
        """caffe_rng_uniform: n values in [a, b] (boost's uniform_real on [a, nextafter(b))):
        word / 2^32 * (max - min) + min in the value's precision, a value that rounds to the
        top refused (its word skipped)."""
        t = numpy.dtype(dtype).type
        low, top = t(a), numpy.nextafter(t(b), numpy.finfo(t).max)
        span = t(top - low)
        out = numpy.empty(int(n), t)
        filled = 0
        while filled < len(out):     # a refused word is skipped: the words read are the used
            need = min(len(out) - filled, _CHUNK)
            values = self.words(need).astype(t) * t(2.0 ** -32) * span + low
            if (values >= top).any():
                values = values[values < top]
            out[filled:filled + len(values)] = values
            filled += len(values)
        return out

    def bernoulli(self, n, p, dtype=numpy.float32):
        """caffe_rng_bernoulli with a probability of type ``dtype``: word <= p * (2^32 - 1) in
        that precision; p == 0 draws nothing."""
        t = numpy.dtype(dtype).type
        p = t(p)
        out = numpy.zeros(int(n), bool)
        if p != 0:
            for k in range(0, len(out), _CHUNK):
                part = out[k:k + _CHUNK]
                part[...] = self.words(len(part)).astype(t) <= p * t(4294967295.0)
        return out

    def gaussian(self, n, mean, sigma, dtype=numpy.float32):
        """caffe_rng_gaussian: n values of boost's normal_distribution(mean, sigma)."""
        t = numpy.dtype(dtype).type
        out = numpy.empty(int(n), t)
        per_draw = 2 if out.itemsize == 8 else 1
        unit_normals = jit.kernel(_unit_normals) if jit.usable(out) else _reference_normals
        filled, spare = 0, 64
        while filled < len(out):
            words = self.peek(min(len(out) - filled, _CHUNK) * per_draw + spare)
            part = out[filled:filled + _CHUNK]
            used, got = unit_normals(words, part, _NORMAL_X, _NORMAL_Y, _EXP_X, _EXP_Y)
            self.skip(used)
            part = part[:got]
            part *= t(sigma)      # boost: unit * sigma + mean, each rounded
            part += t(mean)
            filled += got
            spare = spare * 2 if got == 0 else 64   # the words ran out inside one draw
        return out

    def uniform_int(self, low, high):
        """boost's uniform_int(low, high) for a span below 2^32 (caffe::shuffle's draws)."""
        span = high - low
        if span == 0:
            return low
        bucket = 0xFFFFFFFF // (span + 1)
        if 0xFFFFFFFF % (span + 1) == span:
            bucket += 1
        while True:
            value = self.rand() // bucket
            if value <= span:
                return low + value

    def shuffle(self, items):
        """caffe::shuffle: Fisher-Yates from the back, in place."""
        for i in range(len(items) - 1, 0, -1):
            j = self.uniform_int(0, i)
            items[i], items[j] = items[j], items[i]
        return items


class CRand:
    """C's rand() as glibc makes it (additive feedback, r[i] = r[i-31] + r[i-3], seeded 1
    unless srand is called): Caffe's HDF5Data shuffles with std::random_shuffle, which draws
    from it, not from Caffe's stream. One per process, as C's is."""

    def __init__(self, seed=1):
        self.srand(seed)

    def srand(self, seed):
        """Start over from ``seed`` as glibc's srand does (0 counts as 1)."""
        word = seed or 1
        r = [word]
        for _ in range(1, 31):
            hi, lo = divmod(word, 127773)
            word = 16807 * lo - 2836 * hi
            if word < 0:
                word += 2147483647
            r.append(word)
        r += r[:3]
        self.state = r[-34:]
        for _ in range(310):         # glibc discards the first 310 outputs
            self.rand()

    def rand(self):
        r = self.state
        word = (r[-31] + r[-3]) & 0xFFFFFFFF
        r.append(word)
        del r[0]
        return word >> 1

    def random_shuffle(self, items):
        """libstdc++'s std::random_shuffle: element i swaps with rand() % (i + 1), from the
        front."""
        for i in range(1, len(items)):
            j = self.rand() % (i + 1)
            if i != j:
                items[i], items[j] = items[j], items[i]
        return items


c_rand = CRand()


def _unit_normals(words, out, nx, ny, ex, ey):
    """out[k] = boost's unit normal drawn from ``words``, for k from 0, in out's precision
    (float32: one word per try, float64: two). Returns (words used, values made): it stops at
    the start of a draw the words run out in.

    A try is a ziggurat step: layer and sign from the word's low byte, a point in the layer,
    accepted inside the layer's rectangle, else tested against the curve with a uniform_01
    draw. Stage 0 is the normal (128 layers); its base layer's overflow is the tail, drawn
    as in boost by two exponentials (stages 1 and 2, 256 layers, whose own base layer shifts
    the value by r and tries again) until 2 e1 > e0^2."""
    t = out.dtype.type
    two_words = out.itemsize == 8
    refused = 4294967296 if two_words else 4294967168   # words uniform_01 rounds to 1
    nw = words.shape[0]
    p = 0
    o = 0
    while o < out.shape[0]:
        start = p
        stage = 0
        sign = t(1.0)
        tail = t(nx[1])
        shift = t(0.0)
        e0 = t(0.0)
        while True:
            if p + 2 > nw:
                return start, o
            u = words[p]          # boost's generate_int_float_pair<RealType, 8>
            p += 1
            r = t(u >> 8) * t(1.0 / 16777216.0)
            if two_words:
                r = (r + t(words[p] & 536870911)) * t(1.0 / 536870912.0)
                p += 1
            if stage == 0:
                i = (u & 255) >> 1
                sign = t(1.0) if u & 1 else t(-1.0)
                xi, xn, yi, yn = nx[i], nx[i + 1], ny[i], ny[i + 1]
                x = r * t(xi)
                inside = x < xn                        # against the double, as boost's normal
            else:
                i = u & 255
                xi, xn, yi, yn = ex[i], ex[i + 1], ey[i], ey[i + 1]
                x = r * t(xi)
                inside = x < t(xn)                     # against the float, as its exponential
            if not inside:
                if i == 0:
                    if stage == 0:
                        stage = 1                      # the normal's tail
                    else:
                        shift += t(ex[1])              # the exponential's: shifted, again
                    continue
                while p < nw and words[p] >= refused:  # uniform_01
                    p += 1
                if p >= nw:
                    return start, o
                y01 = t(words[p]) * t(1.0 / 4294967296.0)
                p += 1
                y = t(yi) + y01 * t(yn - yi)
                along = t(xi - xn) * y01 - (t(xi) - x)
                if stage == 0:
                    tangent = y - (t(yi) + (t(xi) - x) * t(yi) * t(xi))
                    curve = numpy.exp(-(x * x / t(2.0)))
                    if xi >= 1:        # convex: the tangent bounds from below, the chord above
                        upper, lower = along, tangent
                    else:
                        upper, lower = tangent, along
                else:
                    upper = along
                    lower = y - (t(yn) + (t(xn) - x) * t(yn))
                    curve = numpy.exp(-x)
                if not (upper < 0 and (lower < 0 or y < curve)):
                    continue
            if stage == 0:
                out[o] = x * sign
                break
            if stage == 1:
                e0 = (shift + x) / tail
                stage, shift = 2, t(0.0)
                continue
            if t(2.0) * (shift + x) > e0 * e0:
                out[o] = (e0 + tail) * sign
                break
            stage, shift = 1, t(0.0)
        o += 1
    return p, o


def _reference_normals(words, out, nx, ny, ex, ey):
    """_unit_normals without the compiler: each run of draws that the first layer test accepts
    is made at once with numpy, the others one by one by _unit_normals itself."""
    t = out.dtype.type
    per_draw = 2 if out.itemsize == 8 else 1
    nx_t = nx.astype(t)
    p = o = 0
    while o < len(out):
        tries = min(len(out) - o, (len(words) - p) // per_draw - 1, 1024)
        if tries <= 0:
            return p, o
        first = words[p:p + tries * per_draw:per_draw]
        bucket = first & 255
        r = (first >> 8).astype(t) * t(1.0 / 16777216.0)
        if per_draw == 2:
            r = (r + (words[p + 1:p + tries * 2:2] & 536870911).astype(t)) * t(1.0 / 536870912.0)
        i = bucket >> 1
        x = r * nx_t[i]
        fast = x < nx[i + 1]
        k = tries if fast.all() else int(numpy.argmin(fast))
        out[o:o + k] = numpy.where(bucket[:k] & 1, x[:k], -x[:k])
        o, p = o + k, p + k * per_draw
        if k < tries:
            used, got = _unit_normals(words[p:], out[o:o + 1], nx, ny, ex, ey)
            if got == 0:
                return p, o
            o, p = o + 1, p + used
    return p, o
