"""Caffe's random numbers, value for value: caffe_rng against boost's own draws and BVLC
Caffe's seeded nets (tests/fixtures/caffe_rng, written by fidelity/seeded.py)."""
import hashlib
import json
import os
import sys

import numpy
import pytest

import caffecli
from caffecli import caffe_rng, context
from caffecli.kernels import jit
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from data_helpers import close_net, write_datum_db

FIXTURES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures", "caffe_rng")
sys.path.insert(0, FIXTURES)
import seeded_nets  # noqa: E402


def test_the_engine_is_mt19937():
    """The C++ standard's check: the 10000th word of mt19937 seeded 5489 is 4123659995."""
    stream = caffe_rng.Stream(5489)
    stream.skip(9999)
    assert stream.rand() == 4123659995
    a, b = caffe_rng.Stream(7), caffe_rng.Stream(7)
    assert b.peek(5).tolist() == a.words(5).tolist() == b.words(5).tolist()


@pytest.mark.skipif(not jit.INSTALLED, reason="numba is not installed")
def test_compiled_words_are_numpys_mt19937_with_its_state(monkeypatch):
    """The compiled generator's words and the state it leaves equal numpy's MT19937's, for
    runs that end before, at and after a twist of the 624-word key."""
    monkeypatch.setattr(caffe_rng, "COMPILED_MIN_WORDS", 1)   # every draw compiled
    ours, theirs = caffe_rng.Stream(99), caffe_rng.Stream(99)
    for n in (1, 622, 1, 624, 625, 1247, 3, 100000):
        assert ours.words(n).tolist() == theirs.bits.random_raw(n).tolist()
        mine, want = ours.state["state"], theirs.state["state"]
        assert mine["pos"] == want["pos"] and numpy.array_equal(mine["key"], want["key"])


def _sections(stream, count):
    """The draws of fidelity/boost_draws.cpp, in its order."""
    yield "word", numpy.array([stream.rand()], numpy.uint32)
    yield "gaussian_f32", stream.gaussian(count, 0.5, 2.0, numpy.float32)
    yield "uniform_f32", stream.uniform(count, -0.3, 0.7, numpy.float32)
    yield "bernoulli_f32", stream.bernoulli(count, 0.3, numpy.float32).astype(numpy.int32)
    yield "bernoulli_f64", stream.bernoulli(count, 1.0 - numpy.float32(0.5),
                                            numpy.float64).astype(numpy.int32)
    yield "gaussian_f64", stream.gaussian(count, -1.0, 0.25, numpy.float64)
    yield "uniform_f64", stream.uniform(count, -2.0, 3.0, numpy.float64)
    yield "shuffle", numpy.array(stream.shuffle(list(range(count))), numpy.int32)
    yield "last_word", numpy.array([stream.rand()], numpy.uint32)


@pytest.mark.parametrize("compiled", [True, False])
def test_draws_equal_boosts_to_the_bit(compiled, monkeypatch):
    """200000 draws of each distribution (normals through every slow path: the ziggurat's
    edges, its tail, the exponential's) equal boost 1.74's, compiled (every word drawn by the
    compiled generator) or not."""
    monkeypatch.setattr(caffe_rng, "COMPILED_MIN_WORDS", 1)
    if not compiled:
        monkeypatch.setenv("CAFFECLI_JIT", "0")
    elif not jit.INSTALLED:
        pytest.skip("numba is not installed")
    want = json.load(open(os.path.join(FIXTURES, "boost.json")))
    for name, values in _sections(caffe_rng.Stream(want["seed"]), want["count"]):
        assert values[:8].tolist() == want[name]["head"], name
        assert hashlib.sha256(values.tobytes()).hexdigest() == want[name]["sha256"], name


def test_compiled_and_reference_normals_agree_and_stop_at_a_draws_start():
    if not jit.INSTALLED:
        pytest.skip("numba is not installed")
    tables = (caffe_rng._NORMAL_X, caffe_rng._NORMAL_Y, caffe_rng._EXP_X, caffe_rng._EXP_Y)
    words = caffe_rng.Stream(3).words(60000)
    for dtype in (numpy.float32, numpy.float64):
        a, b = numpy.empty(20000, dtype), numpy.empty(20000, dtype)
        got_a = jit.kernel(caffe_rng._unit_normals)(words, a, *tables)
        got_b = caffe_rng._reference_normals(words, b, *tables)
        assert got_a == got_b and got_a[1] == 20000
        assert a.tobytes() == b.tobytes()
        # too few words: it stops where the draw it could not finish began
        short = numpy.empty(20000, dtype)
        used, made = jit.kernel(caffe_rng._unit_normals)(words[:500], short, *tables)
        assert made < 500 and used <= 500
        assert short[:made].tobytes() == a[:made].tobytes()


def test_glibc_rand_and_random_shuffle():
    """HDF5Data's std::random_shuffle draws from C's rand(): glibc's, seeded 1."""
    c = caffe_rng.CRand()
    assert [c.rand() for _ in range(5)] == [1804289383, 846930886, 1681692777, 1714636915,
                                            1957747793]
    items = c.random_shuffle(list(range(50)))      # then, as a C++ program does
    assert items[:10] == [3, 16, 20, 38, 42, 26, 21, 32, 18, 19]
    assert sorted(items) == list(range(50)) and c.rand() == 1911759956


@pytest.mark.parametrize("name", sorted(seeded_nets.NETS))
def test_seeded_nets_draw_what_caffe_draws(name, tmp_path, monkeypatch):
    """After set_random_seed, fills (every filler, sparse, shared and recurrent weights),
    dropout masks, DummyData refills, crops, mirrors and ImageData / HDF5Data shuffles give
    BVLC Caffe's numbers, pass after pass."""
    want = numpy.load(os.path.join(FIXTURES, "seeded.npz"))
    monkeypatch.chdir(tmp_path)
    seeded_nets.write_inputs("inputs", write_datums=lambda path, images, labels: write_datum_db(
        path, images, labels=labels))
    monkeypatch.setattr(caffe_rng, "c_rand", caffe_rng.CRand())   # a fresh process's rand()
    caffecli.set_random_seed(1234)
    net = caffecli.Net(parse_text(seeded_nets.NETS[name], caffe_pb2.NetParameter()),
                       caffecli.TRAIN, log=False)
    try:
        for layer, blobs in net.params.items():
            for i, b in enumerate(blobs):
                numpy.testing.assert_array_equal(b.data, want["%s/param/%s/%d" % (name, layer, i)])
        for blob in net.inputs:
            net.blobs[blob].data[...] = seeded_nets.input_values(net.blobs[blob].data.shape)
        for it in range(3):
            net.forward()
            for blob in net.blobs:
                key = "%s/forward%d/%s" % (name, it, blob)
                if key in want:
                    numpy.testing.assert_allclose(net.blobs[blob].data, want[key], rtol=1e-5,
                                                  atol=1e-6, err_msg=key)
    finally:
        close_net(net)


def test_an_unseeded_stream_differs_per_process_and_seeding_repeats(monkeypatch):
    monkeypatch.setattr(context, "_streams", {})
    assert not context.rng_seeded()
    a = context.rng().words(4).tolist()
    monkeypatch.setattr(context, "_streams", {})
    assert context.rng().words(4).tolist() != a
    context.set_random_seed(2 ** 32 + 9)       # Caffe's seed is an unsigned int
    assert context.rng_seeded() and context.rng().words(4).tolist() == \
        caffe_rng.Stream(9).words(4).tolist()
