"""Random single-layer nets, vision and structure families: each ``g_<family>(rng)`` returns a
spec for writer.write_layer_case (layers text, inputs, and what differs from the defaults)."""
import re

import numpy as np

from .writer import BIAS_FILLER, filler, labels, layer, randn


def g_conv(rng, deconv=False):
    nd = 3 if rng.rand() < 0.12 else 2
    n = rng.randint(1, 3)
    g = [1, 1, 2, 3][rng.randint(4)]
    c = g * rng.randint(1, 3)
    o = g * rng.randint(1, 3)
    p = ["num_output: %d" % o]
    if g > 1:
        p.append("group: %d" % g)
    per = rng.rand() < 0.3 and nd == 2
    ks, ss, ps, ds = [], [], [], []
    for a in range(nd):
        ks.append(rng.randint(1, 5))
        ss.append(rng.randint(1, 4))
        ps.append(rng.randint(0, 3))
        ds.append(rng.randint(1, 3) if rng.rand() < 0.3 else 1)
    if not per:
        ks = [ks[0]] * nd
        ss = [ss[0]] * nd
        ps = [ps[0]] * nd
        ds = [ds[0]] * nd
    if per:
        p += ["kernel_h: %d kernel_w: %d" % tuple(ks)]
        if ss != [1, 1]:
            p += ["stride_h: %d stride_w: %d" % tuple(ss)]
        if ps != [0, 0]:
            p += ["pad_h: %d pad_w: %d" % tuple(ps)]
        if ds != [1, 1]:
            p += ["dilation: %d dilation: %d" % tuple(ds)]
    else:
        p += ["kernel_size: %d" % ks[0]]
        if ss[0] != 1:
            p += ["stride: %d" % ss[0]]
        if ps[0]:
            p += ["pad: %d" % ps[0]]
        if ds[0] != 1:
            p += ["dilation: %d" % ds[0]]
    sp = []
    for a in range(nd):
        ext = ds[a] * (ks[a] - 1) + 1
        lo = 1 if deconv else max(1, ext - 2 * ps[a])
        sp.append(rng.randint(lo, lo + (4 if nd == 3 else 7)))
    if rng.rand() < 0.3:
        p.append("bias_term: false")
    else:
        p.append(BIAS_FILLER)
    p.append(filler(rng))
    typ = "Deconvolution" if deconv else "Convolution"
    lt = layer("l", typ, ["x"], ["y"], "convolution_param { %s }" % " ".join(p))
    return dict(layers=lt, inputs={"x": randn(rng, n, c, *sp)})


def g_deconv(rng):
    return g_conv(rng, deconv=True)


def g_pool(rng):
    n, c = rng.randint(1, 3), rng.randint(1, 4)
    h, w = rng.randint(1, 12), rng.randint(1, 12)
    method = ["MAX", "AVE"][rng.randint(2)]
    p = ["pool: %s" % method]
    if rng.rand() < 0.15:
        p.append("global_pooling: true")
    else:
        if rng.rand() < 0.3:
            kh, kw = rng.randint(1, 5), rng.randint(1, 5)
            p.append("kernel_h: %d kernel_w: %d" % (kh, kw))
        else:
            kh = kw = rng.randint(1, 5)
            p.append("kernel_size: %d" % kh)
        s = rng.randint(1, 4)
        if rng.rand() < 0.3:
            p.append("stride_h: %d stride_w: %d" % (s, rng.randint(1, 4)))
        elif s != 1:
            p.append("stride: %d" % s)
        pad = rng.randint(0, min(kh, kw))
        if pad:
            p.append("pad: %d" % pad)
        h = max(h, kh)
        w = max(w, kw)
    if rng.rand() < 0.3:
        p.append("round_mode: FLOOR")
    tops = ["y"]
    if method == "MAX" and rng.rand() < 0.3:
        tops.append("mask")
    lt = layer("l", "Pooling", ["x"], tops, "pooling_param { %s }" % " ".join(p))
    x = randn(rng, n, c, h, w)
    if rng.rand() < 0.2:
        x = np.round(x).astype(np.float32)  # ties
    return dict(layers=lt, inputs={"x": x})


def g_lrn(rng):
    n, c, h, w = rng.randint(1, 3), rng.randint(1, 8), rng.randint(1, 7), rng.randint(1, 7)
    region = ["ACROSS_CHANNELS", "WITHIN_CHANNEL"][rng.randint(2)]
    ls = [1, 3, 5, 7][rng.randint(4)]
    p = "lrn_param { local_size: %d alpha: %.3f beta: %.3f k: %.3f norm_region: %s }" % (
        ls, rng.uniform(0.0001, 2), rng.uniform(0.1, 1.5), rng.uniform(0.5, 3), region)
    return dict(layers=layer("l", "LRN", ["x"], ["y"], p), inputs={"x": randn(rng, n, c, h, w)})


