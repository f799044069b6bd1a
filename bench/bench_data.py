"""Data layer batch rate: an ImageNet-style Data layer (crop 227 of 256, mirror, mean file,
TRAIN) on a raw and an encoded LMDB, with 1 and more data threads (data/workers.py), against
PyTorch doing the same transform on the same decoded images, in the same run.

    python3 bench/bench_data.py [--images 256] [--batch 64] [--rounds 7] [--threads 1,2]

One data thread is Caffe's way (one InternalThread a layer). The PyTorch peer reads the same
records with the same OpenCV decode, then crops, mirrors, subtracts the mean and scales with
torch ops on torch's threads (set to the largest data thread count). The images are smooth
random pictures written as JPEG (quality 90) once, in a temporary folder.
"""
import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from caffecli import Net, glog, set_random_seed  # noqa: E402
from caffecli.data import datum as datum_mod  # noqa: E402
from caffecli.data import db as db_mod  # noqa: E402
from caffecli.data import image_io  # noqa: E402
from caffecli.proto import caffe_pb2  # noqa: E402
from caffecli.data.transformer import load_mean_file  # noqa: E402
from caffecli.proto.io import parse_text, write_binary  # noqa: E402
from bench_cpu import machine  # noqa: E402

NET = """name: "data" layer { name: "data" type: "Data" top: "data" top: "label"
  include { phase: TRAIN }
  transform_param { mirror: true crop_size: 227 mean_file: "%s" }
  data_param { source: "%s" backend: LMDB batch_size: %d } }"""


def write_dbs(folder, count):
    """A raw and an encoded LMDB of ``count`` 256x256 colour images, and their mean file."""
    import cv2
    rng = numpy.random.default_rng(0)
    paths = {kind: os.path.join(folder, kind) for kind in ("raw", "encoded")}
    total = numpy.zeros((3, 256, 256))
    with db_mod.open_writer(paths["raw"], "lmdb") as raw, \
            db_mod.open_writer(paths["encoded"], "lmdb") as enc:
        for i in range(count):
            small = rng.integers(0, 256, (12, 12, 3), dtype=numpy.uint8)
            img = cv2.resize(small, (256, 256), interpolation=cv2.INTER_CUBIC)
            jpeg = image_io.encode(img, "jpg")
            img = image_io.decode(jpeg, image_io.COLOR)   # the raw DB holds the same pixels
            chw = image_io.to_chw(img)
            total += chw
            key = "%08d" % i
            raw.put(key, datum_mod.from_image(img, i % 1000).SerializeToString())
            enc.put(key, datum_mod.from_encoded(jpeg, i % 1000).SerializeToString())
    mean = caffe_pb2.BlobProto(num=1, channels=3, height=256, width=256)
    mean.data.extend((total / count).astype(numpy.float32).ravel().tolist())
    paths["mean"] = os.path.join(folder, "mean.binaryproto")
    write_binary(paths["mean"], mean)
    return paths


def caffecli_batches(paths, kind, batch, threads, rounds):
    """ms per batch (medians of ``rounds``) of the Data layer's source with that many threads."""
    os.environ["CAFFECLI_DATA_THREADS"] = str(threads)
    set_random_seed(1)
    net = Net(parse_text(NET % (paths["mean"], paths[kind], batch), caffe_pb2.NetParameter()),
              caffe_pb2.TRAIN, log=False)
    layer = net.layers[0]
    layer.prefetcher.stop()      # timed on this thread, one batch after another
    source = layer.source
    source.next_batch()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        source.next_batch()
        times.append(time.perf_counter() - start)
    layer.close()
    return 1e3 * statistics.median(times)


def torch_batches(paths, kind, batch, threads, rounds):
    """ms per batch of the same records decoded alike and transformed with torch ops."""
    import torch
    torch.set_num_threads(threads)
    mean = torch.from_numpy(load_mean_file(paths["mean"]))
    gen = torch.Generator().manual_seed(1)
    values = [v for _, v in db_mod.iterate(paths[kind], "lmdb")]

    def one_batch(first):
        items = []
        for j in range(batch):
            arr = datum_mod.to_array(datum_mod.parse(values[(first + j) % len(values)]))
            items.append(torch.from_numpy(numpy.array(arr)))   # a writable copy
        x = torch.stack(items).float()
        offsets = torch.randint(0, 30, (batch, 2), generator=gen)
        flips = torch.randint(0, 2, (batch,), generator=gen)
        out = torch.empty(batch, 3, 227, 227)
        for j in range(batch):
            h, w = int(offsets[j, 0]), int(offsets[j, 1])
            crop = x[j, :, h:h + 227, w:w + 227] - mean[:, h:h + 227, w:w + 227]
            out[j] = crop.flip(-1) if flips[j] else crop
        return out

    one_batch(0)
    times = []
    for r in range(rounds):
        start = time.perf_counter()
        one_batch(r * batch)
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--threads", default="1,2", help="data thread counts, comma-separated")
    args = ap.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    glog.set_min_level(2)   # the layers' set-up lines would bury the table
    try:
        import torch
        version = "torch %s" % torch.__version__
    except ImportError:
        torch, version = None, "no torch (pip install torch for the peer)"
    print("machine: %s, %d cores; %s" % (machine() + (version,)))
    print("Data layer, TRAIN, crop 227 of 256, mirror, mean file; ms per batch of %d, "
          "medians of %d" % (args.batch, args.rounds))
    with tempfile.TemporaryDirectory() as folder:
        paths = write_dbs(folder, args.images)
        for kind in ("raw", "encoded"):
            peer = torch_batches(paths, kind, args.batch, max(counts), args.rounds) \
                if torch else None
            for t in counts:
                ms = caffecli_batches(paths, kind, args.batch, t, args.rounds)
                line = "%-8s data threads %2d: caffecli %7.1f ms" % (kind, t, ms)
                if peer is not None:
                    line += ", pytorch (%d threads) %7.1f ms, %.2fx" % (max(counts), peer,
                                                                     ms / peer)
                print(line)


if __name__ == "__main__":
    main()
