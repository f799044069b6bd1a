"""Batch sources run by the prefetch thread: a Datum database and an image list.

A source owns its read position and private generators; ``next_batch()`` returns the top arrays
and the source state right after them, so a layer can report exactly where the data it has
handed out ends even while the thread reads ahead. Sources never reference their layer.
"""
import os
import re

import numpy

from .. import glog
from .. import context
from ..errors import CaffeError
from . import datum as datum_mod
from . import db as db_mod
from . import image_io, workers


def transform_items(transformer, items, dtype, names):
    """Transform a list of CxHxW arrays into one batch; items must share one transformed shape
    (stacked in one vectorized pass when their raw shapes agree, as they normally do)."""
    first = items[0].shape
    if all(a.shape == first for a in items):
        return transformer.transform(numpy.stack(items), dtype)
    want = transformer.infer_shape(first)
    for a, name in zip(items, names):
        if a.shape == first:
            continue
        if a.shape[0] != first[0] or transformer.infer_shape(a.shape) != want \
                or not transformer.crop_size:
            raise CaffeError("%s: data shape %s differs from %s of the batch's first record %s"
                             % (name, "x".join(map(str, a.shape)), "x".join(map(str, first)),
                                names[0]))
    return numpy.concatenate([transformer.transform(a[None], dtype) for a in items])


class Dealt:
    """A source whose records are dealt among data-parallel ranks as Caffe's DataLayer::Skip
    deals them: with ``share=(rank, count)`` it keeps the records whose running offset is rank
    modulo count, the offset counting on across the wrap-around to the first record. Its saved
    state points at its next record, so the root's state also resumes every other rank (and any
    number of ranks) at its own next record; entries named ``*_rng`` are random streams."""

    def _skip_others(self):
        while self.offset % self.count != self.rank:
            self._next()


class DBSource(Dealt):
    """Datum records from LMDB/LevelDB, in key order, wrapping to the first at the end, dealt
    among data-parallel ranks."""

    def __init__(self, path, backend, batch_size, transformer, dtype, labels,
                 force_color=False, force_gray=False, share=(0, 1)):
        if batch_size <= 0:
            raise CaffeError("%s: batch_size must be positive" % path)
        self.path = path
        self.cursor = db_mod.open_reader(path, backend)
        self.batch_size = int(batch_size)
        self.transformer = transformer
        self.dtype = dtype
        self.labels = labels
        self.force = (bool(force_color), bool(force_gray))
        self.rank, self.count = share
        self.offset = 0
        try:
            self._skip_others()
        except BaseException:
            self.cursor.close()     # a source that fails to open holds no database lock
            raise

    def _next(self):
        if self.cursor.next():
            glog.info("data.restarting", "Restarting data prefetching from start.")
        self.offset += 1

    def _name(self):
        return "%s record %s" % (self.path, self.cursor.key().decode("utf-8", "replace"))

    def current(self, transforming=False):
        """The decoded CxHxW array and label at the cursor; ``transforming``: for a batch,
        where Caffe's Transform says, for each raw record, that force_color/force_gray apply
        to encoded ones only."""
        return self._decode((self.cursor.value(), self._name()), transforming)

    def _decode(self, record, transforming=False):
        """(CxHxW array, label, name) of a (serialized Datum, name) record."""
        value, name = record
        d = datum_mod.parse(value, name)
        if transforming and not d.encoded and any(self.force):
            glog.error("data_transformer.force_raw",
                       "force_color and force_gray only for encoded datum")
        return datum_mod.to_array(d, *self.force, what=name), d.label, name

    def first_shape(self):
        """The transformed 1xCxHxW shape of the record at the cursor (shape inference)."""
        arr = self.current()[0]
        return (1,) + tuple(self.transformer.infer_shape(arr.shape))

    def next_batch(self):
        """The next batch: its records read in order, then decoded on the data threads."""
        records = []
        for _ in range(self.batch_size):
            records.append((self.cursor.value(), self._name()))
            self._next()
            self._skip_others()
        items, labels, names = zip(*workers.map_items(
            lambda record: self._decode(record, transforming=True), records))
        tops = [transform_items(self.transformer, items, self.dtype, names)]
        if self.labels:
            tops.append(numpy.asarray(labels, dtype=self.dtype))
        return tops, self.get_state()

    def get_state(self):
        return {"key": self.cursor.key().hex(), "offset": self.offset,
                "transform_rng": self.transformer.get_state()}

    def set_state(self, state):
        self.cursor.seek(bytes.fromhex(state["key"]))
        self.offset = int(state.get("offset", 0))
        self.transformer.set_state(state.get("transform_rng"))
        self._skip_others()

    def close(self):
        self.cursor.close()


def _attempt(fn, arg):
    """fn(arg), or the CaffeError it raised (for the caller to report in order)."""
    try:
        return fn(arg)
    except CaffeError as exc:
        return exc