def g_ip(rng):
    nax = rng.randint(2, 5)
    shape = [rng.randint(1, 5) for _ in range(nax)]
    axis = rng.randint(-nax, nax) if rng.rand() < 0.4 else 1
    if axis % nax == 0 and rng.rand() < 0.5:
        axis = 1
    p = ["num_output: %d" % rng.randint(1, 7), filler(rng)]
    if axis != 1:
        p.append("axis: %d" % axis)
    if rng.rand() < 0.3:
        p.append("bias_term: false")
    else:
        p.append(BIAS_FILLER)
    if rng.rand() < 0.4:
        p.append("transpose: true")
    return dict(layers=layer("l", "InnerProduct", ["x"], ["y"],
                             "inner_product_param { %s }" % " ".join(p)),
                inputs={"x": randn(rng, *shape)})


def g_eltwise(rng):
    k = rng.randint(2, 5)
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    op = ["PROD", "SUM", "MAX"][rng.randint(3)]
    p = ["operation: %s" % op]
    if op == "SUM" and rng.rand() < 0.6:
        p += ["coeff: %.2f" % rng.uniform(-2, 2) for _ in range(k)]
    if op == "PROD" and rng.rand() < 0.5:
        p.append("stable_prod_grad: false")
    bots = ["x%d" % i for i in range(k)]
    ins = {b: randn(rng, *shape) for b in bots}
    if op == "MAX" and rng.rand() < 0.3:
        for b in bots:
            ins[b] = np.round(ins[b])  # ties
    return dict(layers=layer("l", "Eltwise", bots, ["y"], "eltwise_param { %s }" % " ".join(p)),
                inputs=ins)


def _axes_param(rng, shape, two_bottom):
    nax = len(shape)
    axis = rng.randint(0, nax) if nax else 0
    if two_bottom:
        num = rng.randint(0, nax - axis + 1)
    else:
        num = rng.randint(-1, nax - axis + 1)
    end = nax if num == -1 else axis + num
    pshape = shape[axis:end]
    neg = rng.rand() < 0.3 and nax
    return (axis - nax if neg else axis), num, pshape


def g_scale(rng, typ="Scale"):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    two = rng.rand() < 0.4
    axis, num, pshape = _axes_param(rng, shape, two)
    key = "scale_param" if typ == "Scale" else "bias_param"
    p = ["axis: %d" % axis]
    ins = {"x": randn(rng, *shape)}
    bots = ["x"]
    if two:
        bots.append("s")
        ins["s"] = randn(rng, *pshape) if pshape else randn(rng, 1).reshape(())
        if not pshape:
            ins["s"] = np.array(rng.randn(), dtype=np.float32).reshape(())
    else:
        p.append("num_axes: %d" % num)
        p.append(filler(rng, "filler") if typ == "Bias" else
                 'filler { type: "uniform" min: -1 max: 1 }')
    if typ == "Scale" and rng.rand() < 0.5:
        p += ["bias_term: true", BIAS_FILLER]
    return dict(layers=layer("l", typ, bots, ["y"], "%s { %s }" % (key, " ".join(p))),
                inputs=ins)


def g_bias(rng):
    return g_scale(rng, "Bias")


def g_reduction(rng):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    nax = len(shape)
    op = ["SUM", "ASUM", "SUMSQ", "MEAN"][rng.randint(4)]
    axis = rng.randint(-nax, nax + 1) if nax else 0
    if axis == nax and rng.rand() < 0.5:
        axis = 0
    p = "reduction_param { operation: %s axis: %d coeff: %.2f }" % (op, axis, rng.uniform(-2, 2))
    return dict(layers=layer("l", "Reduction", ["x"], ["y"], p), inputs={"x": randn(rng, *shape)})


