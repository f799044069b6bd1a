"""MemoryData, DummyData, HDF5Data/HDF5Output and WindowData layers."""
import h5py
import numpy
import pytest

import caffecli
from caffecli import caffe_rng
from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2
from data_helpers import close_net, data_net, write_png


def test_memory_data_batches_wrap_and_label_shape():
    net = data_net('name: "m" type: "MemoryData" top: "data" top: "label" memory_data_param '
                   '{ batch_size: 2 channels: 1 height: 2 width: 3 }')
    layer = net.layers[0]
    with pytest.raises(CaffeError, match="set_input_arrays"):
        net.forward_pass()
    data = numpy.arange(4 * 6, dtype=numpy.float32).reshape(4, 1, 2, 3)
    layer.set_input_arrays(data, numpy.array([5, 6, 7, 8], dtype=numpy.float32))
    got = []
    for _ in range(3):
        net.forward_pass()
        got.append(net.blob_by_name("label").data.ravel().tolist())
    assert got == [[5, 6], [7, 8], [5, 6]]
    assert net.blob_by_name("label").shape == (2, 1, 1, 1)
    numpy.testing.assert_array_equal(net.blob_by_name("data").data, data[:2])
    with pytest.raises(CaffeError, match="multiple"):
        layer.set_input_arrays(data[:3], numpy.zeros(3, numpy.float32))
    with pytest.raises(CaffeError, match="shape"):
        layer.set_input_arrays(numpy.zeros((2, 1, 3, 3), numpy.float32), numpy.zeros(2))


def test_memory_data_add_datum_vector_transforms():
    net = data_net('name: "m" type: "MemoryData" top: "data" top: "label" transform_param '
                   '{ scale: 2 } memory_data_param { batch_size: 1 channels: 1 height: 1 '
                   'width: 2 }')
    d = caffe_pb2.Datum(channels=1, height=1, width=2, data=bytes([3, 4]), label=9)
    net.layers[0].add_datum_vector([d])
    net.forward_pass()
    assert net.blob_by_name("data").data.ravel().tolist() == [6, 8]
    assert net.blob_by_name("label").data.ravel().tolist() == [9]


def test_dummy_data_legacy_dims_and_random_refill():
    caffecli.set_random_seed(0)
    net = data_net('name: "d" type: "DummyData" top: "a" top: "b" dummy_data_param { '
                   'num: 2 channels: 3 height: 1 width: 4 data_filler { type: "gaussian" } '
                   'data_filler { type: "constant" value: 2 } }')
    a = net.blob_by_name("a")
    assert a.shape == (2, 3, 1, 4)
    first = a.data.copy()
    net.forward_pass()
    assert not numpy.array_equal(first, a.data)
    numpy.testing.assert_array_equal(net.blob_by_name("b").data, 2)


def test_dummy_data_shape_count_errors():
    with pytest.raises(CaffeError, match="shape"):
        data_net('name: "d" type: "DummyData" top: "a" top: "b" top: "c" dummy_data_param { '
                 'shape { dim: 1 } shape { dim: 2 } }')


def _h5_files(tmp_path, sizes):
    names = []
    for i, n in enumerate(sizes):
        name = str(tmp_path / ("p%d.h5" % i))
        with h5py.File(name, "w") as f:
            f["data"] = numpy.arange(n * 2, dtype=numpy.float64).reshape(n, 2) + 1000 * i
            f["label"] = numpy.arange(n, dtype=numpy.int32) + 100 * i
        names.append(name)
    (tmp_path / "list.txt").write_text("\n".join(names) + "\n")
    return str(tmp_path / "list.txt")


def test_hdf5_data_crosses_files_and_wraps(tmp_path):
    src = _h5_files(tmp_path, [3, 2])
    net = data_net('name: "h" type: "HDF5Data" top: "data" top: "label" hdf5_data_param '
                   '{ source: "%s" batch_size: 4 }' % src)
    labels = []
    for _ in range(3):
        net.forward_pass()
        labels += net.blob_by_name("label").data.astype(int).tolist()
    assert labels == [0, 1, 2, 100, 101, 0, 1, 2, 100, 101, 0, 1]
    assert net.blob_by_name("data").dtype == numpy.float32


