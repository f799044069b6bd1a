"""Large host arrays start on 2 MB boundaries (kernels/host_memory.py), so transparent huge
pages cover them whole; small ones are numpy's own."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.kernels import host_memory


@pytest.mark.parametrize("make", [host_memory.empty, host_memory.zeros])
@pytest.mark.parametrize("dtype", [numpy.float32, numpy.float64, numpy.int32])
def test_large_arrays_start_on_a_huge_page(make, dtype):
    size = (3 << 20) // numpy.dtype(dtype).itemsize + 7
    a = make(size, dtype)
    assert a.shape == (size,) and a.dtype == dtype and a.flags.c_contiguous
    assert a.ctypes.data % host_memory.HUGE_PAGE == 0
    a[...] = 1          # every element is its own and writable
    assert a.sum() == size
    if make is host_memory.zeros:
        assert not make(size, dtype).any()


def test_small_arrays_are_numpys_own():
    a = host_memory.zeros(1000, numpy.float32)
    assert a.base is None and a.shape == (1000,) and not a.any()


def test_a_blob_and_a_layers_scratch_on_huge_pages():
    from gradcheck import make_layer
    blob = Blob((4, 256, 32, 32))                 # 4 MB of float32
    assert blob.data.ctypes.data % host_memory.HUGE_PAGE == 0
    assert blob.diff.ctypes.data % host_memory.HUGE_PAGE == 0
    layer = make_layer('type: "ReLU"')
    layer.SetUp([blob], [blob])
    assert layer.scratch("work", (3, 1 << 20), numpy.float32).ctypes.data \
        % host_memory.HUGE_PAGE == 0


@pytest.mark.parametrize("threads", ["1", "2", "3", "16"])
@pytest.mark.parametrize("values", [1000, (3 << 22) // 4 + 5, (9 << 22) // 4 + 3])
@pytest.mark.parametrize("source", [numpy.float32, numpy.float64])
def test_copy_in_gives_every_value_at_any_thread_count(monkeypatch, threads, values, source):
    monkeypatch.setenv("OMP_NUM_THREADS", threads)
    src = numpy.random.default_rng(values).standard_normal(values).astype(source)
    dst = host_memory.empty(values, numpy.float32).reshape(1, values)
    dst[...] = numpy.nan
    host_memory.copy_in(dst, src.reshape(1, values))
    assert numpy.array_equal(dst[0], src.astype(numpy.float32))


def test_copy_in_splits_large_copies_and_keeps_small_ones_whole(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    started = []
    real = host_memory.threading.Thread

    def counted(*args, **kwargs):
        started.append(1)
        return real(*args, **kwargs)
    monkeypatch.setattr(host_memory.threading, "Thread", counted)
    part = host_memory.COPY_PART_BYTES // 4
    host_memory.copy_in(numpy.empty(part), numpy.ones(part))          # 2 parts' bytes in f8
    assert len(started) == 1
    started.clear()
    host_memory.copy_in(numpy.empty(part, numpy.float32), numpy.ones(part, numpy.float32))
    assert not started                                                  # one part's bytes
    started.clear()
    host_memory.copy_in(numpy.empty(9 * part, numpy.float32), numpy.ones(9 * part))
    assert len(started) == 3                                            # the 4 threads cap it
    a = numpy.zeros((4 * part, 2), numpy.float32)
    host_memory.copy_in(a[:, 0], numpy.ones(4 * part, numpy.float32))  # strided: whole, here
    assert a[:, 0].all() and not a[:, 1].any() and len(started) == 3


def test_copy_in_raises_a_helpers_error_on_the_caller(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    n = host_memory.COPY_PART_BYTES // 2
    src = numpy.zeros(n, object)
    src[-1] = "not a number"                       # in the helper thread's part
    with pytest.raises(ValueError):
        host_memory.copy_in(numpy.empty(n, numpy.float32), src)


def test_a_caffemodels_large_blob_loads_exactly(tmp_path, monkeypatch):
    """A blob past COPY_PART_BYTES x 2 goes in by copy_in's parts: the same values back."""
    from caffecli.proto import caffe_pb2
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    values = numpy.random.default_rng(0).standard_normal(3 * host_memory.COPY_PART_BYTES // 4 + 1)
    proto = Blob((values.size,)).to_proto()
    proto.data[:] = values.astype(numpy.float32)
    net = caffe_pb2.NetParameter()
    net.layer.add(name="ip", type="InnerProduct").blobs.add().CopyFrom(proto)
    path = tmp_path / "w.caffemodel"
    path.write_bytes(net.SerializeToString())
    from caffecli.proto.caffemodel import open_caffemodel
    with open_caffemodel(str(path)) as (param, given):
        blob = Blob((values.size,))
        assert not param.layer[0].blobs[0].data           # cut out, left in the mapping
        blob.from_proto(param.layer[0].blobs[0], reshape=False, values=given.get("ip", 0, 0))
    assert numpy.array_equal(blob.data, values.astype(numpy.float32))
