"""Solvers: closed-form updates for every rule, lr policies, the step loop, logs, set-up errors."""
import math
import os

import numpy
import pytest

from caffecli import glog, solvers
from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2
from caffecli.solvers.lr_policy import learning_rate

from solver_helpers import TINY_NET, solver_param, small_net

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode


def make(text, net=TINY_NET, x=None):
    s = solvers.get_solver(solver_param(text + " snapshot_after_train: false", net))
    if x is not None:
        s.net.blob_by_name("x").data[...] = x
    else:
        s.net.blob_by_name("x").data[...] = 1
    return s


def weight(s):
    return float(s.net.layer_by_name("ip").blobs[0].data.reshape(-1)[0])


# ---- closed-form numbers on a one-weight net: loss 0.5 w^2, gradient w, w0 = 1 ------------
def test_sgd_momentum_closed_form():
    s = make('type: "SGD" base_lr: 0.1 momentum: 0.9 lr_policy: "fixed"')
    s.step(1)
    assert weight(s) == pytest.approx(0.9, rel=1e-6)        # v = 0.1
    s.step(1)
    assert weight(s) == pytest.approx(0.72, rel=1e-6)       # v = 0.09 + 0.09
    assert float(s.history[0].data.reshape(-1)[0]) == pytest.approx(0.18, rel=1e-6)
    assert s.iter == 2


def test_sgd_weight_decay_l2_and_l1():
    s = make('type: "SGD" base_lr: 0.1 weight_decay: 0.5 lr_policy: "fixed"')
    s.step(1)
    assert weight(s) == pytest.approx(1 - 0.1 * (1 + 0.5), rel=1e-6)
    s = make('type: "SGD" base_lr: 0.1 weight_decay: 0.5 regularization_type: "L1" '
             'lr_policy: "fixed"', x=2)
    s.step(1)   # y = 2w, dL/dw = 4w = 4, L1 adds 0.5 * sign(1)
    assert weight(s) == pytest.approx(1 - 0.1 * 4.5, rel=1e-6)


def test_unknown_regularization_is_an_error():
    s = make('type: "SGD" base_lr: 0.1 weight_decay: 0.5 regularization_type: "L3" '
             'lr_policy: "fixed"')
    with pytest.raises(CaffeError, match="regularization type: L3"):
        s.step(1)


def test_nesterov_closed_form():
    s = make('type: "Nesterov" base_lr: 0.1 momentum: 0.9 lr_policy: "fixed"')
    s.step(1)   # h = 0.1; step 1.9*0.1 - 0.9*0 = 0.19
    assert weight(s) == pytest.approx(0.81, rel=1e-6)
    s.step(1)   # g = 0.81; h' = 0.09 + 0.081 = 0.171; step 1.9*0.171 - 0.9*0.1 = 0.2349
    assert weight(s) == pytest.approx(0.81 - 0.2349, rel=1e-6)


def test_adagrad_closed_form():
    s = make('type: "AdaGrad" base_lr: 0.1 delta: 0.5 lr_policy: "fixed"')
    s.step(1)   # h = 1; step 0.1 * 1 / (1 + 0.5)
    w1 = 1 - 0.1 / 1.5
    assert weight(s) == pytest.approx(w1, rel=1e-6)
    s.step(1)
    h = 1 + w1 * w1
    assert weight(s) == pytest.approx(w1 - 0.1 * w1 / (math.sqrt(h) + 0.5), rel=1e-6)


def test_rmsprop_closed_form():
    s = make('type: "RMSProp" base_lr: 0.1 rms_decay: 0.8 delta: 0.25 lr_policy: "fixed"')
    s.step(1)   # h = 0.2; step 0.1 / (sqrt(0.2) + 0.25)
    assert weight(s) == pytest.approx(1 - 0.1 / (math.sqrt(0.2) + 0.25), rel=1e-6)


def test_adadelta_closed_form():
    s = make('type: "AdaDelta" base_lr: 2 momentum: 0.9 delta: 0.01 lr_policy: "fixed"')
    s.step(1)   # h1 = 0.1; u = 1 * sqrt((0 + d) / (0.1 + d)); h2 = 0.1 u^2; w -= 2u
    u = math.sqrt(0.01 / 0.11)
    assert weight(s) == pytest.approx(1 - 2 * u, rel=1e-6)
    n = len(s.net.learnable_params)
    assert len(s.history) == 2 * n
    assert float(s.history[n].data.reshape(-1)[0]) == pytest.approx(0.1 * u * u, rel=1e-5)


