"""Random data cases: Data over LMDB/LevelDB Datums (uint8 or float, transform parameters),
HDF5Data over several files, DummyData, ImageData over PNG/JPEG files (gray, RGBA, resized,
cropped) and Data over what BVLC's own convert_imageset wrote; batches read by Caffe in the
TEST phase, stored as shared/golden's data__* cases. ImageData and convert_imageset need a
Caffe built with OpenCV, and its convert_imageset on PATH."""
import json
import os
import shutil
import subprocess

import h5py
import lmdb
import numpy as np
import plyvel
from PIL import Image

from .writer import caffe, in_child
from caffe.proto import caffe_pb2


def write_db(path, backend, datums):
    if backend == "LMDB":
        env = lmdb.open(path, map_size=1 << 28)
        with env.begin(write=True) as txn:
            for i, d in enumerate(datums):
                txn.put(b"%08d" % i, d.SerializeToString())
        env.close()
    else:
        db = plyvel.DB(path, create_if_missing=True)
        for i, d in enumerate(datums):
            db.put(b"%08d" % i, d.SerializeToString())
        db.close()


def g_db(rng, d):
    c, h, w = rng.randint(1, 5), rng.randint(1, 9), rng.randint(1, 9)
    n = rng.randint(1, 12)
    floaty = rng.rand() < 0.3
    datums = []
    for i in range(n):
        dt = caffe_pb2.Datum(channels=c, height=h, width=w, label=int(rng.randint(-3, 100)))
        if floaty:
            dt.float_data.extend(rng.randn(c * h * w).astype(np.float32).tolist())
        else:
            dt.data = rng.randint(0, 256, c * h * w).astype(np.uint8).tobytes()
        datums.append(dt)
    backend = ["LMDB", "LEVELDB"][rng.randint(2)]
    write_db(os.path.join(d, "db"), backend, datums)
    tp = []
    if rng.rand() < 0.5:
        tp.append("scale: %.4g" % rng.uniform(0.001, 3))
    crop = 0
    if rng.rand() < 0.4:
        crop = rng.randint(1, min(h, w) + 1)
        tp.append("crop_size: %d" % crop)
    r = rng.rand()
    if r < 0.3:
        mv = rng.uniform(-50, 150, c if rng.rand() < 0.6 else 1)
        tp += ["mean_value: %.3f" % v for v in mv]
    elif r < 0.6:
        m = caffe_pb2.BlobProto()
        m.shape.dim.extend([1, c, h, w])
        m.data.extend(rng.uniform(0, 255, c * h * w).astype(np.float32).tolist())
        with open(os.path.join(d, "mean.binaryproto"), "wb") as f:
            f.write(m.SerializeToString())
        tp.append('mean_file: "mean.binaryproto"')
    tops = ["data"] + (["label"] if rng.rand() < 0.8 else [])
    t = " ".join('top: "%s"' % x for x in tops)
    tps = "transform_param { %s } " % " ".join(tp) if tp else ""
    net = ('layer { name: "d" type: "Data" %s %sdata_param { source: "db" backend: %s '
           'batch_size: %d } }\n' % (t, tps, backend, rng.randint(1, 6)))
    return net, tops, 4


def g_hdf5(rng, d):
    nfiles = rng.randint(1, 4)
    tops = ["data"] + (["label"] if rng.rand() < 0.7 else []) + (["extra"] if rng.rand() < 0.3
                                                                  else [])
    shapes = {t: [rng.randint(1, 4) for _ in range(rng.randint(0, 3))] for t in tops}
    files = []
    for i in range(nfiles):
        n = rng.randint(1, 8)
        fn = "f%d.h5" % i
        with h5py.File(os.path.join(d, fn), "w") as h:
            for t in tops:
                arr = rng.randn(n, *shapes[t])
                h[t] = arr.astype(np.float64 if rng.rand() < 0.3 else np.float32)
        files.append(fn)
    with open(os.path.join(d, "list.txt"), "w") as f:
        f.write("\n".join(files) + "\n")
    t = " ".join('top: "%s"' % x for x in tops)
    net = ('layer { name: "d" type: "HDF5Data" %s hdf5_data_param { source: "list.txt" '
           'batch_size: %d } }\n' % (t, rng.randint(1, 7)))
    return net, tops, 5


def g_dummy(rng, d):
    k = rng.randint(1, 4)
    tops = ["t%d" % i for i in range(k)]
    shapes = " ".join("shape { %s }" % " ".join("dim: %d" % rng.randint(1, 4)
                                                 for _ in range(rng.randint(1, 4)))
                      for _ in range(k if rng.rand() < 0.7 else 1))
    nf = [0, 1, k][rng.randint(3)]
    fill = " ".join('data_filler { type: "constant" value: %.3f }' % rng.uniform(-3, 3)
                    for _ in range(nf))
    net = ('layer { name: "d" type: "DummyData" %s dummy_data_param { %s %s } }\n'
           % (" ".join('top: "%s"' % x for x in tops), shapes, fill))
    return net, tops, 2


