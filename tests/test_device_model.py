"""Data owns its device: the mode can change at any time (also between Net() and forward()),
host writes reach the device, and a training iteration copies only what Caffe copies.

GPU mode runs on the stand-in device here (the real GPU is exercised by test_gpu.py), whose
arrays refuse silent mixing with numpy's and count every host<->device copy.
"""
import os
import time

import numpy
import pytest

import caffecli
from caffecli import context
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text, read_net_param, read_solver_param
from data_helpers import write_datum_db

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def lenet_solver(tmp_path, batch=16, records=48):
    """BVLC's LeNet train net and solver over a small random LMDB (seeded, no tests)."""
    rs = numpy.random.RandomState(0)
    images = rs.randint(0, 256, size=(records, 1, 28, 28))
    write_datum_db(str(tmp_path / "db"), images, labels=rs.randint(0, 10, size=records))
    net = read_net_param(os.path.join(ROOT, "models", "lenet", "lenet_train_test.prototxt"))
    for lp in net.layer:
        if lp.type == "Data":
            lp.data_param.source = str(tmp_path / "db")
            lp.data_param.batch_size = batch
    param = read_solver_param(os.path.join(ROOT, "models", "lenet", "lenet_solver.prototxt"))
    param.ClearField("net")
    param.net_param.CopyFrom(net)
    for field in ("test_iter", "test_interval", "snapshot", "snapshot_prefix"):
        param.ClearField(field)
    param.display, param.random_seed, param.snapshot_after_train = 0, 5, False
    return param


def train(param, modes):
    """Step once per entry of ``modes`` ("cpu"/"gpu"), switching the mode before each step;
    return the losses and the final weights (host arrays)."""
    context.set_mode_cpu()
    solver = caffecli.get_solver(param)
    losses = []
    for mode in modes:
        context.set_mode_gpu() if mode == "gpu" else context.set_mode_cpu()
        solver.step(1)
        losses.append(float(solver.net.blobs["loss"].data))
    context.set_mode_cpu()
    return losses, [p.data.copy() for p in solver.net.engine.learnable_params]


def test_switching_modes_between_iterations_gives_the_same_numbers(tmp_path, standin):
    param = lenet_solver(tmp_path)
    cpu_losses, cpu_w = train(param, ["cpu"] * 6)
    mixed_losses, mixed_w = train(param, ["gpu", "cpu", "gpu", "gpu", "cpu", "gpu"])
    gpu_losses, gpu_w = train(param, ["gpu"] * 6)
    assert cpu_losses[-1] < cpu_losses[0]
    # the stand-in runs the written-once numpy path; the CPU's GEMMs go to BLAS directly
    # (accumulating in place), so the two round differently, within float32's precision
    numpy.testing.assert_allclose(mixed_losses, cpu_losses, rtol=1e-5)
    numpy.testing.assert_allclose(gpu_losses, cpu_losses, rtol=1e-5)
    for a, b, c in zip(cpu_w, mixed_w, gpu_w):
        scale = float(numpy.abs(a).max())          # rounding differences grow over the steps
        numpy.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-4 * scale)
        numpy.testing.assert_allclose(c, a, rtol=1e-4, atol=1e-4 * scale)


def test_gpu_mode_after_net_equals_a_net_built_on_the_gpu(standin):
    model = os.path.join(ROOT, "models", "lenet", "lenet.prototxt")
    x = numpy.random.RandomState(1).rand(64, 1, 28, 28).astype(numpy.float32)
    caffecli.set_random_seed(3)
    built_on_cpu = caffecli.Net(model, caffecli.TEST, log=False)
    caffecli.set_mode_gpu()                        # pycaffe scripts often switch here
    got = built_on_cpu.forward(data=x)["prob"].copy()
    caffecli.set_random_seed(3)
    built_on_gpu = caffecli.Net(model, caffecli.TEST, log=False)
    want = built_on_gpu.forward(data=x)["prob"]
    assert numpy.array_equal(got, want)
    # computed on the device; pycaffe's blob.data is mutable_cpu_data, so now at the host
    assert built_on_cpu.blobs["prob"].data_head == "at_cpu"
    assert built_on_cpu.blobs["conv1"].data_head == "at_gpu"
    caffecli.set_mode_cpu()                        # and back: the device copies come home
    # (the CPU's GEMMs are BLAS calls of their own: equal within float32's rounding)
    numpy.testing.assert_allclose(built_on_cpu.forward(data=x)["prob"], want, rtol=1e-5)


