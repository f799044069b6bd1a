"""Reading and writing Caffe's protobuf files: prototxt (text) and binary, with clear errors.

A text-format error names ``file:line:column``; binary files are written atomically
(temporary file, fsync, rename) so an interrupted write never leaves a truncated file.
"""
import os
import re
import tempfile

import numpy

from google.protobuf import text_format
from google.protobuf.message import DecodeError

from ..errors import CaffeError
from . import caffe_pb2
from .upgrade import upgrade_net_as_needed, upgrade_solver_as_needed


def _read_bytes(path, what):
    with open_binary(path, what) as f:
        return f.read()


def open_binary(path, what):
    """``path`` opened for reading bytes; a missing or unreadable file is one CaffeError."""
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise CaffeError("%s: file not found (%s)" % (path, what)) from None
    except IsADirectoryError:
        raise CaffeError("%s: is a directory, expected a %s" % (path, what)) from None
    except OSError as exc:
        raise CaffeError("%s: cannot read %s: %s" % (path, what, exc.strerror)) from None


def parse_text(text, message, source="<string>"):
    """Parse prototxt ``text`` into ``message``; errors read ``source:line:col: message``."""
    try:
        text_format.Merge(text, message)
    except text_format.ParseError as exc:
        line, col = exc.GetLine(), exc.GetColumn()
        msg = str(exc)
        # protobuf prefixes "line:col : "; keep only the explanation.
        if line is not None and msg.startswith("%s:%s" % (line, col)):
            msg = msg.split(":", 2)[-1].lstrip(" :")
        raise CaffeError("%s:%s:%s: %s" % (source, line if line is not None else "?",
                                           col if col is not None else "?", msg)) from None
    missing = message.FindInitializationErrors()   # protobuf's C++ parser, Caffe's, refuses
    if missing:
        raise CaffeError("%s: missing required field%s %s" % (
            source, "s" if len(missing) > 1 else "", ", ".join(missing)))
    return message


def read_text(path, message, what="prototxt"):
    data = _read_bytes(path, what)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise CaffeError("%s: not a text %s (is it a binary file?)" % (path, what)) from None
    return parse_text(text, message, path)


def read_binary(path, message, what="binary proto"):
    data = _read_bytes(path, what)
    try:
        message.ParseFromString(data)
    except DecodeError:
        raise CaffeError("%s: not a valid %s (truncated or wrong file type)"
                         % (path, what)) from None
    return message


def read_net_param(path):
    """A NetParameter from a .prototxt or a binary .caffemodel, upgraded from V0/V1 as needed."""
    param = caffe_pb2.NetParameter()
    if _looks_binary(path):
        read_binary(path, param, "binary net")
    else:
        read_text(path, param, "net prototxt")
    return upgrade_net_as_needed(param, path)


def read_solver_param(path):
    param = read_text(path, caffe_pb2.SolverParameter(), "solver prototxt")
    return upgrade_solver_as_needed(param, path)


def read_blob_proto(path):
    return read_binary(path, caffe_pb2.BlobProto(), "binaryproto blob")


def _looks_binary(path):
    if path.endswith((".caffemodel", ".binaryproto", ".solverstate")):
        return True
    if path.endswith((".prototxt", ".pt", ".txt")):
        return False
    head = _read_bytes(path, "net file")[:512]
    return b"\0" in head or any(b > 127 for b in head[:64])


def _umask():
    """The process umask, read without changing it where /proc says it (os.umask can only be
    read by setting it, which races with threads creating files)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_bytes_atomic(path, data):
    """Write ``data`` to ``path`` via a temporary file in the same folder and a rename; the
    file gets the permissions open() would give it under the umask (mkstemp's are 0600)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp",
                               dir=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o666 & ~_umask())
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_binary(path, message):
    write_bytes_atomic(path, message.SerializeToString())


_FLOAT_VALUE = re.compile(r"^(\s*\w+: )(-?(?:\d+\.\d*(?:e[+-]?\d+)?|\d+e[+-]?\d+))$", re.M)


_DOUBLE_FIELDS = ("double_data:", "double_diff:")   # caffe.proto's only double fields


def _cpp_float(match):
    """A number as C++'s SimpleFtoa prints a float (%.6g, or %.9g when that does not round-
    trip) or, for the double fields, SimpleDtoa a double (%.15g, else %.17g)."""
    if match.group(1).strip() in _DOUBLE_FIELDS:
        value = float(match.group(2))
        text = "%.15g" % value
        return match.group(1) + (text if float(text) == value else "%.17g" % value)
    value = float(numpy.float32(float(match.group(2))))
    text = "%.6g" % value
    if numpy.float32(float(text)) != numpy.float32(value):
        text = "%.9g" % value
    return match.group(1) + text


def net_to_text(message):
    """Text as C++'s TextFormat prints it (DebugString, WriteProtoToTextFile): floats as '2',
    not '2.0', and strings C-escaped, bytes past ASCII as octal (the 'Initializing ... from
    parameters' logs and the upgrade tools' files)."""
    return _FLOAT_VALUE.sub(_cpp_float, text_format.MessageToString(message, as_utf8=False))
