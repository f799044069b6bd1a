"""compute_image_mean: the mean image of a Datum database as a BlobProto (Caffe's tool).

Sums in float32 record by record, as Caffe's BlobProto accumulation does, then divides by the
count; prints the per-channel mean values. Blocks of records are decoded on the data threads
(data/workers.py: every core unless CAFFECLI_DATA_THREADS says otherwise) and summed in key
order, so the mean is the same bits as one thread's.
"""
import click
import numpy

from .. import glog
from ..data import datum as datum_mod
from ..data import db as db_mod
from ..data import workers
from ..errors import CaffeError
from ..proto import caffe_pb2
from ..proto.io import write_binary
from ..util.paths import as_path
from ..util.progress import progress
from ._common import GflagsCommand


@click.command("compute_image_mean", cls=GflagsCommand,
               help="Compute the mean_image of a set of images given by a leveldb/lmdb.  "
                    "Usage: compute_image_mean [FLAGS] INPUT_DB [OUTPUT_FILE]")
@click.option("--backend", default="lmdb", show_default=True,
              help="The backend {leveldb, lmdb} containing the images")
@click.argument("input_db")
@click.argument("output_file", required=False)
def compute_image_mean(backend, input_db, output_file):
    run(input_db, output_file, backend)


def _decode(input_db, key, value):
    """(name, Datum, CxHxW array) of one record."""
    name = "%s record %s" % (input_db, key.decode("utf-8", "replace"))
    d = datum_mod.parse(value, name)
    return name, d, datum_mod.to_array(d, what=name)


def run(input_db, output_file=None, backend="lmdb"):
    """Returns the mean as a float32 CxHxW array (and writes it when ``output_file``)."""
    input_db = as_path(input_db)
    output_file = as_path(output_file) if output_file else output_file
    total, count, shape = None, 0, None
    bar = progress(None, "compute_image_mean")
    records = db_mod.iterate(input_db, backend)
    for _, (name, d, arr) in workers.in_order(lambda record: _decode(input_db, *record), records,
                                              workers.count(every_core=True)):
        if total is None:
            if d.encoded:
                glog.info("compute_image_mean.decoding", "Decoding Datum")
            shape = arr.shape
            total = numpy.zeros(shape, dtype=numpy.float32)
            glog.info("compute_image_mean.start", "Starting iteration")
        if arr.shape != shape:
            raise CaffeError("%s: incorrect data size %s (the first record is %s)"
                             % (name, "x".join(map(str, arr.shape)),
                                "x".join(map(str, shape))))
        numpy.add(total, arr, out=total)   # each value made float32, then added
        count += 1
        bar.update()
        if count % 10000 == 0:
            glog.info("compute_image_mean.processed", "Processed %d files." % count)
    bar.close()
    if count % 10000:
        glog.info("compute_image_mean.processed_all", "Processed %d files." % count)
    mean = total / numpy.float32(count)
    if output_file:
        glog.info("compute_image_mean.write_to", "Write to " + output_file)
        proto = caffe_pb2.BlobProto(num=1, channels=shape[0], height=shape[1], width=shape[2])
        proto.data.extend(mean.ravel().tolist())
        write_binary(output_file, proto)
    glog.info("compute_image_mean.channels", "Number of channels: %d" % shape[0])
    # float32 running sums over each channel's pixels (cumsum is sequential, as Caffe's loop)
    channel_sums = numpy.cumsum(mean.reshape(shape[0], -1), axis=1, dtype=numpy.float32)[:, -1]
    dim = numpy.float32(shape[1] * shape[2])
    for c in range(shape[0]):
        glog.info("compute_image_mean.mean_value", "mean_value channel [%d]: %s"
                  % (c, glog.fmt(float(channel_sums[c] / dim))))
    return mean
