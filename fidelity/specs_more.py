"""Random single-layer nets, neuron, loss, shape and recurrent families (as specs_vision.py)."""
import numpy as np

from .specs_vision import class_axis
from .writer import BIAS_FILLER, filler, labels, layer, randn


def _neuron(typ, pname, params, pos=False, scale=1.0, backward=True):
    def g(rng):
        shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
        x = scale * randn(rng, *shape)
        if pos:
            x = np.abs(x) + 0.1
        pp = ""
        ps = params(rng)
        if ps:
            pp = "%s { %s }" % (pname, ps)
        inplace = rng.rand() < 0.3
        if inplace:
            # in place on a Split-free input is not allowed for inputs: copy through Power
            lt = layer("c", "Power", ["x"], ["y"]) + layer("l", typ, ["y"], ["y"], pp)
        else:
            lt = layer("l", typ, ["x"], ["y"], pp)
        return dict(layers=lt, inputs={"x": x}, backward=backward)
    return g


g_relu = _neuron("ReLU", "relu_param", lambda r: "negative_slope: %.2f" % r.uniform(-1, 1)
                 if r.rand() < 0.5 else "")
g_elu = _neuron("ELU", "elu_param", lambda r: "alpha: %.2f" % r.uniform(0, 2) if r.rand() < 0.6
                else "")
g_power = _neuron("Power", "power_param", lambda r: "power: %s scale: %.2f shift: %.2f" % (
    [0, 1, 2, 3, 0.5, -1, 1.5][r.randint(7)], r.uniform(-2, 2), r.uniform(-1, 1)), pos=True)
g_threshold = _neuron("Threshold", "threshold_param",
                      lambda r: "threshold: %.2f" % r.uniform(-1, 1) if r.rand() < 0.7 else "",
                      backward=False)
g_exp = _neuron("Exp", "exp_param", lambda r: "base: %s scale: %.2f shift: %.2f" % (
    ["-1", "2", "0.5", "10"][r.randint(4)], r.uniform(-1, 1), r.uniform(-1, 1)))
g_log = _neuron("Log", "log_param", lambda r: "base: %s scale: %.2f shift: %.2f" % (
    ["-1", "2", "0.5", "10"][r.randint(4)], r.uniform(0.2, 1), r.uniform(0.1, 1)), pos=True)
g_clip = _neuron("Clip", "clip_param", lambda r: "min: %.2f max: %.2f" % (
    r.uniform(-1, 0), r.uniform(0, 1)))
g_swish = _neuron("Swish", "swish_param", lambda r: "beta: %.2f" % r.uniform(-2, 3)
                  if r.rand() < 0.7 else "")
g_bnll = _neuron("BNLL", "", lambda r: "", scale=5)
g_absval = _neuron("AbsVal", "", lambda r: "")
g_tanh = _neuron("TanH", "", lambda r: "", scale=2)
g_sigmoid = _neuron("Sigmoid", "", lambda r: "", scale=3)
_dropout_train = _neuron("Dropout", "dropout_param",
                         lambda r: "dropout_ratio: %.2f" % r.uniform(0, 0.9))


def g_dropout(rng):
    d = _dropout_train(rng)
    d["phase"] = "TEST"
    return d


def g_prelu(rng):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(2, 5))]
    p = []
    if rng.rand() < 0.4:
        p.append("channel_shared: true")
    p.append('filler { type: "uniform" min: -1 max: 1 }')
    return dict(layers=layer("l", "PReLU", ["x"], ["y"], "prelu_param { %s }" % " ".join(p)),
                inputs={"x": randn(rng, *shape)})


def g_sigmoidce(rng):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    p = []
    lab = (rng.rand(*shape) < 0.5).astype(np.float32)
    if rng.rand() < 0.4:
        p.append("ignore_label: -1")
        lab[rng.rand(*shape) < 0.3] = -1
    if rng.rand() < 0.5:
        p.append("normalization: %s" % ["FULL", "VALID", "BATCH_SIZE", "NONE"][rng.randint(4)])
    pp = "loss_param { %s }" % " ".join(p) if p else ""
    return dict(layers=layer("l", "SigmoidCrossEntropyLoss", ["x", "lab"], ["loss"], pp),
                inputs={"x": 3 * randn(rng, *shape), "lab": lab})


def g_hinge(rng):
    n, k = rng.randint(1, 5), rng.randint(1, 6)
    extra = [rng.randint(1, 3) for _ in range(rng.randint(0, 3))]
    p = "hinge_loss_param { norm: %s }" % ["L1", "L2"][rng.randint(2)]
    return dict(layers=layer("l", "HingeLoss", ["x", "lab"], ["loss"], p),
                inputs={"x": randn(rng, n, k, *extra),
                        "lab": rng.randint(0, k * int(np.prod(extra)), size=(n,)).astype(
                            np.float32)})


