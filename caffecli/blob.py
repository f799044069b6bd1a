"""Blob: an N-D array of data with a same-shaped diff (gradient), as in Caffe.

Data and diff each live in a SyncedMemory whose capacity only grows, so Reshape to a smaller or
equal count keeps the values (Caffe's behaviour). ``data``/``diff`` are the host values, as
pycaffe shows them; Caffe's ``cpu_data``/``gpu_data``/``mutable_*`` ask for one side, and
``at(side)`` is the blob as a layer running on that side sees it.
"""
import weakref

import numpy

from . import context, syncedmem
from .context import CPU, GPU
from .errors import CaffeError
from .kernels import caffe_blas, host_memory
from .proto import caffe_pb2
from .syncedmem import SyncedMemory

_ACCESS = {(CPU, False): SyncedMemory.cpu_data, (CPU, True): SyncedMemory.mutable_cpu_data,
           (GPU, False): SyncedMemory.gpu_data, (GPU, True): SyncedMemory.mutable_gpu_data}

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
        self._data_mem = SyncedMemory(0, self.dtype)   # shared by ShareData
        self._diff_mem = SyncedMemory(0, self.dtype)
        self._arrays = {}          # (role, side) -> (flat array, shaped view)
        self._sides = {}           # (side, write_data, write_diff) -> BlobSide
        if shape is not None:
            self.reshape(shape)

    # ---- shape -------------------------------------------------------------------------
    def reshape(self, *shape):
        """Reshape to ``shape`` (ints or one sequence); grows storage only when needed."""
        if len(shape) == 1 and not isinstance(shape[0], (int, numpy.integer)):
            shape = shape[0]
        if type(shape) is tuple and shape == self._shape and self._count:
            return self   # a layer's reshape at each forward: its views stay valid
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
        if count > self._data_mem.size:
            self._data_mem = SyncedMemory(count, self.dtype)
        if count > self._diff_mem.size:
            self._diff_mem = SyncedMemory(count, self.dtype)
        self._arrays.clear()
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
                             % (axis, n, self.shape_string()))
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
        """Caffe's: the dims and the count, 0 for a blob never shaped ('(0)', where a 0-axis
        blob, one value, shows '(1)')."""
        return "".join("%d " % d for d in self._shape) + "(%d)" % self._count

    # ---- storage: Caffe's accessors ----------------------------------------------------
    def _shaped(self, role, side, mutable):
        """The blob-shaped array of ``role`` (data/diff) on ``side``, synced as Caffe's
        accessors do. A host array to read only is a read-only view (Caffe's const), so a
        layer that writes what it should only read fails loudly on the CPU."""
        mem = self._data_mem if role == "data" else self._diff_mem
        if not self._count and not mem.size:
            # Caffe allocates a blob's memory when a shape first gives it values: one that
            # never had any has none (its 'Check failed: data_' abort)
            raise CaffeError("a blob of shape %s has never held values: it has no %s to read "
                             "or write (Caffe's 'Check failed: %s_'); give it a shape with "
                             "values first" % (self.shape_string(), role, role))
        flat = _ACCESS[side, mutable](mem)
        key = (role, side, mutable)
        hit = self._arrays.get(key)
        if hit is not None and hit[0] is flat:
            return hit[1]
        shaped = flat[:self._count].reshape(self._shape)
        if side == CPU and not mutable:
            shaped = shaped.view()
            shaped.flags.writeable = False
        self._arrays[key] = (flat, shaped)
        return shaped

    def cpu_data(self):
        """The data on the host, current, to read (Caffe's cpu_data)."""
        return self._shaped("data", CPU, False)

    def gpu_data(self):
        return self._shaped("data", GPU, False)

    def mutable_cpu_data(self):
        """The data on the host, to write: the device copy goes stale (mutable_cpu_data)."""
        return self._shaped("data", CPU, True)

    def mutable_gpu_data(self):
        return self._shaped("data", GPU, True)

    def cpu_diff(self):
        return self._shaped("diff", CPU, False)

    def gpu_diff(self):
        return self._shaped("diff", GPU, False)

    def mutable_cpu_diff(self):
        return self._shaped("diff", CPU, True)

    def mutable_gpu_diff(self):
        return self._shaped("diff", GPU, True)

    @property
    def data(self):
        """The current data on the host, writable (pycaffe's blob.data: mutable_cpu_data)."""
        return self._shaped("data", CPU, True)

    @data.setter
    def data(self, value):
        self._assign("data", value)

    @property
    def diff(self):
        """The current diff on the host, writable (pycaffe's blob.diff)."""
        return self._shaped("diff", CPU, True)

    @diff.setter
    def diff(self, value):
        self._assign("diff", value)

    def _assign(self, role, value):
        """Set every value of ``role``; a value of a shape that cannot fill the blob fails as
        numpy's assignment does, with the blob's values (wherever they live) untouched."""
        try:
            fits = numpy.broadcast_shapes(numpy.shape(value), self._shape) == self._shape
        except ValueError:
            fits = False
        target = self._overwritten(role) if fits else self._shaped(role, CPU, True)
        target[...] = value

    def _overwritten(self, role):
        """The host array of ``role`` for a caller that writes every value: no pending fill
        runs and no device copy is fetched first (unless the memory holds more than the blob
        shows, whose rest must stay current)."""
        mem = self._data_mem if role == "data" else self._diff_mem
        flat = mem.overwrite_cpu_data() if mem.size == self._count else mem.mutable_cpu_data()
        return flat[:self._count].reshape(self._shape)

    def clear_diff_lazily(self):
        """Zero the host diff when it is next used (Net.clear_param_diffs(lazy=True)), so
        that a layer writing its whole gradient (``claim_cleared_diff``) replaces the zeros'
        pass; at once where the memory holds more values than the blob shows."""
        mem = self._diff_mem
        if mem.size == self._count:
            mem.clear_cpu_data()
        elif self._count:
            self._shaped("diff", CPU, True)[...] = 0

    def settle_diff(self):
        """Write the zeros of a lazy clear not claimed yet."""
        self._diff_mem.settle()

    def claim_cleared_diff(self):
        """True, once, where the host diff was cleared and not yet used since: the caller then
        writes every value of it (out= in place of +=)."""
        return self._diff_mem.claim_clear()

    def initialize_data(self, write):
        """Have ``write(flat host array)`` set the data: when first read, or now if in use."""
        count = self._count
        self._data_mem.initialize(lambda flat: write(flat[:count]))

    def at(self, side, write_data=True, write_diff=True):
        """This blob as code running on ``side`` (CPU or GPU) sees it: ``data``/``diff`` are
        that side's arrays, to write (Caffe's mutable_*) or only to read (cpu_data, gpu_data)."""
        key = (side, write_data, write_diff)
        view = self._sides.get(key)
        if view is None:
            view = self._sides[key] = BlobSide(self, side, write_data, write_diff)
        return view

    def live_side(self, role="data"):
        """Where ``role``'s current values are: GPU when the device copy is current, else CPU
        (Caffe's Blob::Update and asum pick their code path this way)."""
        mem = self._data_mem if role == "data" else self._diff_mem
        return GPU if mem.head in (syncedmem.HEAD_AT_GPU, syncedmem.SYNCED) else CPU

    @property
    def data_head(self):
        return self._data_mem.head

    @property
    def diff_head(self):
        return self._diff_mem.head

    def share_data(self, other):
        """Use ``other``'s data storage (counts must match), as Caffe's ShareData."""
        other = getattr(other, "blob", other)
        if self._count != other._count:
            raise CaffeError("cannot share data: counts differ (%s vs %s)"
                             % (self.shape_string(), other.shape_string()))
        self._data_mem = other._data_mem
        self._arrays.clear()

    def share_diff(self, other):
        other = getattr(other, "blob", other)
        if self._count != other._count:
            raise CaffeError("cannot share diff: counts differ (%s vs %s)"
                             % (self.shape_string(), other.shape_string()))
        self._diff_mem = other._diff_mem
        self._arrays.clear()

    def memories(self):
        """The SyncedMemory of the data and of the diff (what a captured graph reads and
        writes)."""
        return self._data_mem, self._diff_mem

    def shares_data_with(self, other):
        return self._data_mem is getattr(other, "blob", other)._data_mem

    # ---- math (on the side where the values are, as Caffe's) ---------------------------
    def update(self):
        """data -= diff (the solver's final step), where the data is current."""
        side = self.live_side("data")
        self._shaped("data", side, True)[...] -= self._shaped("diff", side, False)

    def _reduce(self, role, fn):
        if not self._count:
            return 0.0
        return float(fn(self._shaped(role, self.live_side(role), False)))

    def asum_data(self):
        """Caffe's asum_data: cblas_sasum on the host (kernels/caffe_blas.py)."""
        return self._reduce("data", caffe_blas.asum)

    def asum_diff(self):
        return self._reduce("diff", caffe_blas.asum)

    def sumsq_data(self):
        """Caffe's sumsq_data: cblas_sdot of the values with themselves on the host."""
        return self._reduce("data", lambda a: caffe_blas.dot(a, a))

    def sumsq_diff(self):
        return self._reduce("diff", lambda a: caffe_blas.dot(a, a))

    def copy_from(self, other, copy_diff=False, reshape=False):
        """Copy other's data (or diff) into this blob on the mode's side, reshaping when asked."""
        other = getattr(other, "blob", other)
        if other.shape != self.shape:
            if not reshape:
                raise CaffeError("cannot copy blob %s into %s without reshape"
                                 % (other.shape_string(), self.shape_string()))
            self.reshape(other.shape)
        role = "diff" if copy_diff else "data"
        side = context.mode()
        self._shaped(role, side, True)[...] = other._shaped(role, side, False)

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

    def from_proto(self, proto, reshape=True, values=None):
        """Load data (and diff, when present) from a BlobProto, or from ``values`` ({"data":
        array, "diff": array}, a caffemodel's values read apart from their proto); the data
        must hold a value for each element, as Caffe's FromProto checks."""
        shape = self.proto_shape(proto)
        if reshape:
            self.reshape(shape)
        elif not self.shape_equals(proto):
            raise CaffeError("shape mismatch (target blob shape %s, proto shape %s); "
                             "reshape not allowed" % (self.shape_string(), shape_string(shape)))
        for src_f, src_d, target in (("data", "double_data", "data"),
                                     ("diff", "double_diff", "diff")):
            given = (values or {}).get(target)
            if given is None:
                given = getattr(proto, src_d) or getattr(proto, src_f)
            if len(given) or target == "data":   # data is required (Caffe's CHECK_EQ)
                if len(given) != self._count:
                    raise CaffeError("blob proto has %d %s values for shape %s"
                                     % (len(given), target, self.shape_string()))
                if not isinstance(given, numpy.ndarray):
                    given = numpy.asarray(given, dtype=self.dtype)
                host_memory.copy_in(self._overwritten(target),
                                    given.reshape(self._shape))
        return self

    def to_proto(self, proto=None, write_diff=False, double=False):
        """Write the blob into a BlobProto (N-D shape; float or double values)."""
        if proto is None:
            proto = caffe_pb2.BlobProto()
        proto.Clear()
        proto.shape.dim.extend(self._shape)
        # Packed repeated floats are written as raw little-endian bytes and parsed back:
        # protobuf's per-element extend is ~100x slower for multi-million-value blobs.
        fields = [(9 if double else 6, self.cpu_diff())] if write_diff else []
        fields.insert(0, (8 if double else 5, self.cpu_data()))
        raw = bytearray(proto.SerializeToString())
        for number, values in fields:
            payload = values.ravel().astype("<f8" if double else "<f4").tobytes()
            raw += _varint((number << 3) | 2) + _varint(len(payload)) + payload
        proto.ParseFromString(bytes(raw))
        return proto

    def __repr__(self):
        return "Blob(%s)" % self.shape_string()


