"""Real pycaffe workflows, step by step through ``import caffe``: BVLC's LeNet NetSpec notebook
(01-learning-lenet, on generated digits), net surgery (editing filters; making a classifier
fully convolutional by params surgery), the Python loss layer example (pyloss + linreg),
classify.py and draw_net.py. Each test walks the workflow's calls in our own small setting."""
import glob
import io
import os

import numpy
import pytest
from google.protobuf import text_format
from PIL import Image

import caffe
from caffe import layers as L, params as P
from caffe.proto import caffe_pb2
from data_helpers import write_datum_db, write_png


# ---- 01-learning-lenet ---------------------------------------------------------------------
def generated_digits(n, seed):
    """28 x 28 gray 'digits': class k is a bright 6 x 6 patch at its own place, over noise."""
    rng = numpy.random.RandomState(seed)
    labels = rng.randint(0, 10, n)
    images = rng.randint(0, 40, (n, 1, 28, 28)).astype(numpy.uint8)
    for image, k in zip(images, labels):
        row, col = 2 + 9 * (k // 4), 1 + 7 * (k % 4)
        image[0, row:row + 6, col:col + 6] = 220
    return images, labels


def lenet(lmdb, batch_size):
    """The notebook's LeNet, written with NetSpec."""
    n = caffe.NetSpec()
    n.data, n.label = L.Data(batch_size=batch_size, backend=P.Data.LMDB, source=lmdb,
                             transform_param=dict(scale=1. / 255), ntop=2)
    n.conv1 = L.Convolution(n.data, kernel_size=5, num_output=20,
                            weight_filler=dict(type="xavier"))
    n.pool1 = L.Pooling(n.conv1, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.conv2 = L.Convolution(n.pool1, kernel_size=5, num_output=50,
                            weight_filler=dict(type="xavier"))
    n.pool2 = L.Pooling(n.conv2, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.fc1 = L.InnerProduct(n.pool2, num_output=500, weight_filler=dict(type="xavier"))
    n.relu1 = L.ReLU(n.fc1, in_place=True)
    n.score = L.InnerProduct(n.relu1, num_output=10, weight_filler=dict(type="xavier"))
    n.loss = L.SoftmaxWithLoss(n.score, n.label)
    return n.to_proto()


LENET_SOLVER = """train_net: "mnist/lenet_auto_train.prototxt"
test_net: "mnist/lenet_auto_test.prototxt"
test_iter: 2
test_interval: 500
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 100
max_iter: 10000
snapshot: 5000
snapshot_prefix: "mnist/lenet"
random_seed: 1
"""


@pytest.fixture
def digits_dir(tmp_path, monkeypatch):
    """A folder laid out as the notebook expects (mnist/*_lmdb), made the current directory."""
    monkeypatch.chdir(tmp_path)
    os.mkdir("mnist")
    labels = {}
    for name, n, seed in (("train", 64, 0), ("test", 40, 1)):
        images, labels[name] = generated_digits(n, seed)
        write_datum_db("mnist/mnist_%s_lmdb" % name, images, labels[name])
    return labels


@pytest.mark.slow
def test_lenet_notebook(digits_dir):
    caffe.init_log(1)
    try:
        with open("mnist/lenet_auto_train.prototxt", "w") as f:
            f.write(str(lenet("mnist/mnist_train_lmdb", 16)))
        with open("mnist/lenet_auto_test.prototxt", "w") as f:
            f.write(str(lenet("mnist/mnist_test_lmdb", 20)))
        with open("mnist/lenet_auto_solver.prototxt", "w") as f:
            f.write(LENET_SOLVER)
        solver = caffe.SGDSolver("mnist/lenet_auto_solver.prototxt")
        shapes = [(k, v.data.shape) for k, v in solver.net.blobs.items()]
        assert shapes == [("data", (16, 1, 28, 28)), ("label", (16,)),
                          ("conv1", (16, 20, 24, 24)), ("pool1", (16, 20, 12, 12)),
                          ("conv2", (16, 50, 8, 8)), ("pool2", (16, 50, 4, 4)),
                          ("fc1", (16, 500)), ("score", (16, 10)), ("loss", ())]
        assert [(k, v[0].data.shape) for k, v in solver.net.params.items()] == [
            ("conv1", (20, 1, 5, 5)), ("conv2", (50, 20, 5, 5)), ("fc1", (500, 800)),
            ("score", (10, 500))]

        solver.net.forward()
        solver.test_nets[0].forward()
        tiled = solver.net.blobs["data"].data[:8, 0].transpose(1, 0, 2).reshape(28, 8 * 28)
        assert tiled.shape == (28, 224) and 0 <= tiled.min() and tiled.max() <= 1
        assert solver.net.blobs["label"].data[:8].tolist() == digits_dir["train"][:8].tolist()
        assert solver.test_nets[0].blobs["label"].data[:8].tolist() == \
            digits_dir["test"][:8].tolist()

        solver.step(1)
        filters = solver.net.params["conv1"][0].diff[:, 0].reshape(4, 5, 5, 5) \
            .transpose(0, 2, 1, 3).reshape(4 * 5, 5 * 5)
        assert filters.shape == (20, 25) and filters.any()

        niter, test_interval = 15, 5
        train_loss = numpy.zeros(niter)
        test_acc = numpy.zeros(int(numpy.ceil(niter / test_interval)))
        output = numpy.zeros((niter, 8, 10))
        test_net = solver.test_nets[0]
        for it in range(niter):
            solver.step(1)
            train_loss[it] = solver.net.blobs["loss"].data
            before = test_net.blobs["data"].data.copy()
            test_net.forward(start="conv1")      # no new data: the data layer is skipped
            numpy.testing.assert_array_equal(test_net.blobs["data"].data, before)
            output[it] = test_net.blobs["score"].data[:8]
            if it % test_interval == 0:
                correct = 0
                for _ in range(2):
                    test_net.forward()
                    correct += sum(test_net.blobs["score"].data.argmax(1)
                                   == test_net.blobs["label"].data)
                test_acc[it // test_interval] = correct / 40.0
        assert solver.iter == niter + 1
        assert train_loss[-3:].mean() < 0.8 * train_loss[:3].mean()
        assert test_acc[-1] > 0.5 and output[-1].argmax(1).tolist() == \
            digits_dir["test"][:8].tolist()
    finally:
        caffe.init_log(0)


def test_lenet_notebook_custom_solver_from_a_solver_parameter(digits_dir):
    caffe.init_log(1)
    try:
        n = caffe.NetSpec()
        n.data, n.label = L.Data(batch_size=16, backend=P.Data.LMDB,
                                 source="mnist/mnist_train_lmdb",
                                 transform_param=dict(scale=1. / 255), ntop=2)
        n.score = L.InnerProduct(n.data, num_output=10, weight_filler=dict(type="xavier"))
        n.loss = L.SoftmaxWithLoss(n.score, n.label)
        with open("mnist/custom_auto_train.prototxt", "w") as f:
            f.write(str(n.to_proto()))
        s = caffe_pb2.SolverParameter()
        s.random_seed = 0xCAFFE
        s.train_net = "mnist/custom_auto_train.prototxt"
        s.max_iter = 10000
        s.type = "Adam"
        s.base_lr = 0.01
        s.lr_policy = "fixed"
        s.display = 1000
        s.snapshot = 5000
        s.snapshot_prefix = "mnist/custom_net"
        s.solver_mode = caffe_pb2.SolverParameter.GPU   # pycaffe leaves the mode to the script
        with open("mnist/custom_auto_solver.prototxt", "w") as f:
            f.write(str(s))
        solver = caffe.get_solver("mnist/custom_auto_solver.prototxt")
        assert isinstance(solver, caffe.AdamSolver)
        losses = []
        for _ in range(12):
            solver.step(1)
            losses.append(float(solver.net.blobs["loss"].data))
        assert numpy.mean(losses[-4:]) < 0.7 * numpy.mean(losses[:4])
    finally:
        caffe.init_log(0)


# ---- net surgery: editing filters ----------------------------------------------------------
CONV = """name: "convolution"
layer { name: "data" type: "Input" top: "data" input_param { shape: { dim: 1 dim: 1 dim: 20 dim: 20 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 3 kernel_size: 5 stride: 1
    weight_filler { type: "gaussian" std: 0.01 } bias_filler { type: "constant" value: 0 } } }
"""


def correlate(image, kernel):
    """Valid 2-D cross-correlation (what a Convolution layer computes)."""
    kh, kw = kernel.shape
    windows = numpy.lib.stride_tricks.sliding_window_view(image, (kh, kw))
    return numpy.einsum("ijkl,kl->ij", windows, kernel)


def test_net_surgery_edits_filters_and_biases(tmp_path):
    (tmp_path / "conv.prototxt").write_text(CONV)
    caffe.set_mode_cpu()
    net = caffe.Net(str(tmp_path / "conv.prototxt"), caffe.TEST)
    assert list(net.blobs.keys()) == ["data", "conv"] and list(net.params.keys()) == ["conv"]
    pixels = numpy.random.RandomState(2).randint(0, 256, (30, 26)).astype(numpy.uint8)
    write_png(str(tmp_path / "gray.png"), pixels)
    im = numpy.array(caffe.io.load_image(str(tmp_path / "gray.png"), color=False)).squeeze()
    assert im.shape == (30, 26)
    im_input = im[numpy.newaxis, numpy.newaxis, :, :]
    net.blobs["data"].reshape(*im_input.shape)
    net.blobs["data"].data[...] = im_input
    net.forward()
    assert net.blobs["conv"].data.shape == (1, 3, 26, 22)

    conv0 = net.blobs["conv"].data[0, 0]           # a view that later passes write into
    pre = conv0.mean()
    net.params["conv"][1].data[0] = 1.
    net.forward()
    assert conv0.mean() == pytest.approx(pre + 1, abs=1e-5)

    ksize = net.params["conv"][0].data.shape[2:]
    y, x = numpy.mgrid[-ksize[0] // 2 + 1:ksize[0] // 2 + 1, -ksize[1] // 2 + 1:ksize[1] // 2 + 1]
    g = numpy.exp(-((x ** 2 + y ** 2) / 2.0))
    gaussian = (g / g.sum()).astype(numpy.float32)
    net.params["conv"][0].data[0] = gaussian
    net.params["conv"][0].data[1:] = 0.
    sobel = numpy.array((-1, -2, -1, 0, 0, 0, 1, 2, 1), dtype=numpy.float32).reshape((3, 3))
    net.params["conv"][0].data[1, 0, 1:-1, 1:-1] = sobel
    net.params["conv"][0].data[2, 0, 1:-1, 1:-1] = sobel.T
    net.forward()
    out = net.blobs["conv"].data[0]
    numpy.testing.assert_allclose(out[0], correlate(im, gaussian) + 1, rtol=1e-5, atol=1e-5)
    numpy.testing.assert_allclose(out[1], correlate(im, sobel)[1:-1, 1:-1], atol=1e-5)
    numpy.testing.assert_allclose(out[2], correlate(im, sobel.T)[1:-1, 1:-1], atol=1e-5)


# ---- net surgery: a classifier made fully convolutional ------------------------------------
BODY = """layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "gaussian" std: 0.3 }
    bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1"
  pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
"""
HEAD = """layer { name: "%(fc6)s" type: "%(type)s" bottom: "pool1" top: "%(fc6)s"
  %(param)s { num_output: 8 %(k6)s weight_filler { type: "gaussian" std: 0.2 }
    bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu6" type: "ReLU" bottom: "%(fc6)s" top: "%(fc6)s" }
layer { name: "%(fc7)s" type: "%(type)s" bottom: "%(fc6)s" top: "%(fc7)s"
  %(param)s { num_output: 6 %(k1)s weight_filler { type: "gaussian" std: 0.4 }
    bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "relu7" type: "ReLU" bottom: "%(fc7)s" top: "%(fc7)s" }
layer { name: "%(fc8)s" type: "%(type)s" bottom: "%(fc7)s" top: "%(fc8)s"
  %(param)s { num_output: 5 %(k1)s weight_filler { type: "gaussian" std: 0.5 }
    bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "prob" type: "Softmax" bottom: "%(fc8)s" top: "prob" }
"""
INPUT = ('name: "%s"\nlayer { name: "data" type: "Input" top: "data" '
         'input_param { shape: { dim: %d dim: 3 dim: %d dim: %d } } }\n')
CLASSIFIER = INPUT % ("Small", 2, 16, 16) + BODY + HEAD % dict(
    fc6="fc6", fc7="fc7", fc8="fc8", type="InnerProduct", param="inner_product_param", k6="",
    k1="")
FULL_CONV = INPUT % ("SmallConv", 1, 24, 24) + BODY + HEAD % dict(
    fc6="fc6-conv", fc7="fc7-conv", fc8="fc8-conv", type="Convolution",
    param="convolution_param", k6="kernel_size: 7", k1="kernel_size: 1")


def test_net_surgery_makes_a_classifier_fully_convolutional(tmp_path):
    (tmp_path / "deploy.prototxt").write_text(CLASSIFIER)
    (tmp_path / "full_conv.prototxt").write_text(FULL_CONV)
    weights = str(tmp_path / "small.caffemodel")
    caffe.set_random_seed(7)
    caffe.Net(str(tmp_path / "deploy.prototxt"), caffe.TEST).save(weights)

    net = caffe.Net(str(tmp_path / "deploy.prototxt"), weights, caffe.TEST)
    params = ["fc6", "fc7", "fc8"]
    fc_params = {pr: (net.params[pr][0].data, net.params[pr][1].data) for pr in params}
    assert [fc_params[p][0].shape for p in params] == [(8, 196), (6, 8), (5, 6)]
    net_full_conv = caffe.Net(str(tmp_path / "full_conv.prototxt"), weights, caffe.TEST)
    params_full_conv = ["fc6-conv", "fc7-conv", "fc8-conv"]
    conv_params = {pr: (net_full_conv.params[pr][0].data, net_full_conv.params[pr][1].data)
                   for pr in params_full_conv}
    assert [conv_params[p][0].shape for p in params_full_conv] == [(8, 4, 7, 7), (6, 8, 1, 1),
                                                                    (5, 6, 1, 1)]
    for pr, pr_conv in zip(params, params_full_conv):
        conv_params[pr_conv][0].flat = fc_params[pr][0].flat
        conv_params[pr_conv][1][...] = fc_params[pr][1]
    surgery = str(tmp_path / "small_full_conv.caffemodel")
    net_full_conv.save(surgery)

    write_png(str(tmp_path / "scene.png"),
              numpy.random.RandomState(4).randint(0, 256, (30, 34, 3)))
    im = caffe.io.load_image(str(tmp_path / "scene.png"))
    transformer = caffe.io.Transformer({"data": net_full_conv.blobs["data"].data.shape})
    transformer.set_mean("data", numpy.array([104.0, 117.0, 123.0]))
    transformer.set_transpose("data", (2, 0, 1))
    transformer.set_channel_swap("data", (2, 1, 0))
    transformer.set_raw_scale("data", 255.0)
    fresh = caffe.Net(str(tmp_path / "full_conv.prototxt"), caffe.TEST, weights=surgery)
    caffe_in = numpy.asarray([transformer.preprocess("data", im)])
    out = fresh.forward_all(data=caffe_in)
    assert out["prob"].shape == (1, 5, 5, 5) and out["prob"][0].argmax(axis=0).shape == (5, 5)
    numpy.testing.assert_allclose(transformer.deprocess("data", fresh.blobs["data"].data[0]),
                                  caffe.io.resize_image(im, (24, 24)), atol=1e-4)
    # each location of the map is the classifier applied to the window it sees (stride 2)
    for i, j in ((0, 0), (2, 3), (4, 4)):
        window = caffe_in[:, :, 2 * i:2 * i + 16, 2 * j:2 * j + 16]
        prob = net.forward_all(data=window)["prob"][0]
        numpy.testing.assert_allclose(out["prob"][0, :, i, j], prob, rtol=1e-4, atol=1e-6)


# ---- the Python loss layer example ---------------------------------------------------------
PYLOSS = '''
import numpy as np
import caffe


class EuclideanLossLayer(caffe.Layer):
    """Half the mean squared distance of two bottoms, over the batch (Caffe's EuclideanLoss)."""

    def setup(self, bottom, top):
        if len(bottom) != 2:
            raise Exception("Need two inputs to compute distance.")

    def reshape(self, bottom, top):
        if bottom[0].count != bottom[1].count:
            raise Exception("Inputs must have the same dimension.")
        self.diff = np.zeros_like(bottom[0].data, dtype=np.float32)
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.diff[...] = bottom[0].data - bottom[1].data
        top[0].data[...] = (self.diff ** 2).sum() / bottom[0].num / 2.0

    def backward(self, top, propagate_down, bottom):
        for which, sign in ((0, 1.0), (1, -1.0)):
            if propagate_down[which]:
                bottom[which].diff[...] = sign * self.diff / bottom[which].num
'''

LINREG = """name: "linreg"
layer { type: "DummyData" name: "x" top: "x"
  dummy_data_param { shape: { dim: 10 dim: 3 dim: 2 } data_filler: { type: "gaussian" } } }
layer { type: "DummyData" name: "y" top: "y"
  dummy_data_param { shape: { dim: 10 dim: 3 dim: 2 } data_filler: { type: "gaussian" } } }
layer { type: "InnerProduct" name: "ipx" top: "ipx" bottom: "x"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { type: "InnerProduct" name: "ipy" top: "ipy" bottom: "y"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { type: "%s" name: "loss" top: "loss" bottom: "ipx" bottom: "ipy" %s loss_weight: 1 }
"""
PYTHON_LOSS = LINREG % ("Python", "python_param { module: 'workflow_pyloss' "
                                  "layer: 'EuclideanLossLayer' }")


@pytest.fixture
def linreg(tmp_path, monkeypatch):
    (tmp_path / "workflow_pyloss.py").write_text(PYLOSS)
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "linreg.prototxt").write_text(PYTHON_LOSS)
    (tmp_path / "linreg_cpp.prototxt").write_text(LINREG % ("EuclideanLoss", ""))
    return tmp_path


def test_python_loss_layer_matches_the_builtin_one(linreg):
    net = caffe.Net(str(linreg / "linreg.prototxt"), caffe.TRAIN)
    assert net.layers[-1].type == "Python"
    loss = net.forward()["loss"]
    ipx, ipy = net.blobs["ipx"].data, net.blobs["ipy"].data
    assert loss.shape == (1,)
    assert loss[0] == pytest.approx(((ipx - ipy) ** 2).sum() / 10 / 2, rel=1e-5)
    net.backward()
    numpy.testing.assert_allclose(net.blobs["ipx"].diff, (ipx - ipy) / 10, rtol=1e-5)
    numpy.testing.assert_allclose(net.blobs["ipy"].diff, (ipy - ipx) / 10, rtol=1e-5)

    cpp = caffe.Net(str(linreg / "linreg_cpp.prototxt"), caffe.TRAIN)
    cpp.share_with(net)
    for name in ("x", "y"):                      # DummyData refills; compare on the same data
        cpp.blobs[name].data[...] = net.blobs[name].data
    cpp.forward(start="ipx")
    cpp.backward()
    assert float(cpp.blobs["loss"].data) == pytest.approx(float(loss[0]), rel=1e-5)
    for name in ("ipx", "ipy"):
        numpy.testing.assert_allclose(cpp.params[name][0].diff, net.params[name][0].diff,
                                      rtol=1e-4, atol=1e-6)


def test_python_loss_layer_trains_with_a_solver(linreg):
    (linreg / "solver.prototxt").write_text(
        'net: "%s"\nbase_lr: 0.05\nmomentum: 0.9\nlr_policy: "fixed"\nmax_iter: 40\n'
        'display: 0\nrandom_seed: 3\nsnapshot_after_train: false\n'
        % (linreg / "linreg.prototxt"))
    solver = caffe.SGDSolver(str(linreg / "solver.prototxt"))
    losses = []
    for _ in range(40):
        solver.step(1)
        losses.append(float(solver.net.blobs["loss"].data[0]))
    assert numpy.mean(losses[-10:]) < 0.5 * numpy.mean(losses[:10])


# ---- classify.py ---------------------------------------------------------------------------
TINY = """name: "tiny"
layer { name: "data" type: "Input" top: "data"
  input_param { shape { dim: %d dim: 3 dim: 12 dim: 12 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "gaussian" std: 0.02 }
    bias_filler { type: "gaussian" std: 0.1 } } }
layer { name: "fc" type: "InnerProduct" bottom: "conv" top: "fc"
  inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.01 } } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
"""


def test_classify_script_steps(tmp_path):
    for batch in (1, 4):
        (tmp_path / ("deploy%d.prototxt" % batch)).write_text(TINY % batch)
    weights = str(tmp_path / "tiny.caffemodel")
    caffe.Net(str(tmp_path / "deploy1.prototxt"), caffe.TEST).save(weights)
    os.mkdir(tmp_path / "images")
    rng = numpy.random.RandomState(9)
    for k in range(3):
        write_png(str(tmp_path / "images" / ("%d.png" % k)), rng.randint(0, 256, (20, 18, 3)))
    numpy.save(tmp_path / "mean.npy", numpy.full((3, 12, 12), 110.0, numpy.float32))

    image_dims = [int(s) for s in "16,16".split(",")]
    mean = numpy.load(str(tmp_path / "mean.npy"))
    channel_swap = [int(s) for s in "2,1,0".split(",")]
    caffe.set_mode_cpu()
    inputs = [caffe.io.load_image(f) for f in sorted(glob.glob(str(tmp_path / "images") +
                                                               "/*.png"))]
    numpy.save(tmp_path / "inputs.npy", numpy.asarray(inputs))
    predictions = {}
    for batch in (1, 4):                    # 30 crops: chunks of 4 padded at the end, or 1s
        classifier = caffe.Classifier(str(tmp_path / ("deploy%d.prototxt" % batch)), weights,
                                      image_dims=image_dims, mean=mean, input_scale=None,
                                      raw_scale=255.0, channel_swap=channel_swap)
        predictions[batch] = classifier.predict(inputs, True)
    assert predictions[4].shape == (3, 5)
    numpy.testing.assert_allclose(predictions[4].sum(1), 1, rtol=1e-5)
    numpy.testing.assert_allclose(predictions[4], predictions[1], rtol=1e-5, atol=1e-7)
    from_npy = classifier.predict(numpy.load(str(tmp_path / "inputs.npy")), True)
    numpy.testing.assert_allclose(from_npy, predictions[4], rtol=1e-6)
    centre = classifier.predict(inputs, False)
    assert centre.shape == (3, 5) and not numpy.allclose(centre, predictions[4])
    numpy.save(str(tmp_path / "out.npy"), predictions[4])
    assert numpy.load(str(tmp_path / "out.npy")).shape == (3, 5)


# ---- draw_net.py ---------------------------------------------------------------------------
def test_draw_net_script_steps(tmp_path):
    pytest.importorskip("pydot")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    net = caffe_pb2.NetParameter()
    with open(os.path.join(root, "models", "lenet", "lenet_train_test.prototxt")) as f:
        text_format.Merge(f.read(), net)
    sizes = {}
    for rankdir, phase, display_lrm in (("LR", None, False), ("TB", caffe.TRAIN, True),
                                        ("TB", caffe.TEST, False)):
        out = str(tmp_path / ("lenet_%s_%s.png" % (rankdir, phase)))
        caffe.draw.draw_net_to_file(net, out, rankdir, phase, display_lrm)
        with open(out, "rb") as f:
            image = Image.open(io.BytesIO(f.read()))
        assert image.format == "PNG"
        sizes[(rankdir, phase)] = image.size
    assert sizes[("LR", None)][0] > sizes[("LR", None)][1]       # left to right: wide
    assert sizes[("TB", caffe.TRAIN)][1] > sizes[("TB", caffe.TRAIN)][0]
    assert sizes[("TB", caffe.TRAIN)] != sizes[("TB", caffe.TEST)]  # TEST adds accuracy
