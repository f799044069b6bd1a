"""Loading weights: a .caffemodel's values go straight from the mapped file into the blobs, and
fillers run only for what the weights leave uncovered (when first read)."""
import numpy
import pytest

from caffecli import context, fillers
from caffecli.errors import CaffeError
from caffecli.net import Net, TRAIN
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text

TWO_IP = '''
name: "t"
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 1 }
                              bias_filler { type: "uniform" } } }
layer { name: "ip2" type: "InnerProduct" bottom: "y" top: "z"
        inner_product_param { num_output: 2 weight_filler { type: "xavier" } } }
'''


def build(text=TWO_IP, **kw):
    return Net(parse_text(text, caffe_pb2.NetParameter()), TRAIN, log=False, **kw)


def params(net):
    return {(layer.name, j): b.data.copy() for layer in net.layers if layer.blobs
            for j, b in enumerate(layer.blobs)}


def write_model(path, layers, v1=False):
    """A caffemodel of (name, [(shape, values, diff or None, double)]) layers."""
    net = caffe_pb2.NetParameter(name="m")
    for name, blobs in layers:
        lp = net.layers.add(name=name, type=caffe_pb2.V1LayerParameter.INNER_PRODUCT) if v1 \
            else net.layer.add(name=name, type="InnerProduct")
        for shape, values, diff, double in blobs:
            b = lp.blobs.add()
            b.shape.dim.extend(shape)
            (b.double_data if double else b.data).extend(numpy.ravel(values).tolist())
            if diff is not None:
                b.diff.extend(numpy.ravel(diff).tolist())
    with open(path, "wb") as f:
        f.write(net.SerializeToString())


@pytest.mark.parametrize("v1", [False, True])
def test_caffemodel_values_diffs_and_doubles_load(tmp_path, v1):
    rs = numpy.random.RandomState(0)
    w, b, d = rs.randn(4, 3), rs.randn(4), rs.randn(4, 3)
    path = str(tmp_path / "m.caffemodel")
    write_model(path, [("ip", [((4, 3), w, d, False), ((4,), b, None, True)]),
                       ("unknown", [((2,), [1, 2], None, False)])], v1)
    net = build()
    net.copy_trained_layers_from(path)
    ip = net.layer_by_name("ip")
    numpy.testing.assert_array_equal(ip.blobs[0].data, w.astype(numpy.float32))
    numpy.testing.assert_array_equal(ip.blobs[0].diff, d.astype(numpy.float32))
    numpy.testing.assert_array_equal(ip.blobs[1].data, b.astype(numpy.float32))


def test_repeated_layer_name_takes_each_occurrence_in_turn(tmp_path):
    """Caffe copies every source layer of a name into the target: the last one stays."""
    path = str(tmp_path / "m.caffemodel")
    first, last = numpy.ones((2, 4)), numpy.full((2, 4), 3.0)
    write_model(path, [("ip2", [((2, 4), first, None, False), ((2,), [0, 0], None, False)]),
                       ("ip2", [((2, 4), last, None, False), ((2,), [0, 0], None, False)])])
    net = build()
    net.copy_trained_layers_from(path)
    assert (net.layer_by_name("ip2").blobs[0].data == 3).all()


def test_truncated_caffemodel_is_one_error(tmp_path):
    path = tmp_path / "m.caffemodel"
    write_model(str(path), [("ip", [((4, 3), numpy.ones(12), None, False)])])
    path.write_bytes(path.read_bytes()[:-7])
    with pytest.raises(CaffeError, match=r"m.caffemodel: not a valid caffemodel \(truncated"):
        build().copy_trained_layers_from(str(path))


