"""User-defined layers inside nets that a solver trains: a ``type: "Python"`` loss from a user's
module, and a layer class a user's module registers with caffecli.registry.register_layer.

(tests/test_python_layer.py covers the Python layer's interface with a hand-written SGD loop;
here caffecli.get_solver's SGD solver drives the updates on batches from an HDF5Data layer.)
"""
import importlib
import sys

import h5py
import numpy
import pytest

import caffecli
from caffecli import registry

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode

W_TRUE = numpy.array([[1.0, -2.0], [0.5, 0.0], [0.0, 1.5]])
B_TRUE = numpy.array([0.3, -0.1])

PY_LOSS = '''
import json
import caffecli as caffe


class EuclideanLoss(caffe.Layer):
    """sum((a - b)^2) / num / 2, scaled by param_str's "scale" (default 1)."""

    def setup(self, bottom, top):
        if len(bottom) != 2:
            raise Exception("Need two inputs to compute distance.")
        self.scale = json.loads(self.param_str or "{}").get("scale", 1.0)
        self.calls = {"forward": 0, "backward": 0}

    def reshape(self, bottom, top):
        if bottom[0].count != bottom[1].count:
            raise Exception("Inputs must have the same dimension.")
        self.diff = bottom[0].data - bottom[1].data
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.calls["forward"] += 1
        self.diff[...] = bottom[0].data - bottom[1].data
        top[0].data[...] = self.scale * (self.diff ** 2).sum() / bottom[0].num / 2.

    def backward(self, top, propagate_down, bottom):
        self.calls["backward"] += 1
        for i in range(2):
            if propagate_down[i]:
                sign = 1 if i == 0 else -1
                bottom[i].diff[...] = sign * self.scale * self.diff / bottom[i].num
'''

REGISTERED = '''
from caffecli.layer import Layer
from caffecli.registry import register_layer


@register_layer("UserAffine")
class UserAffine(Layer):
    """y = x * w + b per feature (axis 1), with its own learnable w and b: written once against
    the engine's API, its weights seen from the side it runs on (self.weights)."""
    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def setup(self, bottom, top):
        from caffecli.blob import Blob
        if not self.blobs:
            n = bottom[0].shape[1]
            self.blobs = [Blob((n,)), Blob((n,))]
            self.blobs[0].data[...] = 1.0
            self.blobs[1].data[...] = 0.0

    def reshape(self, bottom, top):
        top[0].reshape_like(bottom[0])

    def forward(self, bottom, top):
        w, b = self.weights
        top[0].data[...] = bottom[0].data * w.data + b.data

    def backward(self, top, propagate_down, bottom):
        w, b = self.weights
        w.diff[...] += (top[0].diff * bottom[0].data).sum(axis=0)
        b.diff[...] += top[0].diff.sum(axis=0)
        if propagate_down[0]:
            bottom[0].diff[...] = top[0].diff * w.data
'''

NET = '''
name: "user_layers"
layer { name: "data" type: "HDF5Data" top: "x" top: "t"
        hdf5_data_param { source: "%(list)s" batch_size: 8 } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 }
                              bias_filler { type: "constant" value: 0 } } }
%(middle)s
layer { name: "loss" %(loss)s }
'''

PY_LOSS_LAYER = ('type: "Python" bottom: "%s" bottom: "t" top: "loss" loss_weight: 1 '
                 "python_param { module: \"user_loss_module\" layer: \"EuclideanLoss\" "
                 "param_str: '{\"scale\": 2.0}' }")
AFFINE_LAYER = 'layer { name: "affine" type: "UserAffine" bottom: "ip" top: "out" }'


def _write_data(tmp_path):
    r = numpy.random.RandomState(7)
    x = r.uniform(-1, 1, (32, 3))
    with h5py.File(tmp_path / "train.h5", "w") as f:
        f["x"] = x.astype(numpy.float32)
        f["t"] = (x @ W_TRUE + B_TRUE).astype(numpy.float32)
    (tmp_path / "list.txt").write_text(str(tmp_path / "train.h5") + "\n")
    return str(tmp_path / "list.txt")