class BlobSide:
    """A blob seen from one side: ``data``/``diff`` are that side's current arrays, to write
    (Caffe's mutable_cpu_data / mutable_gpu_data) or to read (cpu_data / gpu_data); all else
    is the blob's."""

    __slots__ = ("_blob", "side", "write_data", "write_diff")

    def __init__(self, blob, side, write_data, write_diff):
        # the blob caches its views, so a view holds it weakly: no cycle keeps a dropped net's
        # memory until the cyclic collector runs (and no weakref callback runs in the training
        # loop, where a Ctrl-C raised inside one would be swallowed)
        self._blob, self.side = weakref.ref(blob), side
        self.write_data, self.write_diff = write_data, write_diff

    @property
    def blob(self):
        blob = self._blob()
        if blob is None:
            raise CaffeError("a view of a blob that no longer exists (its net was dropped)")
        return blob

    @property
    def data(self):
        return self.blob._shaped("data", self.side, self.write_data)

    @data.setter
    def data(self, value):
        self.blob._shaped("data", self.side, True)[...] = value

    @property
    def diff(self):
        return self.blob._shaped("diff", self.side, self.write_diff)

    def claim_cleared_diff(self):
        """Whether the caller, writing every value of ``diff``, replaces a pending clear (host
        only): then it must overwrite, not add."""
        return self.side == CPU and self.write_diff and self.blob.claim_cleared_diff()

    @diff.setter
    def diff(self, value):
        self.blob._shaped("diff", self.side, True)[...] = value

    def writable(self):
        """The same blob and side with data and diff both writable (a layer that uses a blob
        beyond its role, as Caffe's layers call mutable_* on a bottom for scratch space)."""
        return self.blob.at(self.side)

    # what layers ask at every reshape, read here: through __getattr__ each took 1.1 us
    # against 0.2-0.5 (ResNet-50's layers ask about 2000 times a pass)
    shape = property(lambda self: self.blob.shape)
    num_axes = property(lambda self: self.blob.num_axes)
    count = property(lambda self: self.blob.count)

    def canonical_axis_index(self, axis):
        return self.blob.canonical_axis_index(axis)

    def reshape_like(self, other):
        return self.blob.reshape_like(other)

    def __getattr__(self, name):
        if name in ("_blob", "blob"):     # not set yet (a copy made without __init__)
            raise AttributeError(name)
        return getattr(self.blob, name)

    def __repr__(self):
        return "Blob(%s) on %s (%s data, %s diff)" % (
            self.blob.shape_string(), self.side, "write" if self.write_data else "read",
            "write" if self.write_diff else "read")
