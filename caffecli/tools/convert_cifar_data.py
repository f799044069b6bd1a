"""convert_cifar_data: CIFAR-10 binary batches -> cifar10_{train,test}_<db_type> databases.

Each record of ``data_batch_1..5.bin`` / ``test_batch.bin`` is 1 label byte and 3072 bytes of
R, G, B planes (32x32); keys are %05d of file_index * 10000 + item, as Caffe's example.
"""
import os

import click
import numpy

from .. import glog
from ..data import db as db_mod
from ..errors import CaffeError
from ..proto import caffe_pb2
from ..util.paths import as_path
from ..util.progress import progress

SIZE, IMAGE_BYTES, BATCH, TRAIN_BATCHES = 32, 3072, 10000, 5


def read_cifar_file(path):
    """(labels int8 array, images uint8 N x 3072) of one CIFAR-10 binary batch file."""
    if not os.path.isfile(path):
        raise CaffeError("%s: unable to open CIFAR-10 batch file" % path)
    raw = numpy.fromfile(path, dtype=numpy.uint8)
    if raw.size == 0 or raw.size % (IMAGE_BYTES + 1):
        raise CaffeError("%s: %d bytes is not a whole number of %d-byte CIFAR-10 records"
                         % (path, raw.size, IMAGE_BYTES + 1))
    records = raw.reshape(-1, IMAGE_BYTES + 1)
    if records.shape[0] > BATCH:
        raise CaffeError("%s: holds %d records, a CIFAR-10 batch has at most %d"
                         % (path, records.shape[0], BATCH))
    return records[:, 0].view(numpy.int8), records[:, 1:]


def _write(db_path, db_type, files, bar, announce, batch_lines):
    datum = caffe_pb2.Datum(channels=3, height=SIZE, width=SIZE)
    with db_mod.new_database(db_path, db_type) as writer:
        announce()
        for file_index, path in files:
            if batch_lines:
                glog.info("convert_cifar_data.batch", "Training Batch %d" % (file_index + 1))
            labels, images = read_cifar_file(path)
            for item, (label, image) in enumerate(zip(labels, images)):
                datum.label = int(label)
                datum.data = image.tobytes()
                writer.put("%05d" % (file_index * BATCH + item), datum.SerializeToString())
            bar.update(len(labels))


@click.command("convert_cifar_data",
               help="Convert the CIFAR-10 binary batches to the leveldb/lmdb format used by "
                    "Caffe.  Usage: convert_cifar_data input_folder output_folder db_type")
@click.argument("input_folder")
@click.argument("output_folder")
@click.argument("db_type")
def convert_cifar_data(input_folder, output_folder, db_type):
    run(input_folder, output_folder, db_type)


def run(input_folder, output_folder, db_type):
    """Write both databases; returns their paths (train, test)."""
    input_folder, output_folder = as_path(input_folder), as_path(output_folder)
    db_type = db_mod.backend_name(db_type)
    train = [(i, os.path.join(input_folder, "data_batch_%d.bin" % (i + 1)))
             for i in range(TRAIN_BATCHES)]
    test = [(0, os.path.join(input_folder, "test_batch.bin"))]
    for _, path in train + test:   # fail before writing anything
        if not os.path.isfile(path):
            raise CaffeError("%s: unable to open CIFAR-10 batch file" % path)
    out_train = os.path.join(output_folder, "cifar10_train_" + db_type)
    out_test = os.path.join(output_folder, "cifar10_test_" + db_type)
    with progress(None, "convert_cifar_data") as bar:
        _write(out_train, db_type, train, bar, batch_lines=True, announce=lambda: glog.info(
            "convert_cifar_data.train", "Writing Training data"))
        _write(out_test, db_type, test, bar, batch_lines=False, announce=lambda: glog.info(
            "convert_cifar_data.test", "Writing Testing data"))
    return out_train, out_test
