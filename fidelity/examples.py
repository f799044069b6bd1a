"""BVLC's own example solvers (examples/mnist, siamese, cifar10 and models/), seeded, shortened
and trained by Caffe and by caffecli on synthetic data that Caffe's converters wrote, for
compare_logs.py to compare:

    python fidelity/examples.py OUT --caffe $CAFFE [--iterations 20]
    PATH=$CAFFE/build/tools:$PWD/.venv/bin:$PATH python fidelity/compare_logs.py OUT/cases/* \\
        -- train -solver solver.prototxt

$CAFFE is a BVLC Caffe checkout built in ``build/`` (its tools and example converters;
``--build`` names another folder). The data are random images whose brightness follows the
label, so that training moves:
MNIST's idx files (LMDB; the siamese pairs through caffecli's converter, seeded), CIFAR-10's
binary batches, and JPEGs of random sizes for the ImageNet models (resized to 256x256, mean
computed), whose batches are cut to 4 (train) and 2 (test). Each case's solver gets
``random_seed: 1``, CPU mode, ``--iterations`` iterations and a test halfway; the data
folders are linked into every case, not copied.
"""
import argparse
import glob
import os
import subprocess
import sys

import numpy
from google.protobuf import text_format
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from caffecli.proto import caffe_pb2  # noqa: E402

SOLVERS = ("examples/mnist/*solver*.prototxt", "examples/siamese/*solver*.prototxt",
           "examples/cifar10/*solver*.prototxt", "models/*/*solver*.prototxt")
BATCHES = {"256": "4", "32": "4", "50": "2"}   # ImageNet models' batch sizes -> small ones


def run(*command):
    subprocess.run([str(c) for c in command], check=True, capture_output=True,
                   env=dict(os.environ, GLOG_logtostderr="1"))


def write_idx(folder, prefix, images, labels):
    """MNIST's idx files (big-endian headers) for uint8 images (n, 28, 28) and labels."""
    n = len(labels)
    header = numpy.array([2051, n, 28, 28], ">u4").tobytes()
    with open(os.path.join(folder, prefix + "-images-idx3-ubyte"), "wb") as f:
        f.write(header + images.astype(numpy.uint8).tobytes())
    with open(os.path.join(folder, prefix + "-labels-idx1-ubyte"), "wb") as f:
        f.write(numpy.array([2049, n], ">u4").tobytes() + labels.astype(numpy.uint8).tobytes())