def test_adam_closed_form_and_bias_correction():
    s = make('type: "Adam" base_lr: 0.1 momentum: 0.9 momentum2: 0.99 delta: 0.001 '
             'lr_policy: "fixed"')
    s.step(1)   # m = 0.1, v = 0.01; corr = sqrt(0.01)/0.1 = 1; step 0.1 * 0.1/(0.1+0.001)
    w1 = 1 - 0.1 * 0.1 / 0.101
    assert weight(s) == pytest.approx(w1, rel=1e-6)
    s.step(1)
    m = 0.9 * 0.1 + 0.1 * w1
    v = 0.99 * 0.01 + 0.01 * w1 * w1
    corr = math.sqrt(1 - 0.99 ** 2) / (1 - 0.9 ** 2)
    assert weight(s) == pytest.approx(w1 - 0.1 * corr * m / (math.sqrt(v) + 0.001), rel=1e-5)


@pytest.mark.parametrize("text,msg", [
    ('type: "AdaGrad" momentum: 0.9', "Momentum cannot be used with AdaGrad"),
    ('type: "RMSProp" momentum: 0.5', "Momentum cannot be used with RMSProp"),
    ('type: "RMSProp" rms_decay: 1.0', "rms_decay should lie between 0 and 1"),
    ('type: "Fancy"', "Unknown solver type: Fancy"),
])
def test_bad_solver_parameters(text, msg):
    with pytest.raises(CaffeError, match=msg):
        make(text + ' base_lr: 0.1 lr_policy: "fixed"')


# ---- a general reference on a 2-parameter net with lr_mult/decay_mult, clip, iter_size ---
def _reference(kind, p, params, grads_fn, iters, lr_mults, decay_mults):
    """Textbook float64 updates for ``iters`` steps (independent of the solver code)."""
    n = len(params)
    h = [numpy.zeros_like(w) for w in params]
    h2 = [numpy.zeros_like(w) for w in params]
    step_count = 0
    for it in range(iters):
        rate, step_count = learning_rate(p, it, step_count, log=False)
        g = grads_fn(params)
        if p.clip_gradients >= 0:
            norm = math.sqrt(sum(float((gi * gi).sum()) for gi in g))
            if norm > p.clip_gradients:
                g = [gi * (p.clip_gradients / norm) for gi in g]
        for i in range(n):
            gi = g[i] + p.weight_decay * decay_mults[i] * params[i]
            lr = rate * lr_mults[i]
            if kind == "SGD":
                h[i] = p.momentum * h[i] + lr * gi
                step = h[i]
            elif kind == "Nesterov":
                old = h[i]
                h[i] = p.momentum * h[i] + lr * gi
                step = (1 + p.momentum) * h[i] - p.momentum * old
            elif kind == "AdaGrad":
                h[i] = h[i] + gi * gi
                step = lr * gi / (numpy.sqrt(h[i]) + p.delta)
            elif kind == "RMSProp":
                h[i] = p.rms_decay * h[i] + (1 - p.rms_decay) * gi * gi
                step = lr * gi / (numpy.sqrt(h[i]) + p.delta)
            elif kind == "AdaDelta":
                h[i] = p.momentum * h[i] + (1 - p.momentum) * gi * gi
                u = gi * numpy.sqrt((h2[i] + p.delta) / (h[i] + p.delta))
                h2[i] = p.momentum * h2[i] + (1 - p.momentum) * u * u
                step = lr * u
            elif kind == "Adam":
                h[i] = p.momentum * h[i] + (1 - p.momentum) * gi
                h2[i] = p.momentum2 * h2[i] + (1 - p.momentum2) * gi * gi
                t = it + 1
                corr = math.sqrt(1 - p.momentum2 ** t) / (1 - p.momentum ** t)
                step = lr * corr * h[i] / (numpy.sqrt(h2[i]) + p.delta)
            params[i] = params[i] - step
    return params


