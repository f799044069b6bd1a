"""extract_features: run a trained net over its data layer and store chosen blobs as float
Datums in new databases (Caffe's tools/extract_features.cpp; keys %010d)."""
import click
import numpy

from .. import context, glog
from ..data import db as db_mod
from ..errors import CaffeError
from ..net import Net
from ..proto import caffe_pb2
from ..util.paths import as_path
from ..util.progress import progress


@click.command("extract_features",
               context_settings={"ignore_unknown_options": True},
               help="Extract features of the input data produced by a trained net.  Usage: "
                    "extract_features pretrained_net_param feature_extraction_proto_file "
                    "extract_feature_blob_name1[,name2,...] "
                    "save_feature_dataset_name1[,name2,...] num_mini_batches db_type "
                    "[CPU/GPU] [DEVICE_ID=0]")
@click.argument("pretrained_net_param")
@click.argument("feature_extraction_proto")
@click.argument("blob_names")
@click.argument("dataset_names")
@click.argument("num_mini_batches", type=int)
@click.argument("db_type")
@click.argument("mode", required=False, default="CPU")
@click.argument("device_id", required=False, type=int, default=0)
def extract_features(pretrained_net_param, feature_extraction_proto, blob_names,
                     dataset_names, num_mini_batches, db_type, mode, device_id):
    if mode == "GPU":
        if device_id < 0:
            raise CaffeError("DEVICE_ID must be >= 0, got %d" % device_id)
        glog.error("extract_features.using_gpu", "Using GPU")
        glog.error("extract_features.device", "Using Device_id=%d" % device_id)
        context.set_device(device_id)
        context.set_mode_gpu()
    else:
        glog.error("extract_features.using_cpu", "Using CPU")
        context.set_mode_cpu()
    run(pretrained_net_param, feature_extraction_proto, blob_names.split(","),
        dataset_names.split(","), num_mini_batches, db_type)


def run(weights, proto, blob_names, dataset_names, num_mini_batches, db_type):
    """Returns the number of records written per feature."""
    dataset_names = [as_path(n) for n in dataset_names]
    if len(blob_names) != len(dataset_names):
        raise CaffeError("the number of blob names (%d) and dataset names (%d) must be equal"
                         % (len(blob_names), len(dataset_names)))
    net = Net(proto, caffe_pb2.TEST)
    net.copy_trained_layers_from(weights)
    for name in blob_names:
        if not net.has_blob(name):
            raise CaffeError("Unknown feature blob name %s in the network %s" % (name, proto))
    dbs = [db_mod.new_database(name, db_type) for name in dataset_names]   # checked first
    writers = []
    for name, d in zip(dataset_names, dbs):
        glog.info("extract_features.opening", "Opening dataset " + name)
        writers.append(d.__enter__())
    glog.error("extract_features.start", "Extracting Features")
    counts = [0] * len(blob_names)
    ok = False
    try:
        with progress(num_mini_batches, "extract_features") as bar:
            for _ in range(num_mini_batches):
                net.forward_pass()
                for i, name in enumerate(blob_names):
                    _write_blob(net.blob_by_name(name), writers[i], counts, i, name)
                bar.update()
        ok = True
    finally:
        for d in dbs:
            d.__exit__(None if ok else CaffeError, None, None)
    for i, name in enumerate(blob_names):
        glog.error("extract_features.extracted_all", "Extracted features of %d query images for "
                   "feature blob %s" % (counts[i], name))
    glog.error("extract_features.done", "Successfully extracted the features!")
    return counts[0] if counts else 0


def _write_blob(blob, writer, counts, i, name):
    data = numpy.asarray(blob.cpu_data(), dtype=numpy.float32)
    n = blob.shape[0] if blob.num_axes else 1
    rows = data.reshape(n, -1)
    shape = (blob.channels, blob.height, blob.width)
    for row in rows:
        d = caffe_pb2.Datum(channels=shape[0], height=shape[1], width=shape[2])
        d.float_data.extend(row.tolist())
        writer.put("%010d" % counts[i], d.SerializeToString())
        counts[i] += 1
        if counts[i] % 1000 == 0:
            writer.commit()
            glog.error("extract_features.extracted", "Extracted features of %d query images "
                       "for feature blob %s" % (counts[i], name))
