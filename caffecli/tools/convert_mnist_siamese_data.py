"""convert_mnist_siamese_data: MNIST idx files -> a database of random image pairs (Caffe's
examples/siamese converter): N Datums of 2xRxC bytes, label 1 where both digits are the same.

Each pair is two draws of Caffe's global generator (``caffe_rng_rand() % N``), so the pairs
are Caffe's for the same seed; Caffe's binary is never seeded, ``--seed`` makes a run
repeatable.
"""
import click
import numpy

from ..caffe_rng import Stream
from ..proto import caffe_pb2
from ..util.paths import as_path
from ._common import GflagsCommand
from .convert_mnist_data import read_mnist, write_records


@click.command("convert_mnist_siamese_data", cls=GflagsCommand,
               help="Convert the MNIST dataset to the leveldb format used by caffe to train a "
                    "siamese network.  Usage: convert_mnist_siamese_data [FLAGS] "
                    "input_image_file input_label_file output_db_file")
@click.option("--backend", default="leveldb", show_default=True,
              help="The backend for storing the result (Caffe's example writes leveldb)")
@click.option("--seed", default=-1, show_default=True, type=int,
              help="Seed of Caffe's random generator that picks the pairs (negative: from "
                   "the system, as Caffe's example)")
@click.argument("image_file")
@click.argument("label_file")
@click.argument("db_path")
def convert_mnist_siamese_data(backend, seed, image_file, label_file, db_path):
    run(image_file, label_file, db_path, backend, seed)


def pairs(num_items, seed=-1):
    """The (first, second) indices of Caffe's N random pairs: word 2k and 2k+1 of its
    generator, each modulo N."""
    stream = Stream(seed) if seed >= 0 else Stream.unseeded()
    words = stream.words(2 * num_items).reshape(num_items, 2) % numpy.uint32(max(num_items, 1))
    return words[:, 0].astype(numpy.int64), words[:, 1].astype(numpy.int64)


def run(image_file, label_file, db_path, backend="leveldb", seed=-1):
    image_file, label_file, db_path = as_path(image_file), as_path(label_file), as_path(db_path)
    pixels, labels, rows, cols = read_mnist(image_file, label_file)
    first, second = pairs(len(labels), seed)
    same = labels[first] == labels[second]
    datum = caffe_pb2.Datum(channels=2, height=rows, width=cols)

    def records():
        for item_id, (i, j) in enumerate(zip(first, second)):
            datum.data = pixels[i].tobytes() + pixels[j].tobytes()
            datum.label = int(same[item_id])
            yield "%08d" % item_id, datum.SerializeToString()
    write_records(db_path, backend, "convert_mnist_siamese_data", len(labels), records(), [
        ("convert_mnist_siamese_data.items", "A total of %d items." % len(labels)),
        ("convert_mnist_siamese_data.rows_cols", "Rows: %d Cols: %d" % (rows, cols))],
        log_opened=False)   # the example opens its leveldb itself, without Caffe's db line
    return len(labels)