def test_host_writes_reach_the_device_before_the_next_forward(standin):
    model = os.path.join(ROOT, "models", "lenet", "lenet.prototxt")
    net = caffecli.Net(model, caffecli.TEST, log=False)
    caffecli.set_mode_gpu()
    net.blobs["data"].data[...] = 0
    zeros = net.forward()["prob"].copy()
    net.blobs["data"].data[0] = 1                  # a host write between forwards
    ones = net.forward()["prob"].copy()
    assert not numpy.array_equal(zeros[0], ones[0]) and numpy.array_equal(zeros[1:], ones[1:])
    net.params["ip2"][1].data[0] += 5.0            # parameters too
    assert not numpy.allclose(net.forward()["prob"], ones)


def test_a_training_iteration_copies_only_the_batch_in_and_the_loss_out(tmp_path, standin):
    solver = caffecli.get_solver(lenet_solver(tmp_path))
    caffecli.set_mode_gpu()
    solver.step(2)          # the first steps move the fillers' weights to the device once
    standin.reset_transfers()
    solver.step(5)
    # per iteration the scalar loss comes out; the batch (data and label) goes in from the
    # prefetch thread, as Caffe's prefetch pushes it, so the training thread copies nothing in
    assert standin.transfers_of() == {"h2d": 0, "d2h": 1 * 5}
    # the loader refills the 5 slots the iterations freed: data and label of each batch in
    loader = solver.net.engine.layer_by_name("mnist").prefetcher._thread
    deadline = time.monotonic() + 10
    while standin.transfers_of(loader)["h2d"] < 2 * 5 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert standin.transfers_of(loader) == {"h2d": 2 * 5, "d2h": 0}
    assert all(b.data_head in ("at_gpu", "synced")
               for b in solver.net.engine.learnable_params)


def test_the_standin_refuses_to_mix_host_and_device_arrays(standin):
    d = standin.asarray(numpy.arange(3.0))
    h = numpy.ones(3)
    with pytest.raises(TypeError):
        d + h
    with pytest.raises(TypeError):
        d[...] = h                       # cupy refuses a numpy value, too
    with pytest.raises(TypeError):
        numpy.asarray(d)                 # no implicit conversion to the host
    with pytest.raises(TypeError):
        standin.exp(h)
    total = (d * 2).sum()                # reductions stay on the device as 0-d arrays
    assert isinstance(total, standin.ndarray) and total.shape == ()
    standin.reset_transfers()
    assert float(total) == 6.0 and standin.asnumpy(d).tolist() == [0.0, 1.0, 2.0]
    standin.asarray([1, 2])
    assert standin.transfers == {"h2d": 1, "d2h": 2}
    assert standin.get_array_module(d) is standin and standin.get_array_module(h) is numpy


def test_a_python_layer_runs_on_host_copies_in_gpu_mode(tmp_path, monkeypatch, standin):
    (tmp_path / "host_pylayer.py").write_text(
        "import numpy\nimport caffecli as caffe\n"
        "class Double(caffe.Layer):\n"
        "    def reshape(self, bottom, top): top[0].reshape(*bottom[0].data.shape)\n"
        "    def forward(self, bottom, top):\n"
        "        assert isinstance(bottom[0].data, numpy.ndarray)\n"
        "        top[0].data[...] = 2 * bottom[0].data\n"
        "    def backward(self, top, propagate_down, bottom):\n"
        "        bottom[0].diff[...] = 2 * top[0].diff\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "net.prototxt").write_text(
        'force_backward: true\n'
        'layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }\n'
        'layer { name: "relu" type: "ReLU" bottom: "x" top: "r" }\n'
        'layer { name: "py" type: "Python" bottom: "r" top: "y" '
        'python_param { module: "host_pylayer" layer: "Double" } }\n'
        'layer { name: "abs" type: "AbsVal" bottom: "y" top: "z" }\n')
    net = caffecli.Net(str(tmp_path / "net.prototxt"), caffecli.TEST, log=False)
    caffecli.set_mode_gpu()
    net.forward()                    # set-up left some blobs at the host: moved once
    net.blobs["x"].data[...] = [[1, -2, 3], [-4, 5, -6]]
    standin.reset_transfers()
    assert net.forward()["z"].tolist() == [[2, 0, 6], [0, 10, 0]]
    # in: x, y (the Python layer's top, for AbsVal) and, as Caffe's mutable_gpu_data does,
    # r and z, which the last pass left current on the host (pycaffe's .data is mutable);
    # out: r to the Python layer, z to the user
    assert standin.transfers == {"h2d": 4, "d2h": 2}
    diffs = net.backward(z=numpy.ones((2, 3), numpy.float32))
    assert diffs["x"].tolist() == [[2, 0, 2], [0, 2, 0]]