def _solver(tmp_path, middle, loss, lr=0.1):
    tmp_path.mkdir(exist_ok=True)
    net = tmp_path / "net.prototxt"
    net.write_text(NET % {"list": _write_data(tmp_path), "middle": middle, "loss": loss})
    solver = tmp_path / "solver.prototxt"
    solver.write_text('net: "%s" base_lr: %g momentum: 0.9 lr_policy: "fixed" max_iter: 200 '
                      'display: 0 random_seed: 1 snapshot_after_train: false '
                      'solver_mode: CPU' % (net, lr))
    caffecli.glog.set_min_level(2)
    try:
        return caffecli.get_solver(str(solver))
    finally:
        caffecli.glog.set_min_level(0)


def _train(solver, iters):
    losses = []
    for _ in range(iters):
        solver.step(1)
        losses.append(float(solver.net.blobs["loss"].data.reshape(-1)[0]))
    return losses


@pytest.fixture
def py_module(tmp_path, monkeypatch):
    (tmp_path / "user_loss_module.py").write_text(PY_LOSS)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("user_loss_module", None)


@pytest.fixture
def registered_module(tmp_path, monkeypatch):
    (tmp_path / "user_affine_module.py").write_text(REGISTERED)
    monkeypatch.syspath_prepend(str(tmp_path))
    registry.unregister_layer("UserAffine")
    module = importlib.import_module("user_affine_module")
    yield module
    registry.unregister_layer("UserAffine")
    sys.modules.pop("user_affine_module", None)


def test_python_loss_trains_inner_product(tmp_path, py_module):
    solver = _solver(tmp_path, "", PY_LOSS_LAYER % "ip")
    losses = _train(solver, 150)
    assert losses[0] > 0.5, losses[0]
    assert max(losses[-8:]) < 0.01 * losses[0], (losses[0], losses[-8:])
    user = solver.net.layer_by_name("loss")
    assert user.scale == 2.0 and user.calls == {"forward": 150, "backward": 150}
    w, b = (solver.net.params["ip"][i].data for i in (0, 1))
    numpy.testing.assert_allclose(w, W_TRUE.T, atol=0.05)
    numpy.testing.assert_allclose(b, B_TRUE, atol=0.05)
    # the built-in EuclideanLoss weighted 2 takes the same steps (its loss blob is unweighted)
    builtin = _solver(tmp_path / "builtin", "", 'type: "EuclideanLoss" bottom: "ip" '
                      'bottom: "t" top: "loss" loss_weight: 2')
    numpy.testing.assert_allclose(2 * numpy.array(_train(builtin, 20)), losses[:20],
                                  rtol=1e-4, atol=1e-7)


def test_registered_layer_trains_with_its_own_params(tmp_path, registered_module):
    assert "UserAffine" in caffecli.layer_type_list()
    solver = _solver(tmp_path, AFFINE_LAYER, 'type: "EuclideanLoss" bottom: "out" bottom: "t" '
                     'top: "loss"', lr=0.05)
    affine = solver.net.layer_by_name("affine")
    assert isinstance(affine, registered_module.UserAffine)
    assert len(solver.net.learnable_params) == 4
    losses = _train(solver, 200)
    assert max(losses[-8:]) < 0.01 * losses[0], (losses[0], losses[-8:])
    # the solver updated the user layer's own blobs, not only the InnerProduct's
    assert numpy.abs(solver.net.params["affine"][0].data - 1.0).max() > 0.01
    assert numpy.abs(solver.net.params["affine"][1].data).max() > 0.01


def test_registered_layer_with_python_loss(tmp_path, py_module, registered_module):
    solver = _solver(tmp_path, AFFINE_LAYER, PY_LOSS_LAYER % "out", lr=0.05)
    losses = _train(solver, 200)
    assert max(losses[-8:]) < 0.01 * losses[0], (losses[0], losses[-8:])