def g_euclidean(rng):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    return dict(layers=layer("l", "EuclideanLoss", ["a", "b"], ["loss"]),
                inputs={"a": randn(rng, *shape), "b": randn(rng, *shape)})


def g_contrastive(rng):
    n, d = rng.randint(1, 5), rng.randint(1, 5)
    p = ["margin: %.2f" % rng.uniform(0.1, 3)]
    if rng.rand() < 0.5:
        p.append("legacy_version: true")
    return dict(layers=layer("l", "ContrastiveLoss", ["a", "b", "y"], ["loss"],
                             "contrastive_loss_param { %s }" % " ".join(p)),
                inputs={"a": randn(rng, n, d, 1, 1), "b": randn(rng, n, d, 1, 1),
                        "y": (rng.rand(n, 1, 1, 1) < 0.5).astype(np.float32)})


def g_multinomial(rng):
    n, k = rng.randint(1, 5), rng.randint(1, 6)
    p = rng.rand(n, k).astype(np.float32)
    p[rng.rand(n, k) < 0.1] = 0
    p /= p.sum(1, keepdims=True) + 1e-3
    return dict(layers=layer("l", "MultinomialLogisticLoss", ["p", "lab"], ["loss"]),
                inputs={"p": p.reshape(n, k, 1, 1),
                        "lab": rng.randint(0, k, size=(n, 1, 1, 1)).astype(np.float32)})


def g_infogain(rng):
    shape, axis, k, lshape = class_axis(rng, 3)
    H = rng.rand(k, k).astype(np.float32)
    p = ["axis: %d" % axis] if axis != 1 else []
    lp = []
    ign = None
    if rng.rand() < 0.3:
        ign = int(rng.randint(0, k))
        lp.append("ignore_label: %d" % ign)
    if rng.rand() < 0.4:
        lp.append("normalization: %s" % ["FULL", "VALID", "BATCH_SIZE", "NONE"][rng.randint(4)])
    pp = ""
    if p:
        pp += "infogain_loss_param { %s } " % " ".join(p)
    if lp:
        pp += "loss_param { %s }" % " ".join(lp)
    tops = ["loss"] + (["prob"] if rng.rand() < 0.3 else [])
    extra = "loss_weight: 1 loss_weight: 0" if len(tops) == 2 else ""
    return dict(layers=layer("l", "InfogainLoss", ["x", "lab", "H"], tops, pp, extra),
                inputs={"x": randn(rng, *shape), "lab": labels(rng, lshape, k, ign),
                        "H": H.reshape(1, 1, k, k)}, force_backward=False)


def g_flatten(rng):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    nax = len(shape)
    a = rng.randint(-nax, nax)
    b = rng.randint(-nax, nax)
    if (a % nax) > (b % nax):
        a, b = b, a
    return dict(layers=layer("l", "Flatten", ["x"], ["y"],
                             "flatten_param { axis: %d end_axis: %d }" % (a, b)),
                inputs={"x": randn(rng, *shape)})


def g_reshape(rng):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    nax = len(shape)
    axis = rng.randint(0, nax + 1)
    num = rng.randint(-1, nax - axis + 1)
    end = nax if num == -1 else axis + num
    sub = shape[axis:end]
    cnt = int(np.prod(sub)) if sub else 1
    dims = []
    # factor cnt into up to 3 dims, with 0 copies and one -1
    rem = cnt
    i = 0
    while rem > 1 and len(dims) < 3:
        f = [d for d in range(1, rem + 1) if rem % d == 0]
        d = f[rng.randint(len(f))]
        dims.append(d)
        rem //= d
        i += 1
    if rem > 1:
        dims.append(rem)
    if dims and rng.rand() < 0.5:
        dims[rng.randint(len(dims))] = -1
    if rng.rand() < 0.3:
        dims.append(1)
    sh = " ".join("dim: %d" % d for d in dims)
    p = "reshape_param { shape { %s } axis: %d num_axes: %d }" % (sh, axis, num)
    return dict(layers=layer("l", "Reshape", ["x"], ["y"], p), inputs={"x": randn(rng, *shape)})