def g_batchnorm(rng):
    shape = [rng.randint(1, 4), rng.randint(1, 5)] + (
        [rng.randint(1, 4), rng.randint(1, 4)] if rng.rand() < 0.6 else [])
    phase = ["TRAIN", "TEST"][rng.randint(2)]
    p = []
    if rng.rand() < 0.4:
        p.append("use_global_stats: %s" % ["true", "false"][rng.randint(2)])
    if rng.rand() < 0.4:
        p.append("moving_average_fraction: %.3f" % rng.uniform(0.5, 1))
    if rng.rand() < 0.4:
        p.append("eps: %.4f" % rng.uniform(1e-5, 0.1))
    pp = "batch_norm_param { %s }" % " ".join(p) if p else ""
    c = shape[1]
    params = [rng.randn(c).astype(np.float32), rng.uniform(0.2, 2, c).astype(np.float32),
              np.array([rng.uniform(0.3, 2) if rng.rand() < 0.8 else 0], np.float32)]
    return dict(layers=layer("l", "BatchNorm", ["x"], ["y"], pp), inputs={"x": randn(rng, *shape)},
                phase=phase, set_params={"l": params})


def g_mvn(rng):
    shape = [rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 4), rng.randint(1, 5)]
    p = []
    if rng.rand() < 0.5:
        p.append("normalize_variance: false")
    if rng.rand() < 0.5:
        p.append("across_channels: true")
    if rng.rand() < 0.3:
        p.append("eps: %.4f" % rng.uniform(1e-9, 0.1))
    pp = "mvn_param { %s }" % " ".join(p) if p else ""
    return dict(layers=layer("l", "MVN", ["x"], ["y"], pp), inputs={"x": randn(rng, *shape)})


def g_softmax(rng):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    nax = len(shape)
    axis = rng.randint(-nax, nax)
    return dict(layers=layer("l", "Softmax", ["x"], ["y"], "softmax_param { axis: %d }" % axis),
                inputs={"x": 3 * randn(rng, *shape)})


def g_softmaxloss(rng):
    nax = rng.randint(2, 5)
    shape = [rng.randint(1, 4) for _ in range(nax)]
    axis = rng.randint(1, nax) if rng.rand() < 0.3 else 1
    if rng.rand() < 0.2:
        axis = axis - nax
    k = shape[axis]
    lshape = shape[:axis % nax] + shape[axis % nax + 1:]
    p = []
    if axis != 1:
        p.append("softmax_param { axis: %d }" % axis)
    ign = None
    lp = []
    if rng.rand() < 0.4:
        ign = int(rng.randint(-1, k))
        lp.append("ignore_label: %d" % ign)
    r = rng.rand()
    if r < 0.5:
        lp.append("normalization: %s" % ["FULL", "VALID", "BATCH_SIZE", "NONE"][rng.randint(4)])
    elif r < 0.65:
        lp.append("normalize: %s" % ["true", "false"][rng.randint(2)])
    if lp:
        p.append("loss_param { %s }" % " ".join(lp))
    tops = ["loss"] + (["prob"] if rng.rand() < 0.3 else [])
    extra = "loss_weight: %.2f" % rng.uniform(0.2, 3) if rng.rand() < 0.3 else ""
    if extra and len(tops) == 2:
        extra += " loss_weight: %s" % ["0", "0.5"][rng.randint(2)]
    return dict(layers=layer("l", "SoftmaxWithLoss", ["x", "lab"], tops, " ".join(p), extra),
                inputs={"x": 2 * randn(rng, *shape), "lab": labels(rng, lshape, k, ign)})


def g_slice(rng):
    shape = [rng.randint(1, 6) for _ in range(rng.randint(1, 5))]
    nax = len(shape)
    axis = rng.randint(-nax, nax)
    dim = shape[axis]
    if rng.rand() < 0.5 and dim > 1:
        pts = sorted(set(rng.randint(1, dim, size=rng.randint(1, dim)).tolist()))
        p = " ".join("slice_point: %d" % q for q in pts)
        ntop = len(pts) + 1
    else:
        divs = [d for d in range(1, dim + 1) if dim % d == 0]
        ntop = divs[rng.randint(len(divs))]
        p = ""
    tops = ["y%d" % i for i in range(ntop)]
    return dict(layers=layer("l", "Slice", ["x"], tops, "slice_param { axis: %d %s }" % (axis, p)),
                inputs={"x": randn(rng, *shape)})


def g_concat(rng):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    nax = len(shape)
    axis = rng.randint(-nax, nax)
    k = rng.randint(1, 4)
    ins = {}
    for i in range(k):
        s = list(shape)
        s[axis] = rng.randint(1, 4)
        ins["x%d" % i] = randn(rng, *s)
    return dict(layers=layer("l", "Concat", list(ins), ["y"], "concat_param { axis: %d }" % axis),
                inputs=ins)


