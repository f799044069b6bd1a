"""CIFAR-10 quick trains from an LMDB made by ``convert_cifar_data``, as BVLC's
examples/cifar10 (create_cifar10.sh, then train_quick.sh) do, on a generated CIFAR-10 binary
folder whose classes are learnable (no real CIFAR-10 offline)."""
import os
import re
import shutil

import numpy

from data_helpers import write_cifar_batch
from test_cli import ROOT, run_cli


def learnable_images(labels, rs):
    """Class c: a muted colour and a stripe period of its own, plus noise (RGB, N x 32 x 32 x 3);
    muted enough that BVLC's lr 0.001 + momentum 0.9 does not overshoot on so easy a task."""
    colours = numpy.array([[200, 40, 40], [40, 200, 40], [40, 40, 200], [200, 200, 40],
                           [200, 40, 200], [40, 200, 200], [220, 220, 220], [30, 30, 30],
                           [120, 60, 200], [200, 120, 60]], dtype=float)
    rows = numpy.arange(32)[:, None]
    images = []
    for c in labels:
        stripes = ((rows // (2 + c % 5)) % 2) * 40.0 * (1 if c < 5 else -1)
        colour = 128 + 0.25 * (colours[c] - 128)
        img = colour[None, None, :] + 0.5 * stripes[:, :, None] + rs.normal(0, 10, (32, 32, 3))
        images.append(numpy.clip(img, 0, 255))
    return numpy.asarray(images, dtype=numpy.uint8)


def make_learnable_cifar(folder, per_file, seed=0):
    rs = numpy.random.RandomState(seed)
    os.makedirs(folder)
    for name in ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]:
        labels = rs.randint(0, 10, size=per_file)
        write_cifar_batch(os.path.join(folder, name), labels, learnable_images(labels, rs))


def test_cifar10_quick_trains_from_convert_cifar_data(tmp_path):
    make_learnable_cifar(str(tmp_path / "cifar-10-batches-bin"), per_file=100)
    # examples/cifar10/create_cifar10.sh, with our data/cifar10 folder (which must exist)
    os.makedirs(str(tmp_path / "data" / "cifar10"))
    made = run_cli(["convert_cifar_data", "cifar-10-batches-bin", "data/cifar10", "lmdb"],
                   tmp_path)
    assert made.exit_code == 0, made.output
    mean = run_cli(["compute_image_mean", "-backend=lmdb", "data/cifar10/cifar10_train_lmdb",
                    "data/cifar10/mean.binaryproto"], tmp_path)
    assert mean.exit_code == 0, mean.output
    # BVLC's cifar10_quick net unchanged but for the batch; a short schedule
    models = tmp_path / "models" / "cifar10_quick"
    shutil.copytree(os.path.join(ROOT, "models", "cifar10_quick"), models)
    net = models / "cifar10_quick_train_test.prototxt"
    net.write_text(net.read_text().replace("batch_size: 100", "batch_size: 50"))
    solver = models / "cifar10_quick_solver.prototxt"
    text = solver.read_text()
    for field, value in (("test_iter", 2), ("test_interval", 40), ("display", 5),
                         ("max_iter", 40), ("snapshot", 40)):
        text = re.sub(r"^%s: .*$" % field, "%s: %d" % (field, value), text, flags=re.M)
    solver.write_text(text + "random_seed: 1701\n")  # the same weights on every run
    result = run_cli(["train", "-solver", "models/cifar10_quick/cifar10_quick_solver.prototxt"],
                     tmp_path)
    assert result.exit_code == 0, result.output[-3000:]
    losses = [float(v) for v in re.findall(r"Iteration \d+ \(.*\), loss = (\S+)", result.stderr)]
    accuracy = [float(v) for v in re.findall(r"Test net output #0: accuracy = (\S+)",
                                            result.stderr)]
    assert len(losses) == 8 and 2.0 < losses[0] < 2.6  # about ln 10 at the start
    assert losses[-1] < 0.5 * losses[0], losses
    assert accuracy[-1] > 0.5, accuracy  # chance is 0.1
    assert (tmp_path / "data" / "cifar10" / "cifar10_quick_iter_40.caffemodel").exists()