def images(rng, d, n):
    lines = []
    for i in range(n):
        h, w = rng.randint(1, 13), rng.randint(1, 13)
        kind = rng.randint(6)
        if kind <= 2:
            img = Image.fromarray(rng.randint(0, 256, (h, w, 3)).astype(np.uint8), "RGB")
        elif kind == 3:
            img = Image.fromarray(rng.randint(0, 256, (h, w)).astype(np.uint8), "L")
        elif kind == 4:
            img = Image.fromarray(rng.randint(0, 256, (h, w, 4)).astype(np.uint8), "RGBA")
        else:
            img = Image.fromarray((rng.rand(h, w, 3) * 255).astype(np.uint8), "RGB")
        ext = "jpg" if (kind == 5 and rng.rand() < 0.5) else "png"
        name = "img%d.%s" % (i, ext)
        img.save(os.path.join(d, name), quality=90) if ext == "jpg" else \
            img.save(os.path.join(d, name))
        lines.append("%s %d" % (name, rng.randint(0, 10)))
    with open(os.path.join(d, "list.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")


def transform(rng, resized_hw):
    tp = []
    if rng.rand() < 0.4:
        tp.append("scale: %.5g" % rng.uniform(0.001, 2))
    if rng.rand() < 0.3 and resized_hw:
        tp.append("crop_size: %d" % rng.randint(1, min(resized_hw) + 1))
    if rng.rand() < 0.3:
        tp += ["mean_value: %.2f" % v for v in rng.uniform(0, 200, rng.randint(1, 2))]
    return "transform_param { %s } " % " ".join(tp) if tp else ""


def images_and_size(rng, d):
    """Random images in d with their list.txt, and (height, width) to resize to, or None."""
    images(rng, d, rng.randint(1, 6))
    return (rng.randint(1, 10), rng.randint(1, 10)) if rng.rand() < 0.7 else None


def g_imagedata(rng, d):
    hw = images_and_size(rng, d)
    p = ['source: "list.txt"', "batch_size: %d" % rng.randint(1, 4)]
    if hw:
        p += ["new_height: %d" % hw[0], "new_width: %d" % hw[1]]
    if rng.rand() < 0.3:
        p.append("is_color: false")
    # without a resize the images differ in size: Caffe needs batch 1 then
    if hw is None:
        p[1] = "batch_size: 1"
    net = ('layer { name: "d" type: "ImageData" top: "data" top: "label" %s'
           'image_data_param { %s } }\n' % (transform(rng, hw), " ".join(p)))
    return net, None


def g_convert(rng, d):
    hw = images_and_size(rng, d)
    flags = ["--resize_height=%d" % hw[0], "--resize_width=%d" % hw[1]] if hw else []
    if rng.rand() < 0.3:
        flags.append("--gray")
    if rng.rand() < 0.4:
        flags.append("--encoded")
        if rng.rand() < 0.5:
            flags.append("--encode_type=%s" % ["png", "jpg"][rng.randint(2)])
    backend = ["lmdb", "leveldb"][rng.randint(2)]
    flags.append("--backend=%s" % backend)
    tool = shutil.which("convert_imageset") or "convert_imageset"
    cmd = [tool] + flags + ["./", "list.txt", "db"]
    r = subprocess.run(cmd, cwd=d, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError("convert_imageset failed: " + r.stderr[-300:])
    tp = transform(rng, hw)
    if "--encoded" in flags and rng.rand() < 0.4:
        extra = ["force_color: true", "force_gray: true"][rng.randint(2)]
        tp = tp.replace("transform_param { ", "transform_param { %s " % extra) if tp else \
            "transform_param { %s } " % extra
    bs = rng.randint(1, 4) if hw else 1
    net = ('layer { name: "d" type: "Data" top: "data" top: "label" %sdata_param { '
           'source: "db" backend: %s batch_size: %d } }\n' % (tp, backend.upper(), bs))
    return net, "convert_imageset " + " ".join(flags) + " ./ list.txt db"


# generator: (net text, tops, batches); each returns the convert_imageset command it ran too
def _with_command(fn):
    def run(rng, d):
        net, cmd = fn(rng, d)
        return net, ["data", "label"], 3, cmd
    return run


GENERATORS = {
    "db": lambda rng, d: g_db(rng, d) + (None,),
    "hdf5": lambda rng, d: g_hdf5(rng, d) + (None,),
    "dummy": lambda rng, d: g_dummy(rng, d) + (None,),
    "imagedata": _with_command(g_imagedata),
    "convert": _with_command(g_convert),
}


def write_data_case(outdir, kind, name, seed):
    rng = np.random.RandomState(seed)
    d = os.path.join(outdir, name)
    os.makedirs(d)

    def run():
        net, tops, batches, cmd = GENERATORS[kind](rng, d)
        with open(os.path.join(d, "net.prototxt"), "w") as f:
            f.write('name: "%s"\n' % name + net)
        os.chdir(d)
        n = caffe.Net("net.prototxt", caffe.TEST)
        with h5py.File("case.h5", "w") as h:
            for k in range(batches):
                n._forward(0, len(n.layers) - 1)
                for t in tops:
                    h["batches/%d/%s" % (k, t)] = n.blobs[t].data.copy()
        del n      # closes the database
        meta = dict(family="data", variant=name.split("__")[1], phase="TEST", batches=batches,
                    outputs=tops, rtol=1e-6, atol=1e-6)
        if cmd:
            meta["convert_imageset"] = cmd
        with open("case.json", "w") as f:
            json.dump(meta, f, indent=1)
    return in_child(d, outdir, run)