def g_crop(rng):
    nax = rng.randint(2, 5)
    shape = [rng.randint(1, 6) for _ in range(nax)]
    axis = rng.randint(0, nax)
    ref = list(shape)
    offs = []
    for a in range(axis, nax):
        ref[a] = rng.randint(1, shape[a] + 1)
    noff = rng.randint(0, 3)
    if noff == 1:
        o = min(shape[a] - ref[a] for a in range(axis, nax))
        offs = [rng.randint(0, o + 1)]
    elif noff == 2:
        offs = [rng.randint(0, shape[a] - ref[a] + 1) for a in range(axis, nax)]
    p = "crop_param { axis: %d %s }" % (axis, " ".join("offset: %d" % o for o in offs))
    return dict(layers=layer("l", "Crop", ["x", "r"], ["y"], p),
                inputs={"x": randn(rng, *shape), "r": randn(rng, *ref)})


def g_argmax(rng):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(2, 5))]
    p = []
    nax = len(shape)
    if rng.rand() < 0.5:
        axis = rng.randint(-nax, nax)
        p.append("axis: %d" % axis)
        dim = shape[axis]
    else:
        dim = int(np.prod(shape[1:]))
    if rng.rand() < 0.5:
        p.append("top_k: %d" % rng.randint(1, dim + 1))
    if rng.rand() < 0.5:
        p.append("out_max_val: true")
    x = randn(rng, *shape)
    if rng.rand() < 0.3:
        x = np.round(x)
    return dict(layers=layer("l", "ArgMax", ["x"], ["y"], "argmax_param { %s }" % " ".join(p)),
                inputs={"x": x}, backward=False)


def class_axis(rng, max_axes):
    """(shape, class axis, class count, label shape) of a classifier's input."""
    nax = rng.randint(2, max_axes + 1)
    shape = [rng.randint(1, 4) for _ in range(nax)]
    axis = rng.randint(1, nax) if rng.rand() < 0.3 else 1
    return shape, axis, shape[axis], shape[:axis] + shape[axis + 1:]


def g_accuracy(rng):
    shape, axis, k, lshape = class_axis(rng, 4)
    p = ["axis: %d" % axis]
    if rng.rand() < 0.5:
        p.append("top_k: %d" % rng.randint(1, k + 1))
    ign = None
    if rng.rand() < 0.4:
        ign = int(rng.randint(0, k))
        p.append("ignore_label: %d" % ign)
    tops = ["acc"] + (["perclass"] if rng.rand() < 0.5 else [])
    x = randn(rng, *shape)
    if rng.rand() < 0.3:
        x = np.round(x)
    return dict(layers=layer("l", "Accuracy", ["x", "lab"], tops,
                             "accuracy_param { %s }" % " ".join(p)),
                inputs={"x": x, "lab": labels(rng, lshape, k, ign)}, backward=False)


def g_tile(rng):
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 5))]
    nax = len(shape)
    p = "tile_param { axis: %d tiles: %d }" % (rng.randint(-nax, nax), rng.randint(1, 4))
    return dict(layers=layer("l", "Tile", ["x"], ["y"], p), inputs={"x": randn(rng, *shape)})


def g_spp(rng):
    n, c, h, w = rng.randint(1, 3), rng.randint(1, 3), rng.randint(1, 12), rng.randint(1, 12)
    ph = rng.randint(1, 4)
    pool = ["MAX", "AVE"][rng.randint(2)]
    p = "spp_param { pyramid_height: %d pool: %s }" % (ph, pool)
    return dict(layers=layer("l", "SPP", ["x"], ["y"], p), inputs={"x": randn(rng, n, c, h, w)})


def g_im2col(rng):
    d = g_conv(rng)
    lt = d["layers"].replace('"Convolution"', '"Im2col"')
    lt = re.sub(r"num_output: \d+ ", "", lt)
    lt = re.sub(r"group: \d+ ", "", lt)
    lt = re.sub(r"(bias_filler|weight_filler) \{[^}]*\}", "", lt)
    lt = lt.replace("bias_term: false", "")
    return dict(layers=lt, inputs=d["inputs"])


def g_embed(rng):
    k = rng.randint(1, 8)
    shape = [rng.randint(1, 4) for _ in range(rng.randint(1, 4))]
    p = ["input_dim: %d" % k, "num_output: %d" % rng.randint(1, 5), filler(rng)]
    if rng.rand() < 0.3:
        p.append("bias_term: false")
    else:
        p.append(BIAS_FILLER)
    return dict(layers=layer("l", "Embed", ["x"], ["y"], "embed_param { %s }" % " ".join(p)),
                inputs={"x": rng.randint(0, k, size=shape).astype(np.float32)},
                force_backward=False)


FAMILIES = {name[2:]: fn for name, fn in dict(globals()).items() if name.startswith("g_")}
