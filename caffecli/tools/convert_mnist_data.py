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


def run(image_file, label_file, db_path, backend="lmdb"):
    image_file, label_file, db_path = as_path(image_file), as_path(label_file), as_path(db_path)
    (num_items, rows, cols), pixels = read_idx(image_file, 2051, "image")
    (num_labels,), labels = read_idx(label_file, 2049, "label")
    if num_items != num_labels:
        raise CaffeError("%s has %d images but %s has %d labels"
                         % (image_file, num_items, label_file, num_labels))
    pixels = pixels.reshape(num_items, rows * cols)
    labels = labels.view(numpy.int8)   # Caffe reads the label as a (signed) char
    datum = caffe_pb2.Datum(channels=1, height=rows, width=cols)
    with db_mod.new_database(db_path, backend) as writer, \
            progress(num_items, "convert_mnist_data") as bar:
        glog.info("convert_mnist_data.items", "A total of %d items." % num_items)
        glog.info("convert_mnist_data.rows_cols", "Rows: %d Cols: %d" % (rows, cols))
        for item_id in range(num_items):
            datum.data = pixels[item_id].tobytes()
            datum.label = int(labels[item_id])
            writer.put("%08d" % item_id, datum.SerializeToString())
            if (item_id + 1) % 1000 == 0:
                writer.commit()
                bar.update(1000)
    glog.info("convert_mnist_data.processed", "Processed %d files." % num_items)
    return num_items
