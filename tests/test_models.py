"""models/: BVLC's LeNet and cifar10_quick with BVLC's settings, data paths under data/."""
import os

import pytest

import caffecli as caffe
from caffecli.proto.io import read_net_param, read_solver_param

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ZOO = os.path.join(os.path.dirname(ROOT), "shared", "zoo")
LENET = os.path.join(ROOT, "models", "lenet")
CIFAR = os.path.join(ROOT, "models", "cifar10_quick")


def test_lenet_solver_has_bvlc_settings():
    p = read_solver_param(os.path.join(LENET, "lenet_solver.prototxt"))
    assert p.net == "models/lenet/lenet_train_test.prototxt"
    assert (p.base_lr, p.momentum, p.weight_decay) == pytest.approx((0.01, 0.9, 5e-4))
    assert (p.lr_policy, p.gamma, p.power) == ("inv", pytest.approx(1e-4), pytest.approx(0.75))
    assert (p.max_iter, p.test_interval, list(p.test_iter), p.snapshot, p.display) == \
        (10000, 500, [100], 5000, 100)
    assert p.solver_mode == p.CPU


def test_lenet_train_test_reads_the_demo_lmdbs():
    net = read_net_param(os.path.join(LENET, "lenet_train_test.prototxt"))
    data = [l for l in net.layer if l.type == "Data"]
    assert [(l.data_param.source, l.data_param.batch_size) for l in data] == [
        ("data/mnist/mnist_train_lmdb", 64), ("data/mnist/mnist_test_lmdb", 100)]
    assert all(l.transform_param.scale == pytest.approx(0.00390625) for l in data)


@pytest.mark.skipif(not os.path.isdir(ZOO), reason="shared/zoo is not beside the checkout")
@pytest.mark.parametrize("ours, bvlc", [
    ("lenet/lenet_train_test.prototxt", "mnist__lenet_train_test.prototxt"),
    ("lenet/lenet.prototxt", "mnist__lenet.prototxt"),
    ("cifar10_quick/cifar10_quick_train_test.prototxt",
     "cifar10__cifar10_quick_train_test.prototxt"),
    ("cifar10_quick/cifar10_quick.prototxt", "cifar10__cifar10_quick.prototxt"),
])
def test_nets_equal_bvlc_but_for_paths(ours, bvlc):
    a = read_net_param(os.path.join(ROOT, "models", ours))
    b = read_net_param(os.path.join(ZOO, bvlc))
    for net in (a, b):
        for layer in net.layer:
            layer.data_param.ClearField("source")
            layer.transform_param.ClearField("mean_file")
    assert a == b


def test_lenet_deploy_builds():
    net = caffe.Net(os.path.join(LENET, "lenet.prototxt"), caffe.TEST)
    assert net.outputs == ["prob"]
    assert net.blobs["prob"].data.shape == (64, 10)
    assert [tuple(p[0].data.shape) for p in net.params.values()] == [
        (20, 1, 5, 5), (50, 20, 5, 5), (500, 800), (10, 500)]


def test_cifar10_quick_solver():
    p = read_solver_param(os.path.join(CIFAR, "cifar10_quick_solver.prototxt"))
    assert p.net == "models/cifar10_quick/cifar10_quick_train_test.prototxt"
    assert (p.base_lr, p.momentum, p.weight_decay, p.lr_policy, p.max_iter) == \
        (pytest.approx(0.001), pytest.approx(0.9), pytest.approx(0.004), "fixed", 4000)
    net = caffe.Net(os.path.join(CIFAR, "cifar10_quick.prototxt"), caffe.TEST)
    assert net.blobs["prob"].data.shape[1] == 10
