"""A binary .caffemodel read so that each blob's values are copied once, into their blob.

The file is mapped, not read; its layers' BlobProto values (packed ``data``, ``diff``,
``double_data``, ``double_diff``) are cut out of the message before protobuf parses the rest,
and kept as views of the mapping, which the loader copies into the parameter blobs. Anything
this walk does not recognise is left in the message for protobuf to parse as usual.
"""
import contextlib
import mmap

import numpy
from google.protobuf.message import DecodeError

from ..errors import CaffeError
from . import caffe_pb2
from .io import open_binary

# (NetParameter field, its layer message's name field, its blobs field): layer / V1 layers
LAYER_FIELDS = {100: (1, 7), 2: (4, 6)}
VALUE_FIELDS = {5: ("data", "<f4"), 6: ("diff", "<f4"), 8: ("data", "<f8"), 9: ("diff", "<f8")}


class _Malformed(Exception):
    pass


def _varint(buf, pos, end):
    value = shift = 0
    while True:
        if pos >= end or shift > 63:
            raise _Malformed()
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _encode_varint(value):
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _fields(buf, start, end):
    """(field number, wire type, tag start, value start, value end) of each field."""
    pos = start
    while pos < end:
        tag, value_start = _varint(buf, pos, end)
        field, wire = tag >> 3, tag & 7
        if wire == 0:
            _, value_end = _varint(buf, value_start, end)
        elif wire == 1:
            value_end = value_start + 8
        elif wire == 5:
            value_end = value_start + 4
        elif wire == 2:
            length, value_start = _varint(buf, value_start, end)
            value_end = value_start + length
        else:  # groups: not in caffe.proto
            raise _Malformed()
        if value_end > end or field == 0:
            raise _Malformed()
        yield field, wire, pos, value_start, value_end
        pos = value_end


def _length_delimited(field, body):
    return _encode_varint(field << 3 | 2) + _encode_varint(len(body)) + body


def _strip_blob(buf, start, end):
    """(BlobProto bytes without its packed values, {role: little-endian view of the values})."""
    fields = list(_fields(buf, start, end))
    numbers = [f[0] for f in fields]
    kept, values = [], {}
    for field, wire, tag_start, value_start, value_end in fields:
        spec = VALUE_FIELDS.get(field)
        if spec and wire == 2 and numbers.count(field) == 1 and spec[0] not in values:
            dtype = numpy.dtype(spec[1])
            if (value_end - value_start) % dtype.itemsize:
                raise _Malformed()
            values[spec[0]] = numpy.frombuffer(buf, dtype, (value_end - value_start)
                                               // dtype.itemsize, value_start)
        else:
            kept.append(bytes(buf[tag_start:value_end]))
    return b"".join(kept), values


def _strip_layer(buf, start, end, name_field, blobs_field):
    """(layer bytes without blob values, layer name, [values of each blob])."""
    kept, name, blobs = [], "", []
    for field, wire, tag_start, value_start, value_end in _fields(buf, start, end):
        if field == blobs_field and wire == 2:
            body, values = _strip_blob(buf, value_start, value_end)
            kept.append(_length_delimited(field, body))
            blobs.append(values)
            continue
        if field == name_field and wire == 2:
            name = bytes(buf[value_start:value_end]).decode("utf-8", "replace")
        kept.append(bytes(buf[tag_start:value_end]))
    return b"".join(kept), name, blobs


class BlobValues:
    """The values cut out of a caffemodel, by layer name, occurrence of that name, blob index."""

    def __init__(self):
        self._by_layer = {}

    def add(self, name, blobs):
        self._by_layer.setdefault(name, []).append(blobs)

    def get(self, name, occurrence, index):
        """{"data": array, "diff": array} (either may be missing) for one blob, or {}."""
        layers = self._by_layer.get(name, [])
        if occurrence < len(layers) and index < len(layers[occurrence]):
            return layers[occurrence][index]
        return {}

    def clear(self):
        self._by_layer.clear()


def _split(buf, path):
    values = BlobValues()
    kept = []
    try:
        for field, wire, tag_start, value_start, value_end in _fields(buf, 0, len(buf)):
            if field in LAYER_FIELDS and wire == 2:
                body, name, blobs = _strip_layer(buf, value_start, value_end,
                                                 *LAYER_FIELDS[field])
                kept.append(_length_delimited(field, body))
                values.add(name, blobs)
            else:
                kept.append(bytes(buf[tag_start:value_end]))
        param = caffe_pb2.NetParameter()
        param.ParseFromString(b"".join(kept))
    except (_Malformed, DecodeError):
        values.clear()
        raise CaffeError("%s: not a valid caffemodel (truncated or wrong file type)"
                         % path) from None
    return param, values


@contextlib.contextmanager
def open_caffemodel(path):
    """(NetParameter without blob values, BlobValues viewing the mapped file), inside."""
    with open_binary(path, "caffemodel") as f:
        if not f.seek(0, 2):
            yield caffe_pb2.NetParameter(), BlobValues()
            return
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        values = None
        try:
            param, values = _split(mapped, path)
            yield param, values
        finally:
            if values is not None:
                values.clear()  # the views go before the mapping closes
            try:
                mapped.close()
            except BufferError:  # a view still held (by a traceback): closed when it dies
                pass
