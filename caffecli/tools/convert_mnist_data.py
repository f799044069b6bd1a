"""convert_mnist_data: MNIST idx files -> an LMDB/LevelDB of 1xRxC byte Datums (keys %08d)."""
import os
import struct

import click
import numpy

from .. import glog
from ..data import db as db_mod
from ..errors import CaffeError
from ..proto import caffe_pb2
from ..util.paths import as_path
from ..util.progress import progress
from ._common import GflagsCommand


def read_idx(path, magic, what):
    """An idx file's header dims and its uint8 payload (big-endian header, as MNIST's)."""
    if not os.path.isfile(path):
        raise CaffeError("%s: unable to open %s file" % (path, what))
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8 or struct.unpack(">I", raw[:4])[0] != magic:
        raise CaffeError("%s: incorrect %s file magic (want %d)" % (path, what, magic))
    ndims = 3 if magic == 2051 else 1
    if len(raw) < 4 + 4 * ndims:
        raise CaffeError("%s: truncated %s file header" % (path, what))
    dims = struct.unpack(">%dI" % ndims, raw[4:4 + 4 * ndims])
    payload = numpy.frombuffer(raw, dtype=numpy.uint8, offset=4 + 4 * ndims)
    need = int(numpy.prod(dims))
    if payload.size < need:
        raise CaffeError("%s: %s file holds %d bytes of data, its header promises %d"
                         % (path, what, payload.size, need))
    return dims, payload[:need]


@click.command("convert_mnist_data", cls=GflagsCommand,
               help="Convert the MNIST dataset to the lmdb/leveldb format used by Caffe.  "
                    "Usage: convert_mnist_data [FLAGS] input_image_file input_label_file "
                    "output_db_file")
@click.option("--backend", default="lmdb", show_default=True,
              help="The backend for storing the result")
@click.argument("image_file")
@click.argument("label_file")
@click.argument("db_path")
def convert_mnist_data(backend, image_file, label_file, db_path):
    run(image_file, label_file, db_path, backend)


def read_mnist(image_file, label_file):
    """(pixels (N, rows * cols) uint8, labels int8, rows, cols) of MNIST's image and label idx
    files, which must hold as many items."""
    (num_items, rows, cols), pixels = read_idx(image_file, 2051, "image")
    (num_labels,), labels = read_idx(label_file, 2049, "label")
    if num_items != num_labels:
        raise CaffeError("%s has %d images but %s has %d labels"
                         % (image_file, num_items, label_file, num_labels))
    # Caffe reads the label as a (signed) char
    return pixels.reshape(num_items, rows * cols), labels.view(numpy.int8), rows, cols


def write_records(db_path, backend, tool, count, records, announce=(), log_opened=True):
    """Write ``count`` (key, value) ``records`` into a new database, committed every 1000 under
    a progress bar; ``announce`` holds (log line, message) pairs, logged once it is open (after
    Caffe's "Opened" line, unless ``log_opened`` is False)."""
    with db_mod.new_database(db_path, backend, log_opened) as writer, \
            progress(count, tool) as bar:
        for line, message in announce:
            glog.info(line, message)
        for done, (key, value) in enumerate(records, 1):
            writer.put(key, value)
            if done % 1000 == 0:
                writer.commit()
                bar.update(1000)


def run(image_file, label_file, db_path, backend="lmdb"):
    image_file, label_file, db_path = as_path(image_file), as_path(label_file), as_path(db_path)
    pixels, labels, rows, cols = read_mnist(image_file, label_file)
    datum = caffe_pb2.Datum(channels=1, height=rows, width=cols)

    def records():
        for item_id, (image, label) in enumerate(zip(pixels, labels)):
            datum.data = image.tobytes()
            datum.label = int(label)
            yield "%08d" % item_id, datum.SerializeToString()
    write_records(db_path, backend, "convert_mnist_data", len(labels), records(), [
        ("convert_mnist_data.items", "A total of %d items." % len(labels)),
        ("convert_mnist_data.rows_cols", "Rows: %d Cols: %d" % (rows, cols))])
    glog.info("convert_mnist_data.processed", "Processed %d files." % len(labels))
    return len(labels)