SETTINGS = {
    "SGD": 'momentum: 0.9 weight_decay: 0.01 lr_policy: "step" gamma: 0.5 stepsize: 2',
    "Nesterov": 'momentum: 0.8 weight_decay: 0.02 lr_policy: "inv" gamma: 0.1 power: 0.75',
    "AdaGrad": 'delta: 1e-3 weight_decay: 0.01 lr_policy: "exp" gamma: 0.9',
    "RMSProp": 'rms_decay: 0.9 delta: 1e-4 lr_policy: "poly" power: 2 max_iter: 10',
    "AdaDelta": 'momentum: 0.95 delta: 1e-4 lr_policy: "multistep" gamma: 0.5 '
                'stepvalue: 1 stepvalue: 3',
    "Adam": 'momentum: 0.9 momentum2: 0.999 delta: 1e-6 lr_policy: "sigmoid" gamma: 0.5 '
            'stepsize: 2',
}


@pytest.mark.parametrize("kind", sorted(SETTINGS))
@pytest.mark.parametrize("extra", ["", "clip_gradients: 0.3", "iter_size: 3"])
def test_update_rules_match_reference(kind, extra):
    text = 'type: "%s" base_lr: 0.05 %s %s' % (kind, SETTINGS[kind], extra)
    x = numpy.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=numpy.float32)
    s = make(text, small_net(lr1=1, dm1=1, lr2=2, dm2=0), x=x)
    ip = s.net.layer_by_name("ip")
    params = [b.data.astype(numpy.float64).copy() for b in ip.blobs]
    xd = x.astype(numpy.float64)

    def grads(ps):
        y = xd @ ps[0].T + ps[1]
        return [y.T @ xd, y.sum(0)]

    want = _reference(kind, s.param, params, grads, 4, [1, 2], [1, 0])
    s.step(4)
    for got, w in zip(ip.blobs, want):
        numpy.testing.assert_allclose(got.data, w, rtol=2e-4, atol=1e-6)


# ---- lr policies ---------------------------------------------------------------------
def _lr(text, it, step=0):
    return learning_rate(solver_param(text), it, step, log=False)


@pytest.mark.parametrize("text,it,want", [
    ('lr_policy: "fixed" base_lr: 0.1', 7, 0.1),
    ('lr_policy: "step" base_lr: 0.1 gamma: 0.5 stepsize: 3', 7, 0.1 * 0.25),
    ('lr_policy: "exp" base_lr: 0.1 gamma: 0.9', 3, 0.1 * 0.9 ** 3),
    ('lr_policy: "inv" base_lr: 0.1 gamma: 0.1 power: 0.75', 4, 0.1 * 1.4 ** -0.75),
    ('lr_policy: "poly" base_lr: 0.1 power: 2 max_iter: 10', 4, 0.1 * 0.6 ** 2),
    ('lr_policy: "sigmoid" base_lr: 0.1 gamma: 0.5 stepsize: 4', 6,
     0.1 / (1 + math.exp(-0.5 * 2))),
])
def test_lr_policy_values(text, it, want):
    rate, _ = _lr(text, it)
    assert isinstance(rate, numpy.float32)
    assert float(rate) == pytest.approx(want, rel=1e-6)


def test_multistep_advances_one_step_per_call(logs):
    text = 'lr_policy: "multistep" base_lr: 1 gamma: 0.1 stepvalue: 2 stepvalue: 4'
    step, rates = 0, []
    for it in range(6):
        rate, step = learning_rate(solver_param(text), it, step)
        rates.append(float(rate))
    assert rates == pytest.approx([1, 1, 0.1, 0.1, 0.01, 0.01], rel=1e-6)
    assert "MultiStep Status: Iteration 2, step = 1" in logs.getvalue()
    assert "MultiStep Status: Iteration 4, step = 2" in logs.getvalue()


@pytest.mark.parametrize("text,msg", [
    ('lr_policy: "cosine" base_lr: 0.1', "Unknown learning rate policy: cosine"),
    ('lr_policy: "step" base_lr: 0.1', "stepsize > 0"),
    ('lr_policy: "sigmoid" base_lr: 0.1 gamma: -1 stepsize: 2', "gamma >= 0"),
])
def test_lr_policy_errors(text, msg):
    with pytest.raises(CaffeError, match=msg):
        _lr(text, 1)


