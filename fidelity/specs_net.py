"""Random multi-layer nets: the net-level semantics single layers do not reach (automatic
splits, in-place chains, storage shared through Reshape/Flatten/Split and rewritten in place,
parameters shared by name or frozen, loss weights on any top, propagate_down, phases).

A net grows from its input x by operations drawn from OPS; each takes a blob already there and
adds layers (returning False when the blob does not suit it)."""
import numpy as np

from .writer import BIAS_FILLER, filler, layer, randn

FLAT = "reshape_param { shape { dim: 0 dim: -1 } }"


class NetBuilder:
    """The growing net: its text, each blob's shape, fresh names, shared parameter names."""

    def __init__(self, rng, phase):
        self.rng, self.phase = rng, phase
        c, h, w = rng.randint(1, 4), rng.randint(3, 7), rng.randint(3, 7)
        self.blobs = {"x": (2, c, h, w)}
        self.text, self.count, self.shared_ip = "", 0, {}

    def new(self, prefix):
        self.count += 1
        return "%s%d" % (prefix, self.count)

    def pick(self, cond=lambda shape: True):
        found = [b for b, s in self.blobs.items() if cond(s)]
        return found[self.rng.randint(len(found))] if found else None

    def add(self, *args, **kw):
        self.text += layer(*args, **kw)

    def choice(self, options):
        return options[self.rng.randint(len(options))]

    def loss_weight(self):
        return "loss_weight: %.2f" % self.rng.uniform(0.2, 2) if self.rng.rand() < 0.15 else ""

    def param_specs(self, count):
        """Up to ``count`` param blocks: frozen (lr_mult 0) or lr 2 without decay."""
        out = []
        for _ in range(count):
            r = self.rng.rand()
            if r >= 0.3:
                break
            out.append("param { lr_mult: 0 }" if r < 0.15 else
                       "param { lr_mult: 2 decay_mult: 0 }")
        return " ".join(out)