def test_the_command_line_trains_on_the_standin_gpu_with_the_cpus_numbers(tmp_path):
    """``CAFFECLI_STANDIN_GPU=1 caffecli train -gpu 0`` runs every device path and ends with
    the CPU run's weights (to rounding: the CPU's GEMMs are BLAS calls of their own)."""
    import subprocess
    import sys
    from caffecli.proto.io import net_to_text
    param = lenet_solver(tmp_path, batch=8, records=24)
    param.max_iter, param.snapshot_after_train = 4, True
    results = {}
    for mode, gpu, env in (("cpu", [], {}), ("gpu", ["-gpu", "0"], {"CAFFECLI_STANDIN_GPU": "1"})):
        folder = tmp_path / mode
        folder.mkdir()
        param.snapshot_prefix = str(folder / "lenet")
        (folder / "solver.prototxt").write_text(net_to_text(param))
        run = subprocess.run([sys.executable, "-m", "caffecli", "train", "-solver",
                              str(folder / "solver.prototxt")] + gpu,
                             env=dict(os.environ, **env), capture_output=True, text=True)
        assert run.returncode == 0, run.stderr[-2000:]
        assert ("Using GPUs 0" in run.stderr) == (mode == "gpu")
        net = caffecli.Net(os.path.join(ROOT, "models", "lenet", "lenet.prototxt"),
                           caffecli.TEST, weights=str(folder / "lenet_iter_4.caffemodel"),
                           log=False)
        results[mode] = [p.data.copy() for p in net.engine.learnable_params]
    for a, b in zip(results["cpu"], results["gpu"]):
        numpy.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)


def test_dropout_draws_its_mask_on_the_device_from_the_ranks_stream(standin):
    """A TRAIN Dropout in GPU mode copies nothing to the device; its mask is a counter-based
    draw keyed by the rank's seeded device stream (Caffe's GPU mask is cuRAND's, not its
    CPU's), so a seeded GPU run repeats, while the CPU draws Caffe's CPU mask."""
    text = '''input: "x" input_shape { dim: 8 dim: 300 }
              layer { name: "drop" type: "Dropout" bottom: "x" top: "y"
                      dropout_param { dropout_ratio: 0.3 } }'''
    x = numpy.random.RandomState(1).rand(8, 300).astype(numpy.float32) + 1
    outs = []
    for mode in ("cpu", "gpu", "gpu"):
        context.set_mode_gpu() if mode == "gpu" else context.set_mode_cpu()
        net = caffecli.Net(parse_text(text, caffe_pb2.NetParameter()), caffecli.TRAIN,
                           log=False)
        net.blobs["x"].data[...] = x
        context.set_random_seed(7)
        host_words = context.rng().peek(4).tolist()
        net.engine.forward_pass()                   # the input moves to the device here
        standin.reset_transfers()
        net.engine.forward_pass()
        assert standin.transfers["h2d"] == 0 or mode == "cpu"
        # the device keys come from the device stream: the host's is left as Caffe's GPU
        # mode leaves it (its cuRAND masks take nothing from the host generator)
        assert (context.rng().peek(4).tolist() == host_words) == (mode == "gpu")
        outs.append(net.blobs["y"].data.copy())
    context.set_mode_cpu()
    numpy.testing.assert_array_equal(outs[1], outs[2])
    assert not numpy.array_equal(outs[0], outs[1])
    for out in outs:
        kept = out != 0
        assert 0.65 < kept.mean() < 0.75
        numpy.testing.assert_allclose(out[kept], x[kept] / numpy.float32(0.7), rtol=1e-6)


def test_a_prefetch_threads_upload_goes_through_its_own_pinned_buffers(standin):
    from caffecli import backend
    data = numpy.arange(12, dtype=numpy.float32).reshape(3, 4)
    labels = numpy.array([1.0, 2.0, 3.0], numpy.float32)
    first = backend.upload([data, labels], 0)
    assert [a.get().tolist() for a in first] == [data.tolist(), labels.tolist()]
    buffers = dict(backend._uploads.pinned)
    second = backend.upload([data + 1, labels], 0)     # same sizes: the same buffers
    assert all(backend._uploads.pinned[k] is v for k, v in buffers.items())
    assert second[0].get()[0, 0] == 1
    assert first[0].get()[0, 0] == 0                    # each batch its own device array
    assert standin.transfers_of()["h2d"] == 4