# ---- the loop: display, smoothing, logs, tests, actions -------------------------------
def test_display_log_lines_and_smoothed_loss(logs):
    s = make('type: "SGD" base_lr: 0.1 lr_policy: "fixed" display: 1 average_loss: 2 '
             'max_iter: 3')
    s.solve()
    text = logs.getvalue()
    assert "solver.cpp:289] Solving tiny" in text
    assert "solver.cpp:290] Learning Rate Policy: fixed" in text
    assert "solver.cpp:239] Iteration 0 (" in text and "iters), loss = 0.5\n" in text
    assert "    Train net output #0: loss = 0.5 (* 1 = 0.5 loss)" in text
    assert "sgd_solver.cpp:112] Iteration 2, lr = 0.1" in text
    # losses 0.5, 0.405 -> smoothed over 2: 0.4525
    assert "Iteration 1 (" in text and "loss = 0.4525" in text
    assert "solver.cpp:327] Iteration 3, loss = " in text
    assert text.rstrip().endswith("Optimization Done.")
    assert len(s.losses) == 2


def test_snapshot_prefix_default_and_relative_paths(tmp_path, monkeypatch, logs):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "net.prototxt").write_text(TINY_NET.replace(
        'type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 } }',
        'type: "Input" top: "x" input_param { shape { dim: 1 dim: 1 } }'))
    (tmp_path / "my_solver.prototxt").write_text(
        'net: "net.prototxt" base_lr: 0.1 lr_policy: "fixed" max_iter: 2 snapshot: 1')
    s = solvers.get_solver("my_solver.prototxt")
    assert s.param.snapshot_prefix == "my_solver"
    assert "Creating training net from net file: net.prototxt" in logs.getvalue()
    paths = s.snapshot()
    assert paths[0] == "my_solver_iter_0.caffemodel"
    assert all(os.path.exists(p) for p in paths)
    assert not [p for p in os.listdir(".") if p.endswith(".tmp")]


def test_test_nets_average_outputs_and_share_weights(logs):
    net = TINY_NET.replace('name: "in"', 'name: "in"')
    p = solver_param('type: "SGD" base_lr: 0.1 lr_policy: "fixed" test_iter: 3 '
                     'test_interval: 2 max_iter: 2 display: 0 snapshot_after_train: false '
                     'test_compute_loss: true', net)
    s = solvers.get_solver(p)
    assert len(s.test_nets) == 1 and s.test_nets[0].phase == caffe_pb2.TEST
    for n in [s.net] + s.test_nets:
        n.blob_by_name("x").data[...] = 2
    s.solve()
    text = logs.getvalue()
    assert "Iteration 0, Testing net (#0)" in text
    assert "Test net output #0: loss = 2 (* 1 = 2 loss)" in text      # 0.5 * (2*1)^2
    w = weight(s)
    assert s.test_nets[0].layer_by_name("ip").blobs[0].data.reshape(-1)[0] == w
    assert "Test loss: %s" % glog.fmt(0.5 * (2 * w) ** 2) in text
    assert "Iteration 2, Testing net (#0)" in text


def test_action_request_stop_and_snapshot(tmp_path, monkeypatch, logs):
    monkeypatch.chdir(tmp_path)
    s = make('type: "SGD" base_lr: 0.1 lr_policy: "fixed" max_iter: 10 snapshot_prefix: "a"')
    calls = []

    def request():
        calls.append(s.iter)
        return "snapshot" if s.iter == 2 else ("stop" if s.iter == 4 else "none")
    s.action_request = request
    s.param.snapshot_after_train = True
    s.solve()
    assert s.iter == 4
    assert os.path.exists("a_iter_2.caffemodel") and os.path.exists("a_iter_4.solverstate")
    assert "Optimization stopped early." in logs.getvalue()


def test_weights_are_copied_into_train_and_test_nets(tmp_path, monkeypatch, logs):
    monkeypatch.chdir(tmp_path)
    s = make('type: "SGD" base_lr: 0.1 lr_policy: "fixed"')
    s.net.layer_by_name("ip").blobs[0].data[...] = 3.5
    s.net.save("w.caffemodel")
    p = solver_param('type: "SGD" base_lr: 0.1 lr_policy: "fixed" test_iter: 1 '
                     'test_interval: 5 weights: "w.caffemodel"', TINY_NET)
    s2 = solvers.get_solver(p)
    assert weight(s2) == 3.5
    assert s2.test_nets[0].layer_by_name("ip").blobs[0].data.reshape(-1)[0] == 3.5
    assert "solver.cpp:72] Finetuning from w.caffemodel" in logs.getvalue()