# ---- operations: (net, blob, its shape, in place?) -> False when the blob does not suit ----
def op_conv(net, b, s, inplace):
    if len(s) != 4:
        return False
    k, o, top = net.choice([1, 3]), net.rng.randint(1, 4), net.new("conv")
    net.add(net.new("L"), "Convolution", [b], [top],
            "convolution_param { num_output: %d kernel_size: %d pad: %d %s %s }"
            % (o, k, k // 2, filler(net.rng), BIAS_FILLER),
            net.param_specs(2) + " " + net.loss_weight())
    net.blobs[top] = (s[0], o, s[2], s[3])


def op_deconv(net, b, s, inplace):
    if len(s) != 4:
        return False
    o, top = net.rng.randint(1, 3), net.new("dc")
    net.add(net.new("L"), "Deconvolution", [b], [top],
            "convolution_param { num_output: %d kernel_size: 2 stride: 1 %s }"
            % (o, filler(net.rng)), net.param_specs(2))
    net.blobs[top] = (s[0], o, s[2] + 1, s[3] + 1)


def op_pool(net, b, s, inplace):
    if len(s) != 4 or s[2] < 2 or s[3] < 2:
        return False
    top = net.new("pool")
    net.add(net.new("L"), "Pooling", [b], [top], "pooling_param { pool: %s kernel_size: 2 "
            "stride: 2 }" % net.choice(["MAX", "AVE"]), net.loss_weight())
    net.blobs[top] = (s[0], s[1], -(-(s[2] - 2) // 2) + 1, -(-(s[3] - 2) // 2) + 1)


def op_batchnorm(net, b, s, inplace):
    """BatchNorm and Scale, in place or not (TRAIN: the statistics of this batch)."""
    if len(s) != 4 or net.phase != "TRAIN":
        return False
    top = b if inplace else net.new("bn")
    net.add(net.new("L"), "BatchNorm", [b], [top])
    net.add(net.new("L"), "Scale", [top], [top], "scale_param { bias_term: true }")
    net.blobs[top] = s


def op_inner_product(net, b, s, inplace):
    """An inner product, sharing its parameters by name with an earlier one of the same input
    size, or naming its own, or frozen."""
    din, top = int(np.prod(s[1:])), net.new("ip")
    if din in net.shared_ip and net.rng.rand() < 0.6:
        pname, o = net.shared_ip[din]
        spec = 'param { name: "%s_w" } param { name: "%s_b" }' % (pname, pname)
    else:
        o, pname = net.rng.randint(1, 5), net.new("sh")
        net.shared_ip[din] = (pname, o)
        spec = 'param { name: "%s_w" } param { name: "%s_b" }' % (pname, pname) \
            if net.rng.rand() < 0.5 else net.param_specs(2)
    net.add(net.new("L"), "InnerProduct", [b], [top], "inner_product_param { num_output: %d "
            "%s %s }" % (o, filler(net.rng), BIAS_FILLER), spec + " " + net.loss_weight())
    net.blobs[top] = (s[0], o)


def op_neuron(net, b, s, inplace):
    typ = net.choice(["ReLU", "Sigmoid", "TanH", "ELU", "AbsVal", "Power"])
    inplace = inplace and typ != "AbsVal"
    top = b if inplace else net.new("n")
    net.add(net.new("L"), typ, [b], [top], "", "" if inplace else net.loss_weight())
    net.blobs[top] = s


def op_concat(net, b, s, inplace):
    """On channels with another blob of the same spatial shape (maybe itself), or of one."""
    if len(s) != 4 or net.rng.rand() < 0.3:
        top = net.new("c1")
        net.add(net.new("L"), "Concat", [b], [top])
        net.blobs[top] = s
        return
    b2 = net.pick(lambda t: len(t) == 4 and t[2:] == s[2:])
    top = net.new("cat")
    net.add(net.new("L"), "Concat", [b, b2], [top])
    net.blobs[top] = (s[0], s[1] + net.blobs[b2][1], s[2], s[3])


def op_dropout_or_prelu(net, b, s, inplace):
    """Dropout (TEST only: TRAIN masks come from Caffe's generator) or PReLU."""
    if net.phase == "TEST":
        top = b if inplace else net.new("d")
        net.add(net.new("L"), "Dropout", [b], [top])
    else:
        top = net.new("pr")
        net.add(net.new("L"), "PReLU", [b], [top], "", net.param_specs(1))
    net.blobs[top] = s


def op_eltwise(net, b, s, inplace):
    b2, top = net.pick(lambda t: t == s), net.new("el")
    pd = ""
    if net.rng.rand() < 0.2:
        pd = "propagate_down: %s propagate_down: %s" % (net.choice(["true", "false"]),
                                                         net.choice(["true", "false"]))
    net.add(net.new("L"), "Eltwise", [b, b2], [top], "eltwise_param { operation: %s }"
            % net.choice(["SUM", "PROD", "MAX"]), pd)
    net.blobs[top] = s


def op_split(net, b, s, inplace):
    t1, t2 = net.new("sp"), net.new("sp")
    net.add(net.new("L"), "Split", [b], [t1, t2])
    net.blobs[t1] = net.blobs[t2] = s


def op_flatten(net, b, s, inplace):
    if len(s) < 2:
        return False
    top = net.new("fl")
    if net.rng.rand() < 0.5:
        net.add(net.new("L"), "Flatten", [b], [top])
    else:
        net.add(net.new("L"), "Reshape", [b], [top], FLAT)
    net.blobs[top] = (s[0], int(np.prod(s[1:])))


def op_slice(net, b, s, inplace):
    """On axis 1 into two, or a Slice of one top (which shares the bottom)."""
    if len(s) < 2:
        return False
    if s[1] >= 2 and net.rng.rand() < 0.7:
        t1, t2 = net.new("sl"), net.new("sl")
        net.add(net.new("L"), "Slice", [b], [t1, t2], "slice_param { axis: 1 slice_point: 1 }")
        net.blobs[t1] = (s[0], 1) + tuple(s[2:])
        net.blobs[t2] = (s[0], s[1] - 1) + tuple(s[2:])
    else:
        t1 = net.new("sl")
        net.add(net.new("L"), "Slice", [b], [t1], "slice_param { axis: 1 }")
        net.blobs[t1] = s


def op_scale_or_bias(net, b, s, inplace):
    if len(s) < 2:
        return False
    typ = net.choice(["Scale", "Bias"])
    top = b if inplace else net.new("sc")
    net.add(net.new("L"), typ, [b], [top], '%s_param { axis: 1 num_axes: 1 filler { type: '
            '"uniform" min: -1 max: 1 } }' % typ.lower(),
            net.param_specs(1) + " " + net.loss_weight())
    net.blobs[top] = s


def op_normalize(net, b, s, inplace):
    if len(s) < 2:
        return False
    typ = net.choice(["Softmax", "MVN", "LRN"]) if len(s) == 4 else "Softmax"
    top = net.new("nm")
    net.add(net.new("L"), typ, [b], [top], "", net.loss_weight())
    net.blobs[top] = s


def op_reduction(net, b, s, inplace):
    if len(s) < 2:
        return False
    top = net.new("red")
    net.add(net.new("L"), "Reduction", [b], [top], "reduction_param { operation: %s axis: 1 }"
            % net.choice(["SUM", "ASUM", "SUMSQ", "MEAN"]), net.loss_weight())
    net.blobs[top] = (s[0],)


def op_silence(net, b, s, inplace):
    net.add(net.new("L"), "Silence", [b], [])


def op_tile(net, b, s, inplace):
    if len(s) < 2:
        return False
    top = net.new("ti")
    net.add(net.new("L"), "Tile", [b], [top], "tile_param { axis: 1 tiles: 2 }")
    net.blobs[top] = (s[0], 2 * s[1]) + tuple(s[2:])


def op_alias_rewrite(net, b, s, inplace):
    """An alias of the blob (Reshape, Flatten or a Split top) rewritten by an in-place layer:
    the layers that read the blob before see it change under them, as in Caffe."""
    if len(s) < 2:
        return False
    kind, al = net.choice(["Reshape", "Flatten", "Split"]), net.new("al")
    if kind == "Split":
        al2 = net.new("al")
        net.add(net.new("L"), "Split", [b], [al, al2])
        net.blobs[al] = net.blobs[al2] = s
    else:
        net.add(net.new("L"), kind, [b], [al], FLAT if kind == "Reshape" else "")
        net.blobs[al] = (s[0], int(np.prod(s[1:])))
    typ = net.choice(["ReLU", "Sigmoid", "TanH", "Power", "Scale", "Dropout"])
    if typ == "Dropout" and net.phase == "TRAIN":
        typ = "ELU"
    net.add(net.new("L"), typ, [al], [al], 'scale_param { axis: 1 num_axes: 0 filler { type: '
            '"constant" value: 0.5 } }' if typ == "Scale" else "")


# weights: how often each operation is drawn
OPS = [op_conv, op_pool, op_batchnorm, op_inner_product, op_neuron, op_neuron, op_concat,
       op_dropout_or_prelu, op_eltwise, op_split, op_flatten, op_slice, op_scale_or_bias,
       op_normalize, op_reduction, op_silence, op_tile, op_deconv, op_alias_rewrite,
       op_alias_rewrite, op_alias_rewrite]


def g_net(rng):
    """3-8 random operations over x, then a softmax loss on an inner product (maybe weighted),
    maybe a weighted Euclidean loss on another blob and an accuracy."""
    phase = "TRAIN" if rng.rand() < 0.7 else "TEST"
    net = NetBuilder(rng, phase)
    for _ in range(rng.randint(3, 9)):
        b = net.pick()
        OPS[rng.randint(len(OPS))](net, b, net.blobs[b], rng.rand() < 0.4 and b != "x")
    classes = rng.randint(2, 5)
    net.add("cls", "InnerProduct", [net.pick()], ["score"], "inner_product_param { "
            "num_output: %d %s %s }" % (classes, filler(rng), BIAS_FILLER))
    net.add("loss", "SoftmaxWithLoss", ["score", "label"], ["loss"], "",
            "loss_weight: %.2f" % rng.uniform(0.5, 2) if rng.rand() < 0.3 else "")
    inputs = {"x": randn(rng, *net.blobs["x"]),
              "label": rng.randint(0, classes, (2,)).astype(np.float32)}
    if rng.rand() < 0.5:
        net.add("aux", "InnerProduct", [net.pick()], ["aux"], "inner_product_param { "
                "num_output: 3 %s %s }" % (filler(rng), BIAS_FILLER))
        net.add("l2", "EuclideanLoss", ["aux", "target"], ["l2"], "",
                "loss_weight: %.2f" % rng.uniform(0, 1))
        inputs["target"] = randn(rng, 2, 3)
    force_backward = rng.rand() < 0.5
    if not force_backward and (phase == "TEST" or rng.rand() < 0.3):
        net.add("acc", "Accuracy", ["score", "label"], ["acc"])   # no backward in Caffe
    return dict(layers=net.text, inputs=inputs, phase=phase, force_backward=force_backward)
