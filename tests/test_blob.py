"""Blob: shapes, capacity-keeping reshape, sharing, proto round trips."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2


def test_shape_and_counts():
    b = Blob((2, 3, 4, 5))
    assert b.shape == (2, 3, 4, 5) and b.count == 120 and b.count() == 120
    assert b.count(1) == 60 and b.count(1, 3) == 12
    assert (b.num, b.channels, b.height, b.width) == (2, 3, 4, 5)
    assert b.canonical_axis_index(-1) == 3
    with pytest.raises(CaffeError, match="out of range"):
        b.canonical_axis_index(4)
    assert b.shape_string() == "2 3 4 5 (120)"
    assert Blob(()).count == 1 and Blob(()).shape_string() == "(1)"


def test_legacy_accessors_pad_with_one():
    b = Blob((7, 3))
    assert (b.num, b.channels, b.height, b.width) == (7, 3, 1, 1)


def test_reshape_keeps_capacity_and_values():
    b = Blob((2, 3))
    b.data[...] = numpy.arange(6).reshape(2, 3)
    buf = b._data_mem
    b.reshape(3, 2)
    assert b._data_mem is buf
    assert b.data.tolist() == [[0, 1], [2, 3], [4, 5]]
    b.reshape(4, 4)
    assert b.count == 16 and b._data_mem is not buf


def test_data_is_writable_view():
    b = Blob((2, 2))
    b.data[...] = 3
    b.diff[...] = 1
    b.update()
    assert numpy.all(b.data == 2)
    assert b.asum_data() == 8 and b.sumsq_diff() == 4


def test_share_data():
    a, b = Blob((3,)), Blob((3,))
    b.share_data(a)
    a.data[...] = [1, 2, 3]
    assert b.data.tolist() == [1, 2, 3]
    with pytest.raises(CaffeError):
        Blob((4,)).share_data(a)


def test_proto_roundtrip_float_and_double():
    b = Blob((2, 3))
    b.data[...] = numpy.arange(6).reshape(2, 3) / 7.0
    p = b.to_proto()
    assert list(p.shape.dim) == [2, 3]
    c = Blob().from_proto(p)
    assert numpy.array_equal(c.data, b.data)
    pd = b.to_proto(double=True, write_diff=True)
    assert len(pd.double_data) == 6 and len(pd.double_diff) == 6
    assert numpy.allclose(Blob(dtype=numpy.float64).from_proto(pd).data, b.data)


def test_legacy_4d_proto():
    p = caffe_pb2.BlobProto(num=1, channels=2, height=1, width=3)
    p.data.extend(range(6))
    b = Blob().from_proto(p)
    assert b.shape == (1, 2, 1, 3)
    # a 2-D blob matches a legacy proto with leading 1s (Caffe's ShapeEquals)
    p2 = caffe_pb2.BlobProto(num=1, channels=1, height=2, width=3)
    assert Blob((2, 3)).shape_equals(p2)
    with pytest.raises(CaffeError, match="shape mismatch"):
        Blob((3, 2)).from_proto(p2, reshape=False)


def test_host_views_alias_data_on_cpu():
    b = Blob((2, 2))
    b.host_data[...] = 5
    assert numpy.all(b.data == 5)
    b.data[...] = 1
    assert numpy.all(b.host_data == 1) and numpy.all(b.host_diff == 0)


def test_synced_memory_head_protocol(monkeypatch):
    """With a stand-in 'device' module, host writes reach the primary copy and back."""
    from caffecli import synced_memory

    class FakeDeviceArray(numpy.ndarray):
        def set(self, host):
            self[...] = host

    mem = synced_memory.SyncedMemory(4, numpy.float32)
    mem._primary = numpy.zeros(4, numpy.float32).view(FakeDeviceArray)
    monkeypatch.setattr(synced_memory.SyncedMemory, "on_host_backend", property(lambda s: False))
    mem.primary()[...] = 3           # a layer writes on the device
    h = mem.host()                   # the user reads: pulled once
    assert h.tolist() == [3, 3, 3, 3] and mem.head == synced_memory.AT_HOST
    h[...] = 7                       # the user writes on the host
    assert mem.primary().tolist() == [7, 7, 7, 7] and mem.head == synced_memory.AT_PRIMARY