_ATOI = re.compile(r"^\s*([+-]?\d+)")


def read_image_list(source):
    """Caffe's list file: one ``path label`` per line, split at the last space (atoi label);
    every line counts, blank ones too (convert_imageset numbers its keys by line)."""
    if not os.path.isfile(source):
        raise CaffeError("%s: image list file not found" % source)
    lines = []
    with open(source, encoding="utf-8", errors="surrogateescape") as f:
        for raw in f:
            line = raw.rstrip("\r\n")   # a blank line stays: Caffe fails to read "" later
            pos = line.rfind(" ")
            m = _ATOI.match(line[pos + 1:])
            lines.append((line[:pos] if pos >= 0 else line, int(m.group(1)) if m else 0))
    if not lines:
        raise CaffeError("%s: image list file is empty" % source)
    return lines


class ImageListSource(Dealt):
    """Images named in a list file (ImageData): decoded, resized, optionally reshuffled each
    epoch with a private generator, dealt among data-parallel ranks."""

    def __init__(self, lines, root_folder, batch_size, transformer, dtype, new_height=0,
                 new_width=0, is_color=True, shuffle=False, rand_skip=0, what="ImageData",
                 share=(0, 1)):
        if batch_size <= 0:
            raise CaffeError("%s: batch_size must be positive" % what)
        if (new_height > 0) != (new_width > 0):
            raise CaffeError("%s: new_height and new_width must be set together" % what)
        self.lines = lines
        self.root = root_folder
        self.batch_size = int(batch_size)
        self.transformer = transformer
        self.dtype = dtype
        self.size = (int(new_height), int(new_width))
        self.is_color = bool(is_color)
        self.shuffle = bool(shuffle)
        self.order = numpy.arange(len(lines))
        self.pos = 0
        self.shuffle_rng = None
        if self.shuffle:     # Caffe: a prefetch stream of its own, caffe::shuffle
            self.shuffle_rng = context.rng().child()
            self.shuffle_rng.shuffle(self.order)
        if rand_skip:
            skip = context.rng().rand() % int(rand_skip)
            glog.info("image_data.skipping", "Skipping first %d data points." % skip)
            if skip >= len(lines):
                raise CaffeError("%s: not enough images (%d) to skip %d" % (what, len(lines), skip))
            self.pos = skip
        self.rank, self.count = share
        self.offset = self.pos
        self._skip_others()

    def image(self, index):
        """(CxHxW array, label, path) of list entry ``index``, read and resized."""
        path, label = self.lines[self.order[index]]
        try:
            return self._read(path), label, self.root + path
        except CaffeError:   # Caffe's ReadImageToCVMat says so before the layer gives up
            self._cannot_open(path)
            raise

    def _read(self, path):
        return image_io.to_chw(image_io.read_image(self.root + path, self.size[0],
                                                   self.size[1], self.is_color))

    def _cannot_open(self, path):
        glog.error("io.cannot_open_image", "Could not open or find file " + self.root + path)

    def first_shape(self):
        arr = self.image(self.pos)[0]
        return (1,) + tuple(self.transformer.infer_shape(arr.shape))

    def next_batch(self):
        """The next batch: its entries taken in order, then read on the data threads (an
        unreadable file is logged and raised as the first in the list's order)."""
        entries = []
        for _ in range(self.batch_size):
            entries.append(self.lines[self.order[self.pos]])
            self._next()
            self._skip_others()
        read = workers.map_items(lambda entry: _attempt(self._read, entry[0]), entries)
        for (path, _), item in zip(entries, read):
            if isinstance(item, CaffeError):
                self._cannot_open(path)
                raise item
        labels = [label for _, label in entries]
        names = [self.root + path for path, _ in entries]
        data = transform_items(self.transformer, read, self.dtype, names)
        return [data, numpy.asarray(labels, dtype=self.dtype)], self.get_state()

    def _next(self):
        self.pos += 1
        self.offset += 1
        if self.pos >= len(self.lines):
            self.pos = 0
            if self.shuffle:
                self.shuffle_rng.shuffle(self.order)

    def get_state(self):
        return {"pos": self.pos, "offset": self.offset, "order": self.order.copy(),
                "shuffle_rng": None if self.shuffle_rng is None else self.shuffle_rng.state,
                "transform_rng": self.transformer.get_state()}

    def set_state(self, state):
        order = numpy.asarray(state["order"], dtype=numpy.int64)
        if order.shape != self.order.shape:
            raise CaffeError("saved image order has %d entries, the list has %d"
                             % (order.size, self.order.size))
        self.order = order
        self.pos = int(state["pos"])
        self.offset = int(state.get("offset", self.pos))
        if state.get("shuffle_rng") is not None and self.shuffle_rng is not None:
            self.shuffle_rng.state = state["shuffle_rng"]
        self.transformer.set_state(state.get("transform_rng"))
        self._skip_others()

    def close(self):
        pass