def test_random_seed_reproduces_fillers():
    p = 'type: "SGD" base_lr: 0.1 lr_policy: "fixed" random_seed: 5'
    a = solvers.get_solver(solver_param(p, small_net()))
    b = solvers.get_solver(solver_param(p, small_net()))
    numpy.testing.assert_array_equal(a.net.layer_by_name("ip").blobs[0].data,
                                     b.net.layer_by_name("ip").blobs[0].data)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
def test_nonfinite_loss_is_reported(logs):
    s = make('type: "SGD" base_lr: 10 lr_policy: "fixed" display: 0', x=1e20)
    s.step(2)
    assert "loss is not finite" in logs.getvalue()


@pytest.mark.parametrize("text,msg", [
    ('base_lr: 0.1', "must specify a train net"),
    ('base_lr: 0.1 test_iter: 1', "test_interval must be > 0"),
    ('base_lr: 0.1 average_loss: 0', "average_loss"),
])
def test_setup_errors(text, msg):
    net = None if "train net" in msg else TINY_NET
    with pytest.raises(CaffeError, match=msg):
        solvers.get_solver(solver_param(text, net))


def test_legacy_solver_type_enum_is_upgraded():
    p = solver_param('base_lr: 0.1 lr_policy: "fixed" solver_type: NESTEROV', TINY_NET)
    s = solvers.get_solver(p)
    assert isinstance(s, solvers.NesterovSolver) and s.type == "Nesterov"


def test_debug_info_only_on_display_iterations(logs):
    s = make('type: "SGD" base_lr: 0.1 lr_policy: "fixed" display: 2 debug_info: true')
    s.step(1)
    assert "[Forward] Layer ip" in logs.getvalue()
    logs.seek(0)
    logs.truncate()
    s.step(1)    # iteration 1 does not display
    assert "[Forward]" not in logs.getvalue()


def test_snapshot_diff_writes_gradients(tmp_path, monkeypatch):
    from caffecli.proto.io import read_binary
    monkeypatch.chdir(tmp_path)
    s = make('type: "SGD" base_lr: 0.1 lr_policy: "fixed" snapshot_diff: true '
             'snapshot_prefix: "d"')
    s.step(1)
    model = read_binary(s.snapshot()[0], caffe_pb2.NetParameter())
    ip = [lp for lp in model.layer if lp.name == "ip"][0]
    assert len(ip.blobs[0].diff) == 1 and ip.blobs[0].diff[0] != 0


V1_NET_WITH_STAGES = '''
name: "v1"
layers { name: "x" type: DUMMY_DATA top: "x" top: "t"
         dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 dim: 1 } } }
layers { name: "ip" type: INNER_PRODUCT bottom: "x" top: "y"
         inner_product_param { num_output: 1 weight_filler { type: "constant" value: 1 } } }
layers { name: "loss" type: EUCLIDEAN_LOSS bottom: "y" bottom: "t" top: "loss" }
layers { name: "acc" type: EUCLIDEAN_LOSS bottom: "y" bottom: "t" top: "on_train"
         include { phase: TEST stage: "test-on-train" } }
'''


def test_v1_net_param_inside_a_solver_is_upgraded(logs):
    """BVLC's lenet_consolidated_solver.prototxt writes its net inline in the V1 format; Caffe
    builds that as a net of no layers and aborts, caffecli upgrades it as a net file's."""
    p = solver_param('type: "SGD" base_lr: 0.1 lr_policy: "fixed" max_iter: 1 display: 0 '
                     'test_iter: 1 test_iter: 1 test_interval: 1 snapshot_after_train: false '
                     'test_state { stage: "test-on-test" } test_state { stage: "test-on-train" }',
                     V1_NET_WITH_STAGES)
    s = solvers.get_solver(p)
    assert [rec.layer.type for rec in s.net.records] == ["DummyData", "InnerProduct",
                                                        "EuclideanLoss"]
    assert [n.output_names for n in s.test_nets] == [["loss"], ["loss", "on_train"]]
    s.solve()
    assert "Test net output #1: on_train = " in logs.getvalue()
