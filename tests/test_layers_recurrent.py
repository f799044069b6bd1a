"""RNN, LSTM and LSTMUnit: gradients, parameter layout, hidden-state handling, golden cases."""
import numpy
import pytest

from caffecli.blob import Blob
from caffecli.errors import CaffeError
from gradcheck import blobs_from, check_gradient, make_layer
from golden import case_names, run_layer_case

pytestmark = pytest.mark.devices  # each test runs in CPU and in GPU mode

FILLERS = ('weight_filler { type: "uniform" min: -0.5 max: 0.5 } '
           'bias_filler { type: "uniform" min: -0.5 max: 0.5 }')


def rec(kind, H=3, extra=""):
    return 'type: "%s" recurrent_param { num_output: %d %s %s }' % (kind, H, FILLERS, extra)


def inputs(T=3, N=2, D=4, seed=0):
    r = numpy.random.RandomState(seed)
    x = r.uniform(-1, 1, (T, N, D))
    cont = numpy.ones((T, N))
    cont[0] = 0           # a fresh sequence in every stream: forward passes stay independent
    cont[T // 2 + 1:, 0] = 0 if T > 2 else 1
    return x, cont


def setup(text, arrays, n_tops=1, dtype=numpy.float64):
    layer = make_layer(text)
    bottom = blobs_from(arrays, dtype)
    top = [Blob(dtype=dtype) for _ in range(n_tops)]
    layer.SetUp(bottom, top)
    return layer, bottom, top


# ---- golden -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", case_names({"lstm", "rnn", "lstmunit"}) or ["<none>"])
def test_golden(name):
    if name == "<none>":
        pytest.skip("no golden corpus")
    run_layer_case(name)


# ---- parameter layout ---------------------------------------------------------------------
def test_lstm_param_shapes_match_unrolled_net():
    x, cont = inputs(D=4)
    layer, _, top = setup(rec("LSTM", 5), [x, cont])
    assert [b.shape for b in layer.blobs] == [(20, 4), (20,), (20, 5)]
    assert top[0].shape == (3, 2, 5)
    xs = numpy.zeros((2, 3, 2))
    layer, _, _ = setup(rec("LSTM", 5), [x, cont, xs])
    assert [b.shape for b in layer.blobs] == [(20, 4), (20,), (20, 6), (20, 5)]


def test_rnn_param_shapes_match_unrolled_net():
    x, cont = inputs(D=4)
    layer, _, top = setup(rec("RNN", 5), [x, cont])
    assert [b.shape for b in layer.blobs] == [(5, 4), (5,), (5, 5), (5, 5), (5,)]
    layer, _, _ = setup(rec("RNN", 5), [x, cont, numpy.zeros((2, 7))])
    assert [b.shape for b in layer.blobs] == [(5, 4), (5,), (5, 7), (5, 5), (5, 5), (5,)]


def test_input_with_more_axes_is_flattened():
    x = numpy.random.RandomState(1).uniform(-1, 1, (2, 3, 2, 2))
    layer, _, top = setup(rec("LSTM", 2), [x, numpy.ones((2, 3))])
    assert layer.blobs[0].shape == (8, 4) and top[0].shape == (2, 3, 2)


# ---- gradients ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["LSTM", "RNN"])
def test_gradient(kind):
    x, cont = inputs(T=3, N=2, D=3)
    assert check_gradient(rec(kind, 3), [x, cont], check_bottoms=[0]) > 0


@pytest.mark.parametrize("kind", ["LSTM", "RNN"])
def test_gradient_static_input(kind):
    x, cont = inputs(T=3, N=2, D=2)
    xs = numpy.random.RandomState(3).uniform(-1, 1, (2, 3))
    assert check_gradient(rec(kind, 2), [x, cont, xs], check_bottoms=[0, 2]) > 0


@pytest.mark.parametrize("kind", ["LSTM", "RNN"])
def test_gradient_float32(kind):
    x, cont = inputs(T=2, N=2, D=2)
    assert check_gradient(rec(kind, 2), [x, cont], check_bottoms=[0], dtype=numpy.float32,
                          stepsize=1e-2, threshold=1e-2) > 0


def test_gradient_nonbinary_cont():
    x, cont = inputs(T=3, N=2, D=2)
    cont[1:] = 0.5
    assert check_gradient(rec("RNN", 2), [x, cont], check_bottoms=[0]) > 0


def test_lstm_unit_gradient():
    r = numpy.random.RandomState(4)
    c_prev = r.uniform(-1, 1, (1, 3, 4))
    gates = r.uniform(-2, 2, (1, 3, 16))
    cont = numpy.array([[1.0, 0.0, 1.0]])
    assert check_gradient('type: "LSTMUnit"', [c_prev, gates, cont], n_tops=2,
                          check_bottoms=[0, 1]) > 0


def test_lstm_unit_forward_formula():
    r = numpy.random.RandomState(5)
    c_prev = r.uniform(-1, 1, (1, 2, 3))
    X = r.uniform(-2, 2, (1, 2, 12))
    cont = numpy.array([[1.0, 0.0]])
    layer, bottom, top = setup('type: "LSTMUnit"', [c_prev, X, cont], n_tops=2)
    layer.Forward(bottom, top)
    sig = lambda v: 1 / (1 + numpy.exp(-v))
    i, f, o, g = sig(X[..., :3]), sig(X[..., 3:6]), sig(X[..., 6:9]), numpy.tanh(X[..., 9:])
    f = f * cont[..., None]
    c = f * c_prev + i * g
    numpy.testing.assert_allclose(top[0].data, c, rtol=1e-12)
    numpy.testing.assert_allclose(top[1].data, o * numpy.tanh(c), rtol=1e-12)


def test_lstm_unit_refuses_cont_gradient_and_bad_shapes():
    layer, bottom, top = setup('type: "LSTMUnit"', [numpy.zeros((1, 2, 3)),
                                                    numpy.zeros((1, 2, 12)),
                                                    numpy.ones((1, 2))], n_tops=2)
    layer.Forward(bottom, top)
    with pytest.raises(CaffeError, match="sequence indicators"):
        layer.Backward(top, [True, True, True], bottom)
    with pytest.raises(CaffeError, match="LSTMUnit"):
        setup('type: "LSTMUnit"', [numpy.zeros((1, 2, 3)), numpy.zeros((1, 2, 10)),
                                   numpy.ones((1, 2))], n_tops=2)


# ---- hidden state -------------------------------------------------------------------------
def _forward(layer, arrays):
    bottom = blobs_from(arrays, numpy.float64)
    top = [Blob(dtype=numpy.float64) for _ in range(layer.exact_num_top_blobs)]
    layer.SetUp(bottom, top) if not hasattr(layer, "T") else layer.Reshape(bottom, top)
    layer.Forward(bottom, top)
    return [t.data.copy() for t in top]


@pytest.mark.parametrize("kind,states", [("LSTM", 2), ("RNN", 1)])
def test_state_carries_between_forward_passes(kind, states):
    r = numpy.random.RandomState(6)
    x = r.uniform(-1, 1, (4, 2, 3))
    cont = numpy.ones((4, 2))
    whole = make_layer(rec(kind, 3))
    full = _forward(whole, [x, cont])[0]
    half = make_layer(rec(kind, 3))
    half.blobs = whole.blobs  # same weights
    # Preloaded blobs: setup keeps them.
    first = _forward(half, [x[:2], cont[:2]])[0]
    second = _forward(half, [x[2:], cont[2:]])[0]
    numpy.testing.assert_allclose(numpy.concatenate([first, second]), full, rtol=1e-12)


@pytest.mark.parametrize("kind,states", [("LSTM", 2), ("RNN", 1)])
def test_expose_hidden_matches_chained_passes(kind, states):
    r = numpy.random.RandomState(7)
    x = r.uniform(-1, 1, (4, 2, 3))
    cont = numpy.ones((4, 2))
    cont[0, 1] = 0
    whole = make_layer(rec(kind, 3))
    full = _forward(whole, [x, cont])[0]
    exposed = make_layer(rec(kind, 3, "expose_hidden: true"))
    exposed.blobs = whole.blobs
    zeros = [numpy.zeros((1, 2, 3))] * states
    out1 = _forward(exposed, [x[:2], cont[:2]] + zeros)
    assert len(out1) == 1 + states and out1[1].shape == (1, 2, 3)
    if kind == "LSTM":
        numpy.testing.assert_allclose(out1[1][0], out1[0][-1])  # h_T is the last output
    out2 = _forward(exposed, [x[2:], cont[2:]] + out1[1:])
    numpy.testing.assert_allclose(numpy.concatenate([out1[0], out2[0]]), full, rtol=1e-12)


@pytest.mark.parametrize("kind,states", [("LSTM", 2), ("RNN", 1)])
def test_carried_state_follows_blob_capacity_when_the_batch_changes(kind, states):
    """Caffe keeps h_T/c_T in blobs: a smaller batch carries on the first streams' states
    (a reshape within capacity keeps the values), back up to the largest batch seen the
    others come back as they were, and a batch beyond it starts from zeros."""
    r = numpy.random.RandomState(8)
    carried = make_layer(rec(kind, 3))
    exposed = make_layer(rec(kind, 3, "expose_hidden: true"))
    state = [numpy.zeros((1, 2, 3))] * states   # the reference's flat h_T/c_T memory, N = 2
    for n in (2, 1, 2, 3):
        x, cont = r.uniform(-1, 1, (2, n, 4)), numpy.ones((2, n))
        if n > state[0].shape[1]:
            state = [numpy.zeros((1, n, 3))] * states
        got = _forward(carried, [x, cont])[0]
        exposed.blobs = carried.blobs   # same weights
        want = _forward(exposed, [x, cont] + [s[:, :n] for s in state])
        numpy.testing.assert_allclose(got, want[0], rtol=1e-12)
        state = [numpy.concatenate([w, s[:, n:]], axis=1) for w, s in zip(want[1:], state)]


def test_expose_hidden_gradient_wrt_x_ignores_state_tops():
    """As in Caffe, the h_T/c_T tops carry no gradient and h_0/c_0 bottoms receive none."""
    r = numpy.random.RandomState(8)
    x, cont = inputs(T=3, N=2, D=2)
    h0, c0 = r.uniform(-1, 1, (1, 2, 2)), r.uniform(-1, 1, (1, 2, 2))
    layer, bottom, top = setup(rec("LSTM", 2, "expose_hidden: true"), [x, cont, h0, c0], 3)
    w = r.uniform(-1, 1, top[0].shape)

    def objective():
        layer.Forward(bottom, top)
        return float((top[0].data * w).sum())
    objective()
    top[0].diff[...] = w
    top[1].diff[...] = 5.0
    top[2].diff[...] = -3.0
    layer.Backward(top, [True, False, False, False], bottom)
    assert not bottom[2].diff.any() and not bottom[3].diff.any()
    analytic = bottom[0].diff.copy()
    for k in range(bottom[0].count()):
        x0 = float(bottom[0].data.reshape(-1)[k])
        bottom[0].data.reshape(-1)[k] = x0 + 1e-5   # through blob.data: the device sees it
        pos = objective()
        bottom[0].data.reshape(-1)[k] = x0 - 1e-5
        neg = objective()
        bottom[0].data.reshape(-1)[k] = x0
        assert abs((pos - neg) / 2e-5 - analytic.reshape(-1)[k]) < 1e-6


# ---- errors -------------------------------------------------------------------------------
def test_errors_name_the_layer():
    x, cont = inputs()
    with pytest.raises(CaffeError, match="cont"):
        setup(rec("LSTM"), [x, numpy.ones((3, 5))])
    with pytest.raises(CaffeError, match="num_output"):
        setup('type: "RNN" recurrent_param { }', [x, cont])
    with pytest.raises(CaffeError, match="RNN"):
        setup(rec("RNN"), [numpy.zeros(5), numpy.ones((5, 1))])
    with pytest.raises(CaffeError, match="static"):
        setup(rec("LSTM"), [x, cont, numpy.zeros((3, 2))])
    with pytest.raises(CaffeError, match="shape mismatch"):
        setup(rec("LSTM", 3, "expose_hidden: true"), [x, cont, numpy.zeros((1, 2, 3)),
                                                      numpy.zeros((1, 2, 4))], 3)
    with pytest.raises(CaffeError, match="blob"):
        setup(rec("LSTM", 3, "expose_hidden: true"), [x, cont], 3)
    layer, bottom, top = setup(rec("LSTM"), [x, cont])
    layer.Forward(bottom, top)
    with pytest.raises(CaffeError, match="sequence indicators"):
        layer.Backward(top, [True, True], bottom)
    with pytest.raises(CaffeError, match="timesteps changed"):
        layer.reshape(blobs_from([x[:2], cont[:2]], numpy.float64), top)


UNROLLED_NET = """name: "rec"
layer { name: "x" type: "Input" top: "x" top: "cont" top: "xs" input_param {
  shape { dim: 2 dim: 3 dim: 4 } shape { dim: 2 dim: 3 } shape { dim: 3 dim: 5 } } }
layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" bottom: "xs" top: "h"
  recurrent_param { num_output: 2 } }
layer { name: "rnn" type: "RNN" bottom: "x" bottom: "cont" top: "o"
  recurrent_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
"""

# What BVLC Caffe's `caffe time` logs for UNROLLED_NET, net.cpp:86 / recurrent_layer / sharing
# lines only: each recurrent layer builds its unrolled net, which logs as any net does.
CAFFE_UNROLLED_LOG = (
    "Creating Layer x|Creating Layer x_x_0_split|Creating Layer cont_x_1_split|"
    "Creating Layer lstm|Initializing recurrent layer: assuming input batch contains 2 "
    "timesteps of 3 independent streams.|Creating Layer lstm_|Creating Layer lstm_|"
    "Creating Layer lstm_cont_slice|Creating Layer cont_1_lstm_cont_slice_0_split|"
    "Creating Layer cont_2_lstm_cont_slice_1_split|Creating Layer lstm_x_transform|"
    "Creating Layer lstm_W_xc_x_static|Creating Layer lstm_W_xc_x_static_reshape|"
    "Creating Layer W_xc_x_static_lstm_W_xc_x_static_reshape_0_split|"
    "Creating Layer lstm_W_xc_x_slice|Creating Layer lstm_h_conted_0|"
    "Creating Layer lstm_transform_1|Creating Layer lstm_gate_input_1|"
    "Creating Layer lstm_unit_1|Creating Layer h_1_lstm_unit_1_1_split|"
    "Creating Layer lstm_h_conted_1|Creating Layer lstm_transform_2|"
    "Sharing parameters 'W_hc' owned by layer 'lstm_transform_1', param index 0|"
    "Creating Layer lstm_gate_input_2|Creating Layer lstm_unit_2|Creating Layer lstm_|"
    "Creating Layer lstm_h_concat|Creating Layer h_pseudoloss|Network initialization done.|"
    "Adding parameter 0: W_xc|Adding parameter 1: b_c|Adding parameter 2: W_xc_static|"
    "Adding parameter 3: W_hc|Creating Layer rnn|Initializing recurrent layer: assuming input "
    "batch contains 2 timesteps of 3 independent streams.|Creating Layer rnn_|"
    "Creating Layer rnn_|Creating Layer rnn_cont_slice|Creating Layer rnn_x_transform|"
    "Creating Layer rnn_W_xh_x_slice|Creating Layer rnn_h_conted_0|Creating Layer rnn_W_hh_h_0|"
    "Creating Layer rnn_h_input_sum_1|Creating Layer rnn_h_neuron_1|"
    "Creating Layer h_1_rnn_h_neuron_1_0_split|Creating Layer rnn_W_ho_h_1|"
    "Creating Layer rnn_o_neuron_1|Creating Layer rnn_h_conted_1|Creating Layer rnn_W_hh_h_1|"
    "Sharing parameters 'W_hh' owned by layer 'rnn_W_hh_h_0', param index 0|"
    "Creating Layer rnn_h_input_sum_2|Creating Layer rnn_h_neuron_2|Creating Layer rnn_W_ho_h_2|"
    "Sharing parameters 'W_ho' owned by layer 'rnn_W_ho_h_1', param index 0|"
    "Sharing parameters 'b_o' owned by layer 'rnn_W_ho_h_1', param index 1|"
    "Creating Layer rnn_o_neuron_2|Creating Layer rnn_o_concat|Creating Layer o_pseudoloss|"
    "Network initialization done.|Adding parameter 0: W_xh|Adding parameter 1: b_h|"
    "Adding parameter 2: W_hh|Adding parameter 3: W_ho|Adding parameter 4: b_o|"
    "Network initialization done.")


def _build_logged(tmp_path, log):
    import io
    import caffecli
    from caffecli import glog
    from caffecli.net import Net
    path = tmp_path / "rec.prototxt"
    path.write_text(UNROLLED_NET)
    buf = io.StringIO()
    glog.set_stream(buf)
    try:
        caffecli.set_random_seed(5)
        net = Net(str(path), caffecli.TRAIN, log=log)
    finally:
        glog.set_stream(None)
    return net, buf.getvalue()


def test_set_up_logs_the_unrolled_net_as_caffe(tmp_path):
    import re
    _, text = _build_logged(tmp_path, True)
    wanted = re.compile(r"(net\.cpp:(86|257)|recurrent_layer\.cpp:\d+)\] |Sharing parameters")
    got = "|".join(line.split("] ", 1)[1] for line in text.splitlines() if wanted.search(line))
    assert got == CAFFE_UNROLLED_LOG
    # the unrolled net's own dump: no state, pseudo-loss with loss weight 1
    assert "layer {\n  name: \"lstm_\"\n  type: \"Input\"\n  top: \"x\"" in text
    assert "name: \"o_pseudoloss\"\n  type: \"Reduction\"\n  bottom: \"o\"\n" in text


def test_logging_the_unrolled_net_draws_no_random_numbers(tmp_path):
    logged, _ = _build_logged(tmp_path, True)
    quiet, text = _build_logged(tmp_path, False)
    assert "Creating Layer lstm_" not in text
    for a, b in zip(logged.learnable_params, quiet.learnable_params):
        numpy.testing.assert_array_equal(a.data, b.data)
