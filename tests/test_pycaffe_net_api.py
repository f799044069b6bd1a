"""pycaffe's Net API through ``import caffe``: batched runs, HDF5 weights, blob attributes,
layer callbacks, MemoryData arrays and the low-level names pycaffe.py builds on."""
import collections

import h5py
import numpy
import pytest

import caffe
from caffecli.errors import CaffeError

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode

LINEAR = """name: "linear"
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.5 }
    bias_filler { type: "gaussian" std: 1 } } }
layer { name: "triple" type: "Power" bottom: "ip" top: "out" power_param { scale: 3 } %s }
"""


def net_file(tmp_path, text, name="net.prototxt"):
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.fixture
def linear(tmp_path):
    return caffe.Net(net_file(tmp_path, LINEAR % ""), caffe.TEST)


def items(n, seed=0, width=3):
    return numpy.random.default_rng(seed).standard_normal((n, width)).astype(numpy.float32)


def affine(net, x):
    w, b = (p.data for p in net.params["ip"])
    return x @ w.T + b


# ---- forward_all / forward_backward_all ----------------------------------------------------
def test_forward_all_chunks_pads_and_drops_the_padding(linear):
    x = items(10)                            # batch 4: chunks of 4, 4 and 2 + 2 zero rows
    out = linear.forward_all(blobs=["ip"], data=x)
    assert set(out) == {"out", "ip"}
    assert out["out"].shape == (10, 2) and out["ip"].shape == (10, 2)
    numpy.testing.assert_allclose(out["ip"], affine(linear, x), rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(out["out"], 3 * affine(linear, x), rtol=1e-5, atol=1e-5)
    last = linear.blobs["data"].data
    numpy.testing.assert_array_equal(last[:2], x[8:])
    assert not last[2:].any()                # the last chunk was padded with zeros


def test_forward_all_on_whole_batches_and_needs_arrays(linear):
    x = items(8, seed=1)
    out = linear.forward_all(data=x)
    assert list(out) == ["out"] and out["out"].shape == (8, 2)
    with pytest.raises(TypeError, match="needs arrays"):
        linear.forward_all()
    with pytest.raises(Exception, match="do not match net inputs"):
        linear.forward_all(nope=x)


def test_forward_backward_all_feeds_inputs_and_top_diffs(linear):
    x, g = items(6, seed=2), items(6, seed=3, width=2)
    outs, diffs = linear.forward_backward_all(blobs=["ip"], diffs=["ip"], data=x, out=g)
    assert set(outs) == {"out", "ip"} and set(diffs) == {"data", "ip"}
    assert all(v.shape[0] == 6 for v in list(outs.values()) + list(diffs.values()))
    w = linear.params["ip"][0].data
    numpy.testing.assert_allclose(outs["out"], 3 * affine(linear, x), rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(diffs["ip"], 3 * g, rtol=1e-6)
    numpy.testing.assert_allclose(diffs["data"], 3 * g @ w, rtol=1e-5, atol=1e-5)


def test_forward_backward_all_without_top_diffs_backs_up_the_loss(tmp_path):
    net = caffe.Net(net_file(tmp_path, LINEAR % "loss_weight: 1"), caffe.TEST)
    outs, diffs = net.forward_backward_all(data=items(5, seed=4))
    assert outs["out"].shape == (5, 2) and diffs["data"].shape == (5, 3)
    want = 3 * net.params["ip"][0].data.sum(axis=0)   # d(sum out)/d data, every item
    numpy.testing.assert_allclose(diffs["data"], numpy.tile(want, (5, 1)), rtol=1e-5)


# ---- weights -------------------------------------------------------------------------------
def test_save_hdf5_and_load_hdf5_whatever_the_file_name(linear, tmp_path):
    path = str(tmp_path / "weights")         # no .h5 suffix: the format is the method's
    linear.save_hdf5(path)
    with h5py.File(path, "r") as f:
        numpy.testing.assert_array_equal(f["data/ip/0"][()], linear.params["ip"][0].data)
        assert sorted(f["data/ip"]) == ["0", "1"]
    other = caffe.Net(net_file(tmp_path, LINEAR % ""), caffe.TEST)
    other.load_hdf5(path)
    for mine, theirs in zip(linear.params["ip"], other.params["ip"]):
        numpy.testing.assert_array_equal(mine.data, theirs.data)


def test_save_writes_binary_proto_and_load_hdf5_refuses_it(linear, tmp_path):
    path = str(tmp_path / "weights.h5")      # pycaffe's save is binary whatever the name
    linear.save(path)
    assert not h5py.is_hdf5(path)
    other = caffe.Net(net_file(tmp_path, LINEAR % ""), caffe.TEST)
    other.copy_from(path)
    numpy.testing.assert_array_equal(other.params["ip"][1].data, linear.params["ip"][1].data)
    with pytest.raises(CaffeError, match="weights.h5: not an HDF5 weights file"):
        other.load_hdf5(path)


# ---- blobs ---------------------------------------------------------------------------------
SHAPES = """name: "shapes"
layer { name: "a" type: "Input" top: "four" top: "two" top: "five"
  input_param { shape { dim: 2 dim: 3 dim: 4 dim: 5 } shape { dim: 6 dim: 7 }
                shape { dim: 1 dim: 2 dim: 3 dim: 4 dim: 5 } } }
"""


def test_blob_legacy_dims_count_and_reshape(tmp_path):
    net = caffe.Net(net_file(tmp_path, SHAPES), caffe.TEST)
    four, two, five = (net.blobs[n] for n in ("four", "two", "five"))
    assert (four.num, four.channels, four.height, four.width, four.count) == (2, 3, 4, 5, 120)
    assert (two.num, two.channels, two.height, two.width, two.count) == (6, 7, 1, 1, 42)
    assert five.count == 120 and five.shape == (1, 2, 3, 4, 5)
    with pytest.raises(CaffeError, match="at most 4 axes"):
        five.num
    four.reshape(1, 2, 3, 4)
    assert four.data.shape == four.diff.shape == (1, 2, 3, 4) and four.count == 24
    four.reshape()
    assert four.data.shape == () and four.count == 1


# ---- low-level names pycaffe.py builds on --------------------------------------------------
def test_blob_loss_weights_blobs_and_id_lists(tmp_path):
    net = caffe.Net(net_file(tmp_path, LINEAR % "loss_weight: 2"), caffe.TEST)
    assert net.blob_loss_weights == collections.OrderedDict(
        [("data", 0.0), ("ip", 0.0), ("out", 2.0)])
    assert [b is net.blobs[n] for b, n in zip(net._blobs, net.blobs)] == [True] * 3
    assert [net._top_ids(i) for i in range(3)] == [[0], [1], [2]]
    assert [net._bottom_ids(i) for i in range(3)] == [[], [0], [1]]


def test_constructor_takes_pycaffes_keyword_names(linear, tmp_path):
    weights = str(tmp_path / "w.caffemodel")
    linear.save(weights)
    net = caffe.Net(network_file=net_file(tmp_path, LINEAR % ""), phase=caffe.TRAIN, level=0,
                    stages=[], weights=weights)
    assert net.phase == caffe.TRAIN
    numpy.testing.assert_array_equal(net.params["ip"][0].data, linear.params["ip"][0].data)


def test_legacy_constructor_logs_pycaffes_deprecation(linear, tmp_path, logs):
    weights = str(tmp_path / "w.caffemodel")
    linear.save(weights)
    caffe.Net(net_file(tmp_path, LINEAR % ""), weights, caffe.TEST)
    lines = [l for l in logs.getvalue().splitlines() if l.startswith("W")]
    assert [l.split("] ", 1)[1] for l in lines[:3]] == [
        "DEPRECATION WARNING - deprecated use of Python interface",
        'Use this instead (with the named "weights" parameter):',
        "Net('%s', 1, weights='%s')" % (tmp_path / "net.prototxt", weights)]
    assert "_caffe.cpp:139]" in lines[0]


# ---- callbacks -----------------------------------------------------------------------------
def test_layer_callbacks_run_around_each_layers_pass(linear):
    events = []
    for name in ("before_forward", "after_forward", "before_backward", "after_backward"):
        getattr(linear, name)(lambda layer, name=name: events.append((name, layer)))
    linear.forward(data=items(4))
    assert events == [(w, i) for i in range(3) for w in ("before_forward", "after_forward")]
    events.clear()
    linear.backward(out=items(4, width=2))   # every layer, also those needing no backward
    assert events == [(w, i) for i in (2, 1, 0) for w in ("before_backward", "after_backward")]


def test_after_forward_sees_the_layers_output(linear):
    seen = {}
    linear.after_forward(lambda layer: seen.setdefault(layer, linear.blobs["out"].data.copy()))
    linear.blobs["out"].data[...] = -1
    out = linear.forward(data=items(4))["out"]
    assert (seen[1] == -1).all()             # the Power layer (2) has not run yet
    numpy.testing.assert_array_equal(seen[2], out)


# ---- MemoryData ----------------------------------------------------------------------------
MEMORY = """name: "memory"
layer { name: "mem" type: "MemoryData" top: "data" top: "label"
  memory_data_param { batch_size: 2 channels: 1 height: 2 width: 3 } }
"""


@pytest.mark.parametrize("data, labels, message", [
    (numpy.zeros((2, 3, 2, 1), numpy.float32).transpose(0, 3, 2, 1), numpy.zeros(2, "f4"),
     "data array must be C contiguous"),
    (numpy.zeros((2, 2, 2, 3), numpy.float32), numpy.zeros(2, "f4"),
     "data array has wrong number of channels"),
    (numpy.zeros((2, 1, 2, 4), numpy.float32), numpy.zeros(2, "f4"), "data array has wrong width"),
    (numpy.zeros((2, 1, 2, 3), numpy.float32), numpy.zeros((2, 1), "f4"),
     "labels array must be 4-d"),
    (numpy.zeros((2, 1, 2, 3), numpy.float32), numpy.zeros(4, "f4"),
     "data and labels must have the same first dimension"),
    (numpy.zeros((3, 1, 2, 3), numpy.float32), numpy.zeros(3, "f4"),
     "first dimensions of input arrays must be a multiple of batch size"),
])
def test_set_input_arrays_checks_as_pycaffe(tmp_path, data, labels, message):
    net = caffe.Net(net_file(tmp_path, MEMORY), caffe.TEST)
    with pytest.raises(RuntimeError, match=message):
        net.set_input_arrays(data, labels)


def test_set_input_arrays_keeps_the_arrays_by_reference(tmp_path):
    net = caffe.Net(net_file(tmp_path, MEMORY), caffe.TEST)
    data = numpy.arange(24, dtype=numpy.float32).reshape(4, 1, 2, 3)
    labels = numpy.arange(4, dtype=numpy.float32)
    net.set_input_arrays(data, labels)
    data[2:] = -5                            # Caffe reads the caller's memory at forward time
    net.forward()
    numpy.testing.assert_array_equal(net.blobs["data"].data, data[:2])
    net.forward()
    assert (net.blobs["data"].data == -5).all()
    assert net.blobs["label"].data.reshape(-1).tolist() == [2, 3]
