"""Blob: shapes, capacity-keeping reshape, sharing, proto round trips."""
import numpy
import pytest

from caffecli import context, syncedmem
from caffecli.blob import Blob
from caffecli.context import CPU, GPU
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
    assert Blob().shape_string() == "(0)"   # never shaped: count 0, as Caffe's default Blob


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


def test_reshape_to_its_own_shape_keeps_its_views():
    """A layer reshapes its tops at every forward: to the same shape, the blob's views stay
    (the same arrays, values kept); a never-shaped blob still takes its first shape, and a
    shape given as numpy integers or a list still works."""
    b = Blob((2, 3))
    view, diff = b.data, b.diff
    view[...] = 5
    assert b.reshape((2, 3)) is b and b.data is view and b.diff is diff
    assert b.reshape((numpy.int64(2), numpy.int64(3))).shape == (2, 3) and b.data is view
    assert b.reshape([2, 3]).data.sum() == 30
    assert b.reshape((3, 2)).data is not view and b.shape == (3, 2)
    fresh = Blob()
    assert fresh.reshape(()).count == 1 and fresh.shape_string() == "(1)"


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


def test_data_is_the_host_copy_and_cpu_side_views_alias_it():
    b = Blob((2, 2))
    b.data[...] = 5
    assert isinstance(b.data, numpy.ndarray) and numpy.all(b.cpu_data() == 5)
    b.at(CPU).data[...] = 1
    assert numpy.all(b.data == 1) and numpy.all(b.diff == 0)
    assert b.at(CPU) is b.at(CPU) and b.at(CPU).shape == (2, 2)


def test_share_data_shares_the_synced_memory_and_its_head(standin):
    a, b = Blob((2, 3)), Blob((3, 2))
    b.share_data(a.at(GPU))          # a side view shares like its blob
    a.at(GPU).data[...] = 2          # written on the device through a
    assert b.data_head == syncedmem.HEAD_AT_GPU and b.data.tolist() == [[2, 2]] * 3
    assert a.shares_data_with(b) and a._diff_mem is not b._diff_mem


def test_update_and_asum_follow_the_head(standin):
    b = Blob((3,))
    b.data[...] = [1, 2, 3]
    b.diff[...] = [1, 1, 1]
    b.update()                       # both at the host: a host update, no copy
    assert b.data.tolist() == [0, 1, 2] and standin.transfers == {"h2d": 0, "d2h": 0}
    b.at(GPU).data                   # data now at the device (one copy in)
    b.update()                       # diff is pushed; the update runs on the device
    assert b.data_head == syncedmem.HEAD_AT_GPU and b.diff_head == syncedmem.SYNCED
    assert standin.transfers == {"h2d": 2, "d2h": 0}
    assert b.asum_data() == 2.0      # reduced on the device: one scalar comes back
    assert standin.transfers == {"h2d": 2, "d2h": 1}
    assert b.data.tolist() == [-1, 0, 1]


def test_copy_from_runs_on_the_modes_side(standin):
    a, b = Blob((2,)), Blob((2,))
    a.data[...] = [4, 5]
    context.set_mode_gpu()
    b.copy_from(a)
    assert b.data_head == syncedmem.HEAD_AT_GPU and a.data_head == syncedmem.SYNCED
    assert b.data.tolist() == [4, 5]