def test_fillers_skip_what_the_weights_cover(tmp_path, monkeypatch):
    """Unseeded, a fill runs only when its blob is read: the weights' blobs never fill."""
    path = str(tmp_path / "m.caffemodel")
    write_model(path, [("ip", [((4, 3), numpy.ones(12), None, False),
                               ((4,), numpy.zeros(4), None, False)])])
    ran = []
    for name in ("gaussian", "uniform", "xavier"):
        fn, random = fillers._FILLERS[name]
        monkeypatch.setitem(fillers._FILLERS, name,
                            (lambda p, out, rng, fn=fn, name=name: (ran.append(name),
                                                                    fn(p, out, rng)), random))
    monkeypatch.setattr(context, "_streams", {})     # an unseeded stream
    loaded = build(weights=path)
    assert ran == []   # nothing read yet: no filler has run
    got = params(loaded)
    assert ran == ["xavier"]  # only ip2's weights, which the file does not hold
    assert (got["ip", 0] == 1).all() and (got["ip", 1] == 0).all()
    assert got["ip2", 0].std() > 0


def test_seeded_fills_draw_caffes_numbers_in_caffes_order(tmp_path):
    """Seeded, every fill draws when its layer is set up, as Caffe's do, weights or not: the
    blob the weights leave alone has the values of a net built without them."""
    path = str(tmp_path / "m.caffemodel")
    write_model(path, [("ip", [((4, 3), numpy.ones(12), None, False),
                               ((4,), numpy.zeros(4), None, False)])])
    context.set_random_seed(11)
    plain = params(build())
    context.set_random_seed(11)
    got = params(build(weights=path))
    assert (got["ip", 0] == 1).all() and (got["ip", 1] == 0).all()
    numpy.testing.assert_array_equal(got["ip2", 0], plain["ip2", 0])


def test_filled_values_do_not_depend_on_when_they_are_read():
    context.set_random_seed(5)
    a = build()
    context.set_random_seed(5)
    b = build()
    later = b.layer_by_name("ip2").blobs[0].data.copy()  # b reads ip2 first, a reads ip first
    first = params(a)
    numpy.testing.assert_array_equal(first["ip2", 0], later)
    numpy.testing.assert_array_equal(first["ip", 0], b.layer_by_name("ip").blobs[0].data)
    assert first["ip", 0].std() > 0.3 and (numpy.abs(first["ip", 1]) <= 1).all()


def test_assigning_a_wrong_shape_leaves_the_values(standin):
    """blob.data = x writes every value without fetching the device copy first; a value that
    cannot fill the blob fails and the device's values stay the blob's."""
    from caffecli.blob import Blob
    blob = Blob((2, 3))
    blob.data = numpy.arange(6).reshape(2, 3)
    blob.mutable_gpu_data()[...] = standin.asarray(numpy.full((2, 3), 7.0, numpy.float32))
    with pytest.raises(ValueError):
        blob.data = numpy.ones((3, 2))
    assert (blob.data == 7).all()
    blob.diff = 2.5
    assert (blob.diff == 2.5).all()


def test_hdf5_weights_have_caffes_layout(tmp_path):
    """Net::ToHDF5: a data (and diff) group for every layer, parameters or not; values once,
    under the owner of a shared parameter; diffs for every layer, shared ones too. The file
    loads back into the net."""
    import h5py
    from caffecli.weights import load_weights, save_hdf5
    text = '''
layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "a" param { name: "w" }
        inner_product_param { num_output: 3 bias_term: false } }
layer { name: "relu" type: "ReLU" bottom: "a" top: "a" }
layer { name: "ip2" type: "InnerProduct" bottom: "a" top: "b" param { name: "w" }
        inner_product_param { num_output: 3 bias_term: false } }
'''
    net = Net(parse_text(text, caffe_pb2.NetParameter()), TRAIN, log=False)
    save_hdf5(net, str(tmp_path / "w.caffemodel.h5"), write_diff=True)
    with h5py.File(tmp_path / "w.caffemodel.h5", "r") as f:
        names = []
        f.visit(names.append)
    assert sorted(names) == ["data", "data/in", "data/ip1", "data/ip1/0", "data/ip2", "data/relu",
                             "diff", "diff/in", "diff/ip1", "diff/ip1/0", "diff/ip2",
                             "diff/ip2/0", "diff/relu"]
    load_weights(net, str(tmp_path / "w.caffemodel.h5"))
