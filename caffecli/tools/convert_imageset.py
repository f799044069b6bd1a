"""convert_imageset: images named in a list file -> an LMDB/LevelDB of Datums (Caffe's tool).

Keys are ``%08d_<path>``; images are decoded by OpenCV (BGR), optionally resized, and stored
raw or re-encoded (``--encoded`` / ``--encode_type``), exactly as Caffe's ReadImageToDatum.
Blocks of images are read on the data threads (data/workers.py: every core unless
CAFFECLI_DATA_THREADS says otherwise), then written and logged in the list's order: the same
database and log as one thread's.
"""

import click

from .. import context, glog
from ..data import datum as datum_mod
from ..data import db as db_mod
from ..data import image_io, workers
from ..data.sources import read_image_list
from ..errors import CaffeError
from ..util.paths import as_path
from ..util.progress import progress
from ._common import GflagsCommand, bool_flag


def _match_ext(filename, enc):
    ext = filename.rsplit(".", 1)[-1].lower()
    enc = enc.lower()
    return ext == enc or (enc == "jpg" and ext == "jpeg")


def _encoding(name, encoded, encode_type):
    """The format a record is stored in: ``encode_type``, else with ``encoded`` the file's own
    extension (the whole name where it has none, as Caffe's tool takes it), else raw ("")."""
    if encode_type or not encoded:
        return encode_type
    return name.rsplit(".", 1)[-1].lower()


def image_to_datum(path, label, height, width, is_color, encoding):
    """Caffe's ReadImageToDatum; None when the image cannot be read (the caller skips it)."""
    try:
        img = image_io.read_image(path, height, width, is_color)
    except CaffeError:
        return None
    if encoding:
        if (img.shape[2] == 3) == is_color and not height and not width \
                and _match_ext(path, encoding):
            with open(path, "rb") as f:
                return datum_mod.from_encoded(f.read(), label)
        return datum_mod.from_encoded(image_io.encode(img, encoding), label)
    return datum_mod.from_image(img, label)


@click.command("convert_imageset", cls=GflagsCommand,
               help="Convert a set of images to the leveldb/lmdb format used as input for "
                    "Caffe.  Usage: convert_imageset [FLAGS] ROOTFOLDER/ LISTFILE DB_NAME")
@bool_flag("gray", "When this option is on, treat images as grayscale ones")
@bool_flag("shuffle", "Randomly shuffle the order of images and their labels")
@click.option("--backend", default="lmdb", show_default=True,
              help="The backend {lmdb, leveldb} for storing the result")
@click.option("--resize_width", type=int, default=0, help="Width images are resized to")
@click.option("--resize_height", type=int, default=0, help="Height images are resized to")
@bool_flag("check_size", "When this option is on, check that all the datum have the same size")
@bool_flag("encoded", "When this option is on, the encoded image will be save in datum")
@click.option("--encode_type", default="",
              help="Optional: What type should we encode the image as ('png','jpg',...).")
@click.argument("root_folder")
@click.argument("list_file")
@click.argument("db_name")
def convert_imageset(gray, shuffle, backend, resize_width, resize_height, check_size, encoded,
                     encode_type, root_folder, list_file, db_name):
    run(root_folder, list_file, db_name, gray=gray, shuffle=shuffle, backend=backend,
        resize_height=resize_height, resize_width=resize_width, check_size=check_size,
        encoded=encoded, encode_type=encode_type)


def run(root_folder, list_file, db_name, gray=False, shuffle=False, backend="lmdb",
        resize_height=0, resize_width=0, check_size=False, encoded=False, encode_type=""):
    """The conversion itself (also callable from Python); returns the number of records."""
    root_folder, list_file, db_name = as_path(root_folder), as_path(list_file), as_path(db_name)
    is_color = not gray
    lines = read_image_list(list_file)
    if shuffle:
        glog.info("convert_imageset.shuffling", "Shuffling data")
        lines = context.rng().shuffle(list(lines))    # caffe::shuffle on Caffe's stream
    glog.info("convert_imageset.images", "A total of %d images." % len(lines))
    if encode_type and not encoded:
        glog.info("convert_imageset.encode_type", "encode_type specified, assuming encoded=true.")
    resize_height, resize_width = max(0, resize_height), max(0, resize_width)
    count, data_size = 0, None

    def read(item):
        _, (name, label) = item
        return image_to_datum(root_folder + name, label, resize_height, resize_width, is_color,
                              _encoding(name, encoded, encode_type))
    with db_mod.new_database(db_name, backend) as writer, \
            progress(len(lines), "convert_imageset") as bar:
        for (line_id, (name, label)), datum in workers.in_order(
                read, enumerate(lines), workers.count(every_core=True)):
            bar.update()
            if encoded and not encode_type and "." not in name:
                glog.warning("convert_imageset.unknown_encoding",
                             "Failed to guess the encoding of '%s'" % name)
            if datum is None:
                glog.error("io.cannot_open_image",
                           "Could not open or find file " + root_folder + name)
                continue
            if check_size:
                if data_size is None:
                    data_size = datum.channels * datum.height * datum.width
                elif len(datum.data) != data_size:
                    raise CaffeError("%s: incorrect data field size %d (the first image has %d)"
                                     % (root_folder + name, len(datum.data), data_size))
            writer.put("%08d_%s" % (line_id, name), datum.SerializeToString())
            count += 1
            if count % 1000 == 0:
                writer.commit()
                glog.info("convert_imageset.processed", "Processed %d files." % count)
    if count % 1000:
        glog.info("convert_imageset.processed_all", "Processed %d files." % count)
    return count