def labelled_noise(rs, n, shape, classes, spread):
    """n uint8 images of ``shape`` whose mean brightness rises with a random label."""
    labels = rs.randint(0, classes, n)
    base = (labels * (200 // classes) + 20).reshape((n,) + (1,) * len(shape))
    return numpy.clip(base + rs.normal(0, spread, (n,) + shape), 0, 255), labels


def mnist(data, build, rs):
    raw = os.path.join(data, "raw")
    os.makedirs(raw)
    for prefix, n in (("train", 6000), ("t10k", 1000)):
        write_idx(raw, prefix, *labelled_noise(rs, n, (28, 28), 10, 60))
    convert = os.path.join(build, "examples/mnist/convert_mnist_data.bin")
    for prefix, name in (("train", "train"), ("t10k", "test")):
        run(convert, "%s/%s-images-idx3-ubyte" % (raw, prefix),
            "%s/%s-labels-idx1-ubyte" % (raw, prefix), "%s/mnist_%s_lmdb" % (data, name),
            "--backend=lmdb")
        run(sys.executable, "-m", "caffecli", "convert_mnist_siamese_data",
            "%s/%s-images-idx3-ubyte" % (raw, prefix), "%s/%s-labels-idx1-ubyte" % (raw, prefix),
            "%s/mnist_siamese_%s_leveldb" % (data, name), "--seed=%d" % len(name))
    return {"examples/mnist": ["mnist_train_lmdb", "mnist_test_lmdb"],
            "examples/siamese": ["mnist_siamese_train_leveldb", "mnist_siamese_test_leveldb"]}


def cifar10(data, build, rs):
    raw = os.path.join(data, "cifar-10-batches-bin")
    os.makedirs(raw)
    for name in ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]:
        images, labels = labelled_noise(rs, 10000, (3072,), 10, 40)   # Caffe reads 10000 each
        records = numpy.concatenate([labels[:, None], images], axis=1).astype(numpy.uint8)
        records.tofile(os.path.join(raw, name))
    run(os.path.join(build, "examples/cifar10/convert_cifar_data.bin"), raw, data, "lmdb")
    run(os.path.join(build, "tools/compute_image_mean"), "-backend=lmdb",
        os.path.join(data, "cifar10_train_lmdb"), os.path.join(data, "mean.binaryproto"))
    return {"examples/cifar10": ["cifar10_train_lmdb", "cifar10_test_lmdb", "mean.binaryproto"]}


def imagenet(data, build, rs):
    """JPEGs of random sizes, 20 classes (finetune_flickr_style's), as lists, LMDBs and a mean."""
    images = os.path.join(data, "images")
    os.makedirs(images)
    lists = {"train": [], "val": []}
    for i in range(40):
        h, w = rs.randint(240, 320, 2)
        pixels, (label,) = labelled_noise(rs, 1, (h, w, 3), 20, 50)
        Image.fromarray(pixels[0].astype(numpy.uint8)).save(
            os.path.join(images, "%02d.jpg" % i), quality=90)
        lists["train" if i < 30 else "val"].append("%02d.jpg %d" % (i, label))
    tools = os.path.join(build, "tools")
    for split, names in lists.items():
        with open(os.path.join(data, split + ".txt"), "w") as f:
            f.write("\n".join(names) + "\n")
        with open(os.path.join(data, "flickr_%s.txt" % split), "w") as f:
            f.write("".join("data/flickr_style/images/%s\n" % n for n in names))
        run(os.path.join(tools, "convert_imageset"), "--resize_height=256", "--resize_width=256",
            images + "/", os.path.join(data, split + ".txt"),
            os.path.join(data, "ilsvrc12_%s_lmdb" % split))
    run(os.path.join(tools, "compute_image_mean"), os.path.join(data, "ilsvrc12_train_lmdb"),
        os.path.join(data, "imagenet_mean.binaryproto"))
    return {"examples/imagenet": ["ilsvrc12_train_lmdb", "ilsvrc12_val_lmdb"],
            "data/ilsvrc12": ["imagenet_mean.binaryproto"],
            "data/flickr_style": ["images", ("flickr_train.txt", "train.txt"),
                                  ("flickr_val.txt", "test.txt")]}


def small_batches(text):
    for big, small in BATCHES.items():
        text = text.replace("batch_size: %s\n" % big, "batch_size: %s\n" % small)
    return text


def make_case(case, caffe, solver_path, links, iterations):
    """A case folder: the example's prototxts, the data linked, a seeded short solver."""
    for tree in ("examples", "models"):
        for path in glob.glob(os.path.join(caffe, tree, "*", "*.prototxt")):
            rel = os.path.relpath(path, caffe)
            os.makedirs(os.path.join(case, os.path.dirname(rel)), exist_ok=True)
            with open(path) as f:
                text = f.read()
            with open(os.path.join(case, rel), "w") as f:
                f.write(small_batches(text) if tree == "models" else text)
    for folder, entries in links.items():
        os.makedirs(os.path.join(case, folder), exist_ok=True)
        for entry in entries:
            source, name = entry if isinstance(entry, tuple) else (entry, entry)
            os.symlink(source, os.path.join(case, folder, name))
    solver = caffe_pb2.SolverParameter()
    with open(solver_path) as f:
        text_format.Merge(f.read(), solver)
    solver.random_seed = 1
    solver.solver_mode = caffe_pb2.SolverParameter.CPU
    solver.max_iter = iterations
    solver.display = max(1, iterations // 5)
    if solver.test_interval:
        solver.test_interval = max(1, iterations // 2)
    for i in range(len(solver.test_iter)):
        solver.test_iter[i] = 5
    if solver.snapshot:
        solver.snapshot = max(1, iterations // 2)
    with open(os.path.join(case, "solver.prototxt"), "w") as f:
        f.write(text_format.MessageToString(solver))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--caffe", required=True, help="BVLC Caffe checkout, built in build/")
    parser.add_argument("--build", help="its build folder (default: $CAFFE/build)")
    parser.add_argument("--iterations", type=int, default=20)
    args = parser.parse_args(argv)
    caffe, out = os.path.abspath(args.caffe), os.path.abspath(args.out)
    build = os.path.abspath(args.build or os.path.join(caffe, "build"))
    rs = numpy.random.RandomState(1)
    links = {}
    for make in (mnist, cifar10, imagenet):
        data = os.path.join(out, "data", make.__name__)
        os.makedirs(data)
        for folder, entries in make(data, build, rs).items():
            links.setdefault(folder, []).extend(
                (os.path.join(data, e[0]), e[1]) if isinstance(e, tuple)
                else (os.path.join(data, e), e) for e in entries)
    for pattern in SOLVERS:
        for path in sorted(glob.glob(os.path.join(caffe, pattern))):
            rel = os.path.relpath(path, caffe)
            case = os.path.join(out, "cases", rel.replace("/", "__")[:-len(".prototxt")])
            make_case(case, caffe, path, links, args.iterations)
            print(case)


if __name__ == "__main__":
    main()
