"""Blob: an N-D array of data with a same-shaped diff (gradient), as in Caffe.

Storage is a flat buffer whose capacity only grows, so Reshape to a smaller or equal count
keeps the values (Caffe's behaviour); ``data``/``diff`` are shaped views of that buffer in the
active backend (numpy or cupy), writable in place.
"""
import numpy

from . import backend
from .errors import CaffeError
from .synced_memory import SyncedMemory

MAX_BLOB_AXES = 32


def shape_string(shape):
    """Caffe's shape string: '64 20 24 24 (737280)'."""
    count = 1
    for d in shape:
        count *= d
    return "".join("%d " % d for d in shape) + "(%d)" % count


def _varint(value):
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


class _Count(int):
    """An int that can also be called like Caffe's Blob::count(start, end)."""

    def __new__(cls, value, shape):
        obj = int.__new__(cls, value)
        obj._shape = shape
        return obj

    def __call__(self, start=None, end=None):
        if start is None:
            return int(self)
        n = 1
        for d in self._shape[start:end if end is not None else len(self._shape)]:
            n *= d
        return n


class Blob:
    """Data + diff arrays of one shape; the unit layers read and write."""

    def __init__(self, shape=None, dtype=numpy.float32):
        self.dtype = numpy.dtype(dtype)
        self._shape = ()
        self._count = 0
        self._capacity = 0
        self._data_mem = None      # SyncedMemory of data (shared by ShareData)
        self._diff_mem = None
        self._views = None
        if shape is not None:
            self.reshape(shape)

    # ---- shape -------------------------------------------------------------------------
    def reshape(self, *shape):
        """Reshape to ``shape`` (ints or one sequence); grows storage only when needed."""
        if len(shape) == 1 and not isinstance(shape[0], (int, numpy.integer)):
            shape = shape[0]
        if hasattr(shape, "dim"):  # BlobShape message
            shape = list(shape.dim)
        shape = tuple(int(d) for d in shape)
        if len(shape) > MAX_BLOB_AXES:
            raise CaffeError("blob shape %s has more than %d axes" % (shape, MAX_BLOB_AXES))
        for d in shape:
            if d < 0:
                raise CaffeError("blob shape %s has a negative dimension" % (shape,))
        count = 1
        for d in shape:
            count *= d
        self._shape = shape
        self._count = count
        if count > self._capacity or self._data_mem is None:
            self._capacity = count
            self._data_mem = SyncedMemory(count, self.dtype)
            self._diff_mem = SyncedMemory(count, self.dtype)
        self._views = None
        return self

    def reshape_like(self, other):
        return self.reshape(other.shape)

    @property
    def shape(self):
        return self._shape

    @property
    def num_axes(self):
        return len(self._shape)

    @property
    def count(self):
        """Element count. Both spellings work: ``blob.count`` (pycaffe's attribute) and
        ``blob.count()`` / ``blob.count(start, end)`` (Caffe's method, product of dims)."""
        return _Count(self._count, self._shape)

    def canonical_axis_index(self, axis):
        """Map a possibly negative axis into [0, num_axes), or fail naming the range."""
        n = self.num_axes
        if not -n <= axis < n:
            raise CaffeError("axis %d out of range for %d-D blob with shape %s"
                             % (axis, n, shape_string(self._shape)))
        return axis + n if axis < 0 else axis

    def shape_at(self, axis):
        return self._shape[self.canonical_axis_index(axis)]

    def legacy_shape(self, index):
        """num/channels/height/width of the legacy 4-D view (1 past the last axis)."""
        if self.num_axes > 4:
            raise CaffeError("legacy accessors need a blob of at most 4 axes, got %s"
                             % shape_string(self._shape))
        if index >= self.num_axes or index < -self.num_axes:
            return 1
        return self.shape_at(index)

    num = property(lambda self: self.legacy_shape(0))
    channels = property(lambda self: self.legacy_shape(1))
    height = property(lambda self: self.legacy_shape(2))
    width = property(lambda self: self.legacy_shape(3))

    def shape_string(self):
        return shape_string(self._shape)

    # ---- storage -----------------------------------------------------------------------
    def _make_views(self):
        if self._data_mem is None:
            self.reshape(self._shape)
        dp, fp = self._data_mem.primary(), self._diff_mem.primary()
        self._views = (dp[:self._count].reshape(self._shape),
                       fp[:self._count].reshape(self._shape), dp, fp)
        return self._views

    def _current_views(self):
        views = self._views
        if views is None or views[2] is not self._data_mem._primary \
                or views[3] is not self._diff_mem._primary:
            views = self._make_views()  # a sharer moved the storage to another backend
        return views

    @property
    def data(self):
        """The data in the active backend (numpy or cupy), shaped like the blob; write in place."""
        views = self._current_views()
        if self._data_mem.head != "primary":
            self._data_mem.primary()
        return views[0]

    @data.setter
    def data(self, value):
        self.data[...] = value

    @property
    def diff(self):
        views = self._current_views()
        if self._diff_mem.head != "primary":
            self._diff_mem.primary()
        return views[1]

    @diff.setter
    def diff(self, value):
        self.diff[...] = value

    @property
    def host_data(self):
        """The data as a numpy array (pycaffe's ``blob.data``); on the GPU, writes to it reach
        the device before the next layer reads the blob."""
        if self._data_mem is None:
            self._make_views()
        return self._data_mem.host()[:self._count].reshape(self._shape)

    @property
    def host_diff(self):
        if self._diff_mem is None:
            self._make_views()
        return self._diff_mem.host()[:self._count].reshape(self._shape)

    def share_data(self, other):
        """Use ``other``'s data storage (counts must match), as Caffe's ShareData."""
        if self._count != other._count:
            raise CaffeError("cannot share data: counts differ (%s vs %s)"
                             % (self.shape_string(), other.shape_string()))
        if other._data_mem is None:
            other._make_views()
        self._data_mem = other._data_mem
        self._capacity = min(self._data_mem.size, self._diff_mem.size) \
            if self._diff_mem is not None else self._data_mem.size
        self._views = None

    def share_diff(self, other):
        if self._count != other._count:
            raise CaffeError("cannot share diff: counts differ (%s vs %s)"
                             % (self.shape_string(), other.shape_string()))
        if other._diff_mem is None:
            other._make_views()
        self._diff_mem = other._diff_mem
        self._capacity = min(self._data_mem.size, self._diff_mem.size)
        self._views = None

    def shares_data_with(self, other):
        return self._data_mem is other._data_mem

    def to_backend(self):
        """Move storage to the active backend (after set_mode_gpu/cpu); sharing is kept."""
        moved = False
        for mem in (self._data_mem, self._diff_mem):
            if mem is not None:
                moved |= mem.to_backend()
        self._views = None
        return moved

    # ---- math --------------------------------------------------------------------------
    def update(self):
        """data -= diff (the solver's final step)."""
        self.data[...] -= self.diff

    def asum_data(self):
        return float(abs(self.data).sum()) if self._count else 0.0

    def asum_diff(self):
        return float(abs(self.diff).sum()) if self._count else 0.0

    def sumsq_data(self):
        d = self.data
        return float((d * d).sum()) if self._count else 0.0

    def sumsq_diff(self):
        d = self.diff
        return float((d * d).sum()) if self._count else 0.0

    def scale_data(self, factor):
        self.data[...] *= factor

    def scale_diff(self, factor):
        self.diff[...] *= factor

    def copy_from(self, other, copy_diff=False, reshape=False):
        """Copy other's data (or diff) into this blob, reshaping when asked."""
        if other.shape != self.shape:
            if not reshape:
                raise CaffeError("cannot copy blob %s into %s without reshape"
                                 % (other.shape_string(), self.shape_string()))
            self.reshape(other.shape)
        if copy_diff:
            self.diff[...] = other.diff
        else:
            self.data[...] = other.data

    # ---- protobuf ----------------------------------------------------------------------
    @staticmethod
    def proto_shape(proto):
        """The shape a BlobProto describes (N-D ``shape`` or the legacy 4 fields)."""
        if proto.HasField("shape"):
            return tuple(int(d) for d in proto.shape.dim)
        if any(proto.HasField(f) for f in ("num", "channels", "height", "width")):
            return (proto.num, proto.channels, proto.height, proto.width)
        return ()

    def shape_equals(self, proto):
        """Caffe's ShapeEquals: legacy 4-D protos match blobs of <=4 axes padded with 1s."""
        if proto.HasField("shape") or not any(
                proto.HasField(f) for f in ("num", "channels", "height", "width")):
            return self._shape == self.proto_shape(proto)
        if self.num_axes > 4:
            return False
        return (self.legacy_shape(-4), self.legacy_shape(-3), self.legacy_shape(-2),
                self.legacy_shape(-1)) == self.proto_shape(proto) if self.num_axes else False

    def from_proto(self, proto, reshape=True):
        """Load data (and diff, when present) from a BlobProto."""
        shape = self.proto_shape(proto)
        if reshape:
            self.reshape(shape)
        elif not self.shape_equals(proto):
            raise CaffeError("shape mismatch (target blob shape %s, proto shape %s); "
                             "reshape not allowed" % (self.shape_string(), shape_string(shape)))
        xp = backend.xp()
        for src_f, src_d, target in (("data", "double_data", "data"),
                                     ("diff", "double_diff", "diff")):
            values = getattr(proto, src_d) or getattr(proto, src_f)
            if len(values):
                if len(values) != self._count:
                    raise CaffeError("blob proto has %d values for shape %s"
                                     % (len(values), self.shape_string()))
                arr = numpy.asarray(values, dtype=self.dtype).reshape(self._shape)
                getattr(self, target)[...] = xp.asarray(arr)
        return self

    def to_proto(self, proto=None, write_diff=False, double=False):
        """Write the blob into a BlobProto (N-D shape; float or double values)."""
        if proto is None:
            from .proto import caffe_pb2
            proto = caffe_pb2.BlobProto()
        proto.Clear()
        proto.shape.dim.extend(self._shape)
        # Packed repeated floats are written as raw little-endian bytes and parsed back:
        # protobuf's per-element extend is ~100x slower for multi-million-value blobs.
        fields = [(9 if double else 6, self.diff)] if write_diff else []
        fields.insert(0, (8 if double else 5, self.data))
        raw = bytearray(proto.SerializeToString())
        for number, values in fields:
            host = backend.to_host(values).ravel()
            payload = host.astype("<f8" if double else "<f4").tobytes()
            raw += _varint((number << 3) | 2) + _varint(len(payload)) + payload
        proto.ParseFromString(bytes(raw))
        return proto

    def __repr__(self):
        return "Blob(%s)" % self.shape_string()
