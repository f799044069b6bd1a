"""Writes tests/fixtures/caffe_rng/, what Caffe draws from seeded streams, for
tests/test_caffe_rng.py:

- boost.json: boost_draws.cpp's run (boost's mt19937 seeded 1701, then 200000 draws of each
  distribution Caffe calls, in float and double): per section the first values and the sha256
  of all of them.
- seeded.npz: every parameter and blob of the nets in seeded_nets.py, built by BVLC's pycaffe
  after caffe.set_random_seed(1234) in TRAIN, over three forward passes; the data layers read
  the inputs seeded_nets.write_inputs makes (the test makes them again).

    PYTHONPATH=<caffe>/python <caffe venv>/bin/python -m fidelity.seeded   # g++, boost headers
"""
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

from fidelity import writer  # noqa: F401  (BVLC's pycaffe before the repository's caffe)
import caffe  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "caffe_rng")
sys.path.insert(0, OUT)
import seeded_nets  # noqa: E402

SEED, COUNT = 1701, 200000


def boost_sections():
    """(name, dtype, count) of boost_draws.cpp's output, in order."""
    return [("word", np.uint32, 1), ("gaussian_f32", np.float32, COUNT),
            ("uniform_f32", np.float32, COUNT), ("bernoulli_f32", np.int32, COUNT),
            ("bernoulli_f64", np.int32, COUNT), ("gaussian_f64", np.float64, COUNT),
            ("uniform_f64", np.float64, COUNT), ("shuffle", np.int32, COUNT),
            ("last_word", np.uint32, 1)]


def boost_fixture():
    with tempfile.TemporaryDirectory() as tmp:
        exe, out = os.path.join(tmp, "draws"), os.path.join(tmp, "draws.bin")
        subprocess.run(["g++", "-O2", "-o", exe, os.path.join(ROOT, "fidelity",
                                                             "boost_draws.cpp")], check=True)
        subprocess.run([exe, str(SEED), str(COUNT), out], check=True)
        raw = open(out, "rb").read()
    found, offset = {"seed": SEED, "count": COUNT}, 0
    for name, dtype, n in boost_sections():
        values = np.frombuffer(raw, dtype, n, offset)
        offset += values.nbytes
        found[name] = {"head": values[:8].tolist(),
                       "sha256": hashlib.sha256(values.tobytes()).hexdigest()}
    with open(os.path.join(OUT, "boost.json"), "w") as f:
        json.dump(found, f, indent=1)


def caffe_fixture():
    os.chdir(tempfile.mkdtemp())
    seeded_nets.write_inputs("inputs")
    caffe.set_mode_cpu()
    arrays = {}
    for name, text in seeded_nets.NETS.items():
        with tempfile.NamedTemporaryFile("w", suffix=".prototxt", delete=False) as f:
            f.write(text)
        caffe.set_random_seed(1234)
        net = caffe.Net(f.name, caffe.TRAIN)
        os.unlink(f.name)
        for layer, blobs in net.params.items():
            for i, b in enumerate(blobs):
                arrays["%s/param/%s/%d" % (name, layer, i)] = b.data.copy()
        for blob in net.inputs:
            net.blobs[blob].data[...] = seeded_nets.input_values(net.blobs[blob].data.shape)
        for it in range(3):
            net.forward()
            for blob, b in net.blobs.items():
                arrays["%s/forward%d/%s" % (name, it, blob)] = b.data.copy()
    np.savez_compressed(os.path.join(OUT, "seeded.npz"), **arrays)


if __name__ == "__main__":
    boost_fixture()
    caffe_fixture()
    print("wrote", OUT)
