"""Builders for data-pipeline tests: Datum databases, PNG files, CIFAR-10 and MNIST files."""
import os
import struct

import numpy

from caffecli.data import db as db_mod
from caffecli import Net
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text


def write_datum_db(path, arrays, labels=None, backend="lmdb", floats=False):
    """Write CxHxW arrays as Datums under keys %08d (uint8 bytes, or float_data)."""
    with db_mod.open_writer(path, backend) as w:
        for i, a in enumerate(arrays):
            a = numpy.asarray(a)
            d = caffe_pb2.Datum(channels=a.shape[0], height=a.shape[1], width=a.shape[2],
                                label=int(labels[i]) if labels is not None else i)
            if floats:
                d.float_data.extend(a.astype(numpy.float32).ravel().tolist())
            else:
                d.data = a.astype(numpy.uint8).tobytes()
            w.put("%08d" % i, d.SerializeToString())
    return path


def write_png(path, pixels):
    """Write an RGB (HxWx3) or gray (HxW) uint8 array as PNG with Pillow (not OpenCV)."""
    from PIL import Image
    Image.fromarray(numpy.asarray(pixels, dtype=numpy.uint8)).save(path, format="PNG")
    return path


def write_cifar_batch(path, labels, images_rgb):
    """CIFAR-10 binary format: per record 1 label byte then the R, G and B 32x32 planes."""
    images = numpy.asarray(images_rgb, dtype=numpy.uint8)          # N x 32 x 32 x 3
    planes = images.transpose(0, 3, 1, 2).reshape(len(images), -1)  # N x 3072 (R, G, B)
    records = numpy.concatenate(
        [numpy.asarray(labels, dtype=numpy.uint8)[:, None], planes], axis=1)
    records.tofile(path)
    return path


def make_cifar_folder(folder, per_file=3, seed=0):
    """data_batch_1..5.bin and test_batch.bin; returns {file name: (labels, images_rgb)}."""
    rs = numpy.random.RandomState(seed)
    os.makedirs(folder, exist_ok=True)
    content = {}
    for name in ["data_batch_%d.bin" % i for i in range(1, 6)] + ["test_batch.bin"]:
        labels = rs.randint(0, 10, size=per_file)
        images = rs.randint(0, 256, size=(per_file, 32, 32, 3))
        write_cifar_batch(os.path.join(folder, name), labels, images)
        content[name] = (labels, images)
    return content


def write_mnist(folder, images, labels):
    """idx3 image and idx1 label files (big-endian headers, as MNIST's)."""
    images = numpy.asarray(images, dtype=numpy.uint8)
    img_path = os.path.join(folder, "images-idx3-ubyte")
    lab_path = os.path.join(folder, "labels-idx1-ubyte")
    with open(img_path, "wb") as f:
        f.write(struct.pack(">IIII", 2051, *images.shape) + images.tobytes())
    with open(lab_path, "wb") as f:
        f.write(struct.pack(">II", 2049, len(labels))
                + numpy.asarray(labels, dtype=numpy.uint8).tobytes())
    return img_path, lab_path


def data_net(layer_text, phase=caffe_pb2.TEST):
    """A net holding just the given layer (prototxt text)."""
    return Net(parse_text('name: "t" layer { %s }' % layer_text, caffe_pb2.NetParameter()),
               phase, log=False)


def close_net(net):
    for layer in net.layers:
        if hasattr(layer, "close"):
            layer.close()
