"""CUDA graphs (CAFFECLI_CUDA_GRAPHS=1): a net's forward-backward captured once and replayed gives
eager's numbers to the bit, copies what eager copies, and falls back to eager, saying why, where
a net cannot be captured. Runs on the stand-in device, whose capture records without running,
as CUDA's does (test_gpu.py runs the same on a real GPU)."""
import numpy
import pytest

import caffecli
from caffecli import context, replay
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from test_device_model import lenet_solver

NET = """force_backward: true
input: "x" input_shape { dim: 6 dim: 2 dim: 8 dim: 8 }
input: "label" input_shape { dim: 6 }
layer { name: "conv" type: "Convolution" bottom: "x" top: "conv"
        convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "xavier" } } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool"
        pooling_param { pool: %s kernel_size: 2 stride: 2 } }
layer { name: "drop" type: "Dropout" bottom: "pool" top: "pool"
        dropout_param { dropout_ratio: 0.4 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip"
        inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
"""


def graphs(monkeypatch, on):
    monkeypatch.setenv("CAFFECLI_CUDA_GRAPHS", "1" if on else "0")


def passes(net, steps, batches, edit=None):
    """Losses, tops and gradients of ``steps`` forward-backward passes on seeded batches."""
    rs, out = numpy.random.RandomState(4), []
    for i in range(steps):
        x = rs.rand(batches[i % len(batches)], 2, 8, 8).astype(numpy.float32)
        if net.blobs["x"].shape != x.shape:
            net.blobs["x"].reshape(*x.shape)
            net.blobs["label"].reshape(x.shape[0])
            net.engine.reshape()
        net.blobs["x"].data[...] = x
        net.blobs["label"].data[...] = rs.randint(0, 3, x.shape[0])
        for p in net.engine.learnable_params:
            p.diff[...] = 0
        if edit is not None:
            edit(net, i)
        out.append(net.engine.forward_backward())
        out += [net.blobs[n].data.copy() for n in ("pool", "ip")]
        out += [p.diff.copy() for p in net.engine.learnable_params]
        out.append(net.blobs["x"].diff.copy())
    return out


BATCH_NORM = ('layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv"\n'
              '        batch_norm_param { use_global_stats: true } }\nlayer { name: "pool"')


def twin_runs(monkeypatch, pool="MAX", steps=6, batches=(6,), edit=None, text=NET):
    runs = []
    for on in (False, True):
        graphs(monkeypatch, on)
        context.set_mode_gpu()
        context.set_random_seed(11)
        net = caffecli.Net(parse_text(text % pool, caffe_pb2.NetParameter()), caffecli.TRAIN,
                           log=False)
        runs.append(passes(net, steps, batches, edit))
        context.set_mode_cpu()
    return runs, net.engine.__dict__.get("_graph_step")