def test_hdf5_data_shuffle_state_resumes(tmp_path):
    src = _h5_files(tmp_path, [3, 4, 2])
    caffecli.set_random_seed(3)
    net = data_net('name: "h" type: "HDF5Data" top: "data" top: "label" hdf5_data_param '
                   '{ source: "%s" batch_size: 4 shuffle: true }' % src)
    seen = []
    for _ in range(9):        # 36 rows = 4 epochs of 9
        net.forward_pass()
        seen += net.blob_by_name("label").data.astype(int).tolist()
    for e in range(4):
        assert sorted(seen[9 * e:9 * e + 9]) == [0, 1, 2, 100, 101, 102, 103, 200, 201]
    state = net.layers[0].get_data_state()
    c_rand = list(caffe_rng.c_rand.state)   # reshuffles draw from C's rand(), as Caffe's do
    after = []
    for _ in range(3):
        net.forward_pass()
        after.append(net.blob_by_name("label").data.copy())
    net.layers[0].set_data_state(state)
    caffe_rng.c_rand.state = c_rand
    for want in after:
        net.forward_pass()
        numpy.testing.assert_array_equal(net.blob_by_name("label").data, want)


def test_hdf5_data_errors(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(CaffeError, match="at least 1 HDF5"):
        data_net('name: "h" type: "HDF5Data" top: "data" hdf5_data_param { source: "%s" '
                 'batch_size: 1 }' % (tmp_path / "empty.txt"))
    src = _h5_files(tmp_path, [2])
    with pytest.raises(CaffeError, match="dataset nope"):
        data_net('name: "h" type: "HDF5Data" top: "nope" hdf5_data_param { source: "%s" '
                 'batch_size: 1 }' % src)
    with pytest.raises(CaffeError, match="does not transform"):
        data_net('name: "h" type: "HDF5Data" top: "data" transform_param { scale: 2 } '
                 'hdf5_data_param { source: "%s" batch_size: 1 }' % src)


def test_hdf5_output_writes_data_and_label(tmp_path):
    out = tmp_path / "out.h5"
    net = data_net('name: "d" type: "DummyData" top: "x" top: "y" dummy_data_param { '
                   'shape { dim: 2 dim: 3 } shape { dim: 2 } data_filler { type: "constant" '
                   'value: 4 } } } layer { name: "o" type: "HDF5Output" bottom: "x" bottom: "y" '
                   'hdf5_output_param { file_name: "%s" }' % out)
    net.forward_pass()
    with h5py.File(out, "r") as f:
        assert f["data"].shape == (2, 3, 1, 1) and f["label"].shape == (2, 1, 1, 1)
        numpy.testing.assert_array_equal(f["data"][()], 4)
    # batch sizes are checked when written (Caffe's Forward_cpu), so a net may build with a
    # label blob it reshapes before its first forward pass
    odd = data_net('name: "d" type: "DummyData" top: "x" top: "y" dummy_data_param { '
                   'shape { dim: 2 dim: 3 } shape { dim: 3 } } } layer { name: "o" type: '
                   '"HDF5Output" bottom: "x" bottom: "y" hdf5_output_param { file_name: "%s" }'
                   % (tmp_path / "odd.h5"))
    with pytest.raises(CaffeError, match="same batch size"):
        odd.forward_pass()


def test_window_data_samples_fg_and_bg_windows(tmp_path):
    img = numpy.zeros((20, 30, 3), numpy.uint8)
    img[:, 15:] = 200
    write_png(str(tmp_path / "a.png"), img)
    (tmp_path / "windows.txt").write_text(
        "# 0\n%s\n3\n20\n30\n3\n1 0.9 15 0 29 19\n2 0.8 16 2 28 18\n0 0.1 0 0 14 19\n"
        % (tmp_path / "a.png"))
    caffecli.set_random_seed(0)
    text = ('name: "w" type: "WindowData" top: "data" top: "label" transform_param { '
            'crop_size: 8 mirror: true mean_value: 100 } window_data_param { source: '
            '"%s" batch_size: 8 fg_fraction: 0.5 %%s }' % (tmp_path / "windows.txt"))
    net = data_net(text % "", phase=caffe_pb2.TRAIN)
    for _ in range(2):
        net.forward_pass()
    data, label = net.blob_by_name("data").data, net.blob_by_name("label").data
    assert data.shape == (8, 3, 8, 8)
    assert (label[:4] == 0).all() and set(label[4:].tolist()) <= {1, 2}
    # warped background windows are black (0 - 100), foreground ones grey (200 - 100)
    assert (data[:4] == -100).all() and (data[4:] == 100).all()
    close_net(net)
    # square context box of the background window 0,0..14,19 is -6,-3..21,23: clipped to the
    # image it lands in rows 1..6 (rows 0 and 7 stay zero) and takes in grey columns x >= 15
    net = data_net(text % 'context_pad: 1 crop_mode: "square"', phase=caffe_pb2.TRAIN)
    net.forward_pass()
    bg = net.blob_by_name("data").data[:4]
    assert (bg[:, :, 0, :] == 0).all() and (bg[:, :, 7, :] == 0).all()
    assert bg[:, :, 1:7].min() == -100 and bg[:, :, 1:7].max() == 100
    close_net(net)


# ---- pycaffe's Net.set_input_arrays -------------------------------------------------------
MEMORY_NET = '''name: "m"
layer { name: "mem" type: "MemoryData" top: "data" top: "label"
        memory_data_param { batch_size: 2 channels: 1 height: 2 width: 2 } }
layer { name: "pow" type: "Power" bottom: "data" top: "twice" power_param { scale: 2 } }
'''


def test_net_set_input_arrays_feeds_memory_data(tmp_path):
    import caffecli as caffe
    (tmp_path / "m.prototxt").write_text(MEMORY_NET)
    net = caffe.Net(str(tmp_path / "m.prototxt"), caffe.TEST)
    data = numpy.arange(16, dtype=numpy.float32).reshape(4, 1, 2, 2)
    net.set_input_arrays(data, numpy.array([[[[7]]], [[[8]]], [[[9]]], [[[6]]]], numpy.float32))
    out = net.forward()
    assert out["twice"].tolist() == (2 * data[:2]).tolist()
    assert net.blobs["label"].data.reshape(-1).tolist() == [7, 8]  # N x 1 x 1 x 1 as Caffe
    net.forward()
    assert net.blobs["data"].data.tolist() == data[2:].tolist()
    assert net.blobs["label"].data.reshape(-1).tolist() == [9, 6]


def test_net_set_input_arrays_errors(tmp_path):
    import caffecli as caffe
    (tmp_path / "m.prototxt").write_text(MEMORY_NET)
    net = caffe.Net(str(tmp_path / "m.prototxt"), caffe.TEST)
    good = numpy.zeros((2, 1, 2, 2), numpy.float32)
    with pytest.raises(CaffeError, match="float32"):
        net.set_input_arrays(good.astype(numpy.float64), numpy.zeros(2, numpy.float32))
    with pytest.raises(CaffeError, match="data array must be 4-d"):
        net.set_input_arrays(numpy.zeros((2, 4), numpy.float32), numpy.zeros(2, numpy.float32))
    (tmp_path / "p.prototxt").write_text(
        'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 1 } } }\n')
    plain = caffe.Net(str(tmp_path / "p.prototxt"), caffe.TEST)
    with pytest.raises(CaffeError, match="first layer is a MemoryDataLayer.*Input"):
        plain.set_input_arrays(good, numpy.zeros(2, numpy.float32))


def test_memory_data_reset_warns_that_it_does_not_transform(capsys):
    """Caffe's Reset warns when the layer has a transform_param, which arrays skip."""
    from caffecli import glog
    glog.set_stream(None)
    for extra, warned in (("", False), ("transform_param { scale: 0.5 } ", True)):
        net = data_net('name: "m" type: "MemoryData" top: "data" top: "label" %s'
                       'memory_data_param { batch_size: 1 channels: 1 height: 1 width: 2 }'
                       % extra)
        capsys.readouterr()
        net.layers[0].set_input_arrays(numpy.ones((1, 1, 1, 2), numpy.float32),
                                       numpy.zeros(1, numpy.float32))
        net.forward_pass()
        err = capsys.readouterr().err
        assert ("MemoryData does not transform array data on Reset()" in err) == warned
        assert (net.blob_by_name("data").data == 1).all()   # untransformed either way


def test_window_data_logs_caffes_set_up_lines(tmp_path, capsys):
    """window_data_layer.cpp's DataLayerSetUp lines, in its order: the parameters, each image
    whose index is a multiple of 100, the last index + 1, windows kept per class, context pad,
    crop mode, output size."""
    from caffecli import glog
    write_png(str(tmp_path / "a.png"), numpy.zeros((20, 30, 3), numpy.uint8))
    (tmp_path / "windows.txt").write_text(
        "# 0\na.png\n3\n20\n30\n2\n2 0.9 15 0 29 19\n0 0.1 0 0 14 19\n"
        "# 4\na.png\n3\n20\n30\n2\n2 0.7 1 1 9 9\n5 0.4 1 1 9 9\n")
    glog.set_stream(None)
    net = data_net('name: "w" type: "WindowData" top: "data" top: "label" transform_param { '
                   'crop_size: 8 } window_data_param { source: "%s" root_folder: "%s/" '
                   'batch_size: 2 context_pad: 3 }' % (tmp_path / "windows.txt", tmp_path))
    lines = [line.split("] ", 1)[1] for line in capsys.readouterr().err.splitlines()
             if "window_data_layer.cpp" in line]
    assert lines == ["Window data layer:", "num: 0 %s/a.png 3 20 30 windows to process: 2"
                     % tmp_path, "Number of images: 5", "class 0 has 2 samples",
                     "class 2 has 2 samples", "Amount of context padding: 3",
                     "Crop mode: warp", "output data size: 2,3,8,8"]
    close_net(net)