def g_rnn(rng, typ="RNN"):
    t, n, d = rng.randint(1, 5), rng.randint(1, 4), rng.randint(1, 4)
    p = ["num_output: %d" % rng.randint(1, 5), filler(rng), BIAS_FILLER]
    if rng.rand() < 0.3:
        p.append("expose_hidden: true")
    bots = ["x", "cont"]
    cont = (rng.rand(t, n) < 0.7).astype(np.float32)
    cont[0] = 0 if rng.rand() < 0.5 else cont[0]
    ins = {"x": randn(rng, t, n, d), "cont": cont}
    if rng.rand() < 0.3:
        bots.append("xs")
        ins["xs"] = randn(rng, n, rng.randint(1, 4))
    tops = ["y"]
    lt = layer("l", typ, bots, tops, "recurrent_param { %s }" % " ".join(p))
    if "expose_hidden" in lt:
        no = int(p[0].split()[1])
        nstate = 1 if typ == "RNN" else 2
        hs = ["h0"] if typ == "RNN" else ["h0", "c0"]
        for h in hs:
            ins[h] = randn(rng, 1, n, no)
        lt = layer("l", typ, bots + hs, tops + ["hT"] + (["cT"] if nstate == 2 else []),
                   "recurrent_param { %s }" % " ".join(p))
    return dict(layers=lt, inputs=ins, force_backward=rng.rand() < 0.5)


def g_lstm(rng):
    return g_rnn(rng, "LSTM")


def g_lstmunit(rng):
    n, d = rng.randint(1, 4), rng.randint(1, 4)
    return dict(layers=layer("l", "LSTMUnit", ["c", "x", "cont"], ["c1", "h1"]),
                inputs={"c": randn(rng, 1, n, d), "x": randn(rng, 1, n, 4 * d),
                        "cont": (rng.rand(1, n) < 0.6).astype(np.float32)})


def g_filter(rng):
    n = rng.randint(1, 6)
    shape = [n] + [rng.randint(1, 3) for _ in range(rng.randint(0, 3))]
    sel = (rng.rand(n) < 0.6).astype(np.float32)
    if not sel.any():
        sel[rng.randint(n)] = 1
    k = rng.randint(1, 3)
    bots = ["x%d" % i for i in range(k)]
    ins = {b: randn(rng, *([n] + shape[1:])) for b in bots}
    ins["sel"] = sel.reshape(n, 1) if rng.rand() < 0.5 else sel
    return dict(layers=layer("l", "Filter", bots + ["sel"], ["y%d" % i for i in range(k)]),
                inputs=ins, force_backward=False)


def g_batchreindex(rng):
    n = rng.randint(1, 5)
    shape = [n] + [rng.randint(1, 3) for _ in range(rng.randint(0, 3))]
    m = rng.randint(1, 6)
    return dict(layers=layer("l", "BatchReindex", ["x", "idx"], ["y"]),
                inputs={"x": randn(rng, *shape),
                        "idx": rng.randint(0, n, size=m).astype(np.float32)},
                force_backward=False)


def g_combo(rng):
    """A small chain: conv -> relu(in place) -> pool -> ip -> softmaxloss, with a split."""
    c = rng.randint(1, 4)
    x = randn(rng, 2, c, 7, 7)
    lt = layer("conv", "Convolution", ["x"], ["c1"],
               "convolution_param { num_output: 3 kernel_size: 3 %s %s }"
               % (filler(rng), BIAS_FILLER))
    lt += layer("relu", "ReLU", ["c1"], ["c1"])
    lt += layer("pool", "Pooling", ["c1"], ["p1"], "pooling_param { pool: MAX kernel_size: 2 "
                "stride: 2 }")
    lt += layer("ip", "InnerProduct", ["p1"], ["s"], "inner_product_param { num_output: 4 %s %s }"
                % (filler(rng), BIAS_FILLER))
    lt += layer("loss", "SoftmaxWithLoss", ["s", "lab"], ["loss"])
    lt += layer("acc", "Accuracy", ["s", "lab"], ["acc"], extra='include { phase: TEST }')
    lt += layer("e", "EuclideanLoss", ["s", "s2"], ["l2"], extra="loss_weight: 0.5")
    return dict(layers=lt, inputs={"x": x, "lab": rng.randint(0, 4, (2,)).astype(np.float32),
                                   "s2": randn(rng, 2, 4)})


def g_parameter(rng):
    """A Parameter blob (Caffe fills it with zeros; the case sets it) combined with the input,
    maybe consumed twice (a split) or by an in-place layer."""
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    op = ["PROD", "SUM", "MAX"][rng.randint(3)]
    lt = layer("p", "Parameter", [], ["w"], "parameter_param { shape { %s } }"
               % " ".join("dim: %d" % d for d in shape))
    lt += layer("l", "Eltwise", ["w", "x"], ["y"], "eltwise_param { operation: %s }" % op)
    if rng.rand() < 0.5:
        lt += layer("l2", "Eltwise", ["x", "w"], ["y2"], "eltwise_param { operation: SUM }")
    return dict(layers=lt, inputs={"x": randn(rng, *shape)},
                set_params={"p": [randn(rng, *shape)]})


FAMILIES = {name[2:]: fn for name, fn in dict(globals()).items()
            if name.startswith("g_") and fn.__module__ == __name__}