def assert_same(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        assert numpy.array_equal(x, y)


def test_replayed_passes_equal_eager_ones_bit_for_bit(monkeypatch, standin, logs):
    (eager, graphed), step = twin_runs(monkeypatch)
    assert step is not None and step.graph is not None      # captured, then replayed
    said = [line for line in logs.getvalue().splitlines() if "Captured a CUDA graph" in line]
    assert len(said) == 1 and "5 layers forward and backward, replayed" in said[0]
    assert_same(eager, graphed)
    # Dropout draws a fresh mask on every replay (its key is fed before each launch)
    masks = graphed[1::8]                                  # "pool", after the dropout
    assert not numpy.array_equal(masks[-1] != 0, masks[-2] != 0)


def test_average_pooling_keeps_its_divisors_on_the_device_and_is_captured(monkeypatch,
                                                                           standin):
    (eager, graphed), step = twin_runs(monkeypatch, pool="AVE")
    assert step.graph is not None, step.reason
    assert_same(eager, graphed)


def test_host_writes_between_replays_reach_the_graph(monkeypatch, standin):
    def edit(net, i):
        if i == 4:
            net.params["ip"][0].data[...] *= -1              # pycaffe writes on the host
    (eager, graphed), step = twin_runs(monkeypatch, edit=edit)
    assert step.graph is not None
    assert_same(eager, graphed)


def test_a_new_batch_shape_runs_eagerly_then_captures_again(monkeypatch, standin):
    (eager, graphed), step = twin_runs(monkeypatch, steps=10, batches=(6,) * 4 + (4,) * 6)
    assert_same(eager, graphed)
    assert step.graph is not None and step.signature[0][0] == (4, 2, 8, 8)


def test_batch_norm_with_global_statistics_is_captured(monkeypatch, standin):
    def edit(net, i):
        if i in (0, 4):    # statistics set from Python, before the capture and between replays
            mean, var, factor = net.params["bn"]
            mean.data[...], var.data[...], factor.data[...] = 0.5 * i, 2.0 + i, 4.0 - i
    text = NET.replace('layer { name: "pool"', BATCH_NORM, 1)
    (eager, graphed), step = twin_runs(monkeypatch, edit=edit, text=text)
    assert step.graph is not None, step.reason
    assert_same(eager, graphed)


def test_a_loss_normalized_by_its_valid_labels_is_captured(monkeypatch, standin):
    # VALID normalization with an ignore_label counts the labels on the device, unread
    text = NET.replace('bottom: "label" top: "loss"',
                       'bottom: "label" top: "loss" loss_param { ignore_label: 1 }', 1)
    (eager, graphed), step = twin_runs(monkeypatch, text=text)
    assert step.graph is not None, step.reason
    assert_same(eager, graphed)


def test_a_layer_reading_the_host_falls_back_to_eager_saying_why(monkeypatch, standin, logs):
    # STOCHASTIC pooling draws its numbers on the host and copies them in: CUDA refuses
    # that copy while capturing, so the net runs eagerly (the draw undone: same numbers)
    (eager, graphed), step = twin_runs(monkeypatch, pool="STOCHASTIC")
    assert step.graph is None and "CaptureUnsupported" in step.reason
    assert_same(eager, graphed)
    said = [line for line in logs.getvalue().splitlines()
            if "Not capturing a CUDA graph" in line]
    assert len(said) == 1 and "running it eagerly" in said[0]


def test_a_host_side_layer_after_the_data_keeps_the_net_eager(monkeypatch, standin, tmp_path,
                                                               logs):
    (tmp_path / "twice_layer.py").write_text(
        "import caffecli as caffe\n"
        "class Twice(caffe.Layer):\n"
        "    def reshape(self, bottom, top): top[0].reshape(*bottom[0].data.shape)\n"
        "    def forward(self, bottom, top): top[0].data[...] = 2 * bottom[0].data\n"
        "    def backward(self, top, down, bottom): bottom[0].diff[...] = 2 * top[0].diff\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    text = (NET % "MAX").replace('top: "ip"\n', 'top: "ip0"\n', 1).replace(
        'layer { name: "loss"', 'layer { name: "py" type: "Python" bottom: "ip0" top: "ip" '
        'python_param { module: "twice_layer" layer: "Twice" } }\nlayer { name: "loss"')
    graphs(monkeypatch, True)
    context.set_mode_gpu()
    net = caffecli.Net(parse_text(text, caffe_pb2.NetParameter()), caffecli.TRAIN, log=False)
    passes(net, 3, (6,))
    step = net.engine._graph_step
    assert step.graph is None and "layer py (Python) runs on the host" in step.reason
    assert "layer py (Python) runs on the host" in logs.getvalue()


@pytest.mark.parametrize("rule", ["SGD", "Adam"])
def test_a_captured_lenet_trains_as_eager_copying_only_batch_in_and_loss_out(
        monkeypatch, tmp_path, standin, rule):
    """The whole iteration is one graph (update too): the rate changes every iteration (inv
    policy; multistep for Adam, whose bias correction changes too) and is fed each launch."""
    param = lenet_solver(tmp_path)
    if rule == "Adam":
        param.type, param.lr_policy, param.momentum2 = "Adam", "multistep", 0.999
        param.stepvalue.extend([4, 6])
        param.gamma = 0.5
    results = {}
    for on in (False, True):
        graphs(monkeypatch, on)
        context.set_mode_cpu()
        solver = caffecli.get_solver(param)
        context.set_mode_gpu()
        solver.step(3)                  # two eager warm-up passes, then the capture
        standin.reset_transfers()
        solver.step(4)
        results[on] = (standin.transfers_of(),
                       [p.data.copy() for p in solver.net.engine.learnable_params])
        context.set_mode_cpu()
    assert solver._engine._graph_step.graph is not None   # the whole iteration, update too
    # the batch goes in from the prefetch thread; the training thread reads the loss only
    assert results[True][0] == results[False][0] == {"h2d": 0, "d2h": 1 * 4}
    assert_same(results[False][1], results[True][1])


def test_graphs_are_on_by_default_and_off_with_0(monkeypatch, standin):
    monkeypatch.delenv("CAFFECLI_CUDA_GRAPHS", raising=False)
    assert replay.enabled()
    context.set_mode_gpu()
    for setting, captured in ((None, True), ("0", False)):
        if setting:
            monkeypatch.setenv("CAFFECLI_CUDA_GRAPHS", setting)
        net = caffecli.Net(parse_text(NET % "MAX", caffe_pb2.NetParameter()), caffecli.TRAIN,
                           log=False)
        passes(net, 3, (6,))
        step = net.engine.__dict__.get("_graph_step")
        assert (step is not None and step.graph is not None) == captured


# ---- the stand-in's capture, as CUDA's ------------------------------------------------------
def test_a_capture_runs_nothing_and_a_launch_runs_it_on_the_same_memory(standin):
    a = standin.asarray(numpy.arange(4, dtype=numpy.float32))
    acc = standin.zeros(4, numpy.float32)
    s = standin.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        b = a * 2 + 1                     # made in the capture: refilled by every launch
        acc += b
        scale = 3.0                       # a host value: fixed at capture
        c = b * scale
        g = s.end_capture()
    assert acc.get().tolist() == [0, 0, 0, 0]          # nothing ran
    g.launch()
    assert acc.get().tolist() == [1, 3, 5, 7] and c.get().tolist() == [3, 9, 15, 21]
    a[...] = 10                                         # inputs change between launches
    g.launch()
    assert acc.get().tolist() == [22, 24, 26, 28] and c.get().tolist() == [63] * 4


def test_a_capture_leaves_memory_reached_by_pointer_as_it_was(standin):
    """Memory written in a capture through its array and through a view made from its address
    (as the stand-in cuDNN frontend reaches memory) gets its old values back at the capture's
    end, whichever array was saved first."""
    import ctypes
    a = standin.asarray(numpy.arange(4, dtype=numpy.float64))
    raw = numpy.frombuffer((ctypes.c_char * 32).from_address(a.data.ptr), numpy.float64)
    alias = standin.ndarray(raw)
    s = standin.cuda.Stream(non_blocking=True)
    with s:
        s.begin_capture()
        a += 1                              # a saved first
        alias *= 10                         # the alias saved with a's new values
        s.end_capture()
    assert a.get().tolist() == [0, 1, 2, 3]


def test_the_standin_refuses_what_cuda_refuses_while_capturing(standin):
    a = standin.zeros(3, numpy.float32)
    with pytest.raises(RuntimeError, match="default"):
        standin.cuda.get_current_stream().begin_capture()
    s = standin.cuda.Stream(non_blocking=True)
    s.begin_capture()
    try:
        for copy in (lambda: a.get(), lambda: float(a.sum()), lambda: standin.asarray([1.0])):
            with pytest.raises(RuntimeError, match="StreamCaptureUnsupported"):
                copy()
    finally:
        s.end_capture()
    assert not s.is_capturing()
    with pytest.raises(RuntimeError, match="not capturing"):
        s.end_capture()


def test_training_with_tests_and_snapshots_between_replays_matches_eager(
        monkeypatch, tmp_path, standin):
    """The test net (sharing the weights) replays a graph of its forward between the training
    replays, and scores as eager passes do; a snapshot reads the weights the replays trained."""
    param = lenet_solver(tmp_path)
    param.test_iter.append(2)
    param.test_interval, param.max_iter, param.snapshot = 3, 9, 9
    results = {}
    for on in (False, True):
        graphs(monkeypatch, on)
        param.snapshot_prefix = str(tmp_path / ("graph" if on else "eager"))
        context.set_mode_cpu()
        solver = caffecli.get_solver(param)
        context.set_mode_gpu()
        solver.solve()
        context.set_mode_cpu()
        net = caffecli.Net(param.net_param, caffecli.TEST,
                           weights=param.snapshot_prefix + "_iter_9.caffemodel", log=False)
        results[on] = ([float(v) for v in solver.test_nets[0].blobs["accuracy"].data.flat],
                       [p.data.copy() for p in net.engine.learnable_params])
    assert solver._engine._graph_step.graph is not None   # the whole iteration, update too
    assert solver.test_nets[0]._forward_graph.graph is not None   # the test net's forward
    assert results[True][0] == results[False][0]
    assert_same(results[False][1], results[True][1])


# ---- forward alone: a test net's passes, pycaffe's net.forward() ---------------------------
def forward_runs(net, steps, rs):
    """Loss, outputs and every top of ``steps`` forward passes on fresh inputs."""
    out = []
    for _ in range(steps):
        net.blobs["x"].data[...] = rs.rand(*net.blobs["x"].shape)
        net.blobs["label"].data[...] = rs.randint(0, 3, net.blobs["label"].shape[0])
        out.append(net.engine.forward_pass())
        out += [net.blobs[n].data.copy() for n in ("conv", "pool", "ip")]
    return out


def test_a_forward_pass_replays_a_graph_of_the_forward_alone(monkeypatch, standin, logs):
    """Where no backward follows (``forward_only``, as a solver sets on its test nets)."""
    runs = []
    for on in (False, True):
        graphs(monkeypatch, on)
        context.set_mode_gpu()
        context.set_random_seed(11)
        net = caffecli.Net(parse_text(NET % "AVE", caffe_pb2.NetParameter()), caffecli.TEST,
                           log=False)
        net.engine.forward_only = True
        standin.reset_transfers()
        runs.append((forward_runs(net, 6, numpy.random.RandomState(2)), standin.transfers_of()))
        context.set_mode_cpu()
    assert_same(runs[0][0], runs[1][0])
    assert runs[0][1] == runs[1][1]          # the inputs in, the tops out: what eager copies
    step = net.engine._forward_graph
    assert step.graph is not None and "_graph_step" not in net.engine.__dict__
    assert "Captured a CUDA graph of : 5 layers forward, replayed" in logs.getvalue()


DEPLOY = NET.replace("force_backward: true\n", "").split('layer { name: "loss"')[0]


def test_pycaffe_forward_of_an_inference_net_is_graphed(monkeypatch, standin):
    """A net that needs no backward (a deploy net: no loss, no force_backward) replays its
    whole forward; one that may be trained from Python, or a range of layers, runs eagerly."""
    graphs(monkeypatch, True)
    context.set_mode_gpu()
    net = caffecli.Net(parse_text(DEPLOY % "MAX", caffe_pb2.NetParameter()), caffecli.TEST,
                       log=False)
    rs, seen = numpy.random.RandomState(3), []
    for _ in range(4):
        x = rs.rand(6, 2, 8, 8).astype(numpy.float32)
        seen.append((x, net.forward(x=x, label=numpy.zeros(6, numpy.float32))["ip"].copy()))
    step = net.engine._forward_graph
    assert step.graph is not None
    graph = step.graph
    graphs(monkeypatch, False)
    for x, ip in seen:                        # eager passes on the same inputs agree
        assert numpy.array_equal(net.forward(x=x, label=numpy.zeros(6, numpy.float32))["ip"],
                                 ip)
    graphs(monkeypatch, True)
    net.forward(end="pool")                   # a range: eager, the graph kept
    net.forward()
    assert step.graph is graph
    trainable = caffecli.Net(parse_text(NET % "MAX", caffe_pb2.NetParameter()), caffecli.TEST,
                             log=False)
    for _ in range(4):
        trainable.forward()
    assert "_forward_graph" not in trainable.engine.__dict__

