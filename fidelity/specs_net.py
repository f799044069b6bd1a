"""Random multi-layer nets: the net-level semantics single layers do not reach (automatic
splits, in-place chains, storage shared through Reshape/Flatten/Split and rewritten in place,
parameters shared by name or frozen, loss weights on any top, propagate_down, phases)."""
import numpy as np

from .writer import BIAS_FILLER, filler, layer, randn


def g_net(rng):
    """A net of 3-8 random layers over x (and a label): convolutions, pooling, inner products,
    neurons in place or not, fan-out, explicit splits, aliases (Reshape, Flatten, Split) rewritten
    in place, shared and frozen parameters, loss weights anywhere, then the losses."""
    n = 2
    c, h, w = rng.randint(1, 4), rng.randint(3, 7), rng.randint(3, 7)
    K = rng.randint(2, 5)
    blobs = {"x": (n, c, h, w)}      # name -> shape
    lt = ""
    k = [0]
    phase = "TRAIN" if rng.rand() < 0.7 else "TEST"
    ip_shared = {}                    # in-dim -> (param name, num_output)

    def new(prefix):
        k[0] += 1
        return "%s%d" % (prefix, k[0])

    def pick(cond=lambda s: True):
        cands = [b for b, s in blobs.items() if cond(s)]
        return cands[rng.randint(len(cands))] if cands else None

    def lw():
        return "loss_weight: %.2f" % rng.uniform(0.2, 2) if rng.rand() < 0.15 else ""

    def pspecs(nparams):
        out = []
        for _ in range(nparams):
            r = rng.rand()
            if r < 0.15:
                out.append("param { lr_mult: 0 }")
            elif r < 0.3:
                out.append("param { lr_mult: 2 decay_mult: 0 }")
            else:
                break
        return " ".join(out)

    for _ in range(rng.randint(3, 9)):
        op = rng.randint(23)
        b = pick(lambda s: len(s) == 4) if op in (0, 1, 2, 6, 7) else pick()
        if b is None:
            continue
        s = blobs[b]
        if len(s) < 2 and op not in (3, 4, 5, 8, 9, 17):
            continue
        inplace = rng.rand() < 0.4 and b != "x"
        name = new("L")
        if op == 0:   # conv "same"
            kk = [1, 3][rng.randint(2)]
            o = rng.randint(1, 4)
            top = new("conv")
            lt += layer(name, "Convolution", [b], [top],
                        "convolution_param { num_output: %d kernel_size: %d pad: %d %s %s }"
                        % (o, kk, kk // 2, filler(rng), BIAS_FILLER), pspecs(2) + " " + lw())
            blobs[top] = (s[0], o, s[2], s[3])
        elif op == 1:  # pool
            top = new("pool")
            lt += layer(name, "Pooling", [b], [top], "pooling_param { pool: %s kernel_size: 2 "
                        "stride: 2 }" % ["MAX", "AVE"][rng.randint(2)], lw())
            blobs[top] = (s[0], s[1], -(-(s[2] - 2) // 2) + 1 if s[2] >= 2 else 1,
                          -(-(s[3] - 2) // 2) + 1 if s[3] >= 2 else 1)
            if s[2] < 2 or s[3] < 2:
                lt = lt[:lt.rfind("layer {")]
                del blobs[top]
        elif op == 2 and phase == "TRAIN":   # batchnorm (+scale) in place
            top = b if inplace else new("bn")
            lt += layer(name, "BatchNorm", [b], [top])
            lt += layer(new("L"), "Scale", [top], [top], "scale_param { bias_term: true }")
            blobs[top] = s
        elif op == 3:  # ip
            din = int(np.prod(s[1:]))
            top = new("ip")
            if din in ip_shared and rng.rand() < 0.6:
                pname, o = ip_shared[din]
                spec = 'param { name: "%s_w" } param { name: "%s_b" }' % (pname, pname)
            else:
                o = rng.randint(1, 5)
                pname = new("sh")
                ip_shared[din] = (pname, o)
                spec = 'param { name: "%s_w" } param { name: "%s_b" }' % (pname, pname) \
                    if rng.rand() < 0.5 else pspecs(2)
            lt += layer(name, "InnerProduct", [b], [top],
                        "inner_product_param { num_output: %d %s %s }"
                        % (o, filler(rng), BIAS_FILLER),
                        spec + " " + lw())
            blobs[top] = (s[0], o)
        elif op in (4, 5):  # neuron
            typ = ["ReLU", "Sigmoid", "TanH", "ELU", "AbsVal", "Power"][rng.randint(6)]
            if typ == "AbsVal":
                inplace = False
            top = b if inplace else new("n")
            extra = lw() if not inplace else ""
            lt += layer(name, typ, [b], [top], "", extra)
            blobs[top] = s
        elif op == 6:  # concat on channels
            b2 = pick(lambda t: len(t) == 4 and t[2:] == s[2:])
            top = new("cat")
            lt += layer(name, "Concat", [b, b2], [top])
            blobs[top] = (s[0], s[1] + blobs[b2][1], s[2], s[3])
        elif op == 7:  # dropout in place in TEST, or prelu
            if phase == "TEST":
                top = b if inplace else new("d")
                lt += layer(name, "Dropout", [b], [top])
            else:
                top = new("pr")
                lt += layer(name, "PReLU", [b], [top], "", pspecs(1))
            blobs[top] = s
        elif op == 8:  # eltwise of two same-shaped
            b2 = pick(lambda t: t == s)
            top = new("el")
            opn = ["SUM", "PROD", "MAX"][rng.randint(3)]
            pd = ""
            if rng.rand() < 0.2:
                pd = "propagate_down: %s propagate_down: %s" % tuple(
                    ["true", "false"][rng.randint(2)] for _ in range(2))
            lt += layer(name, "Eltwise", [b, b2], [top], "eltwise_param { operation: %s }" % opn,
                        pd)
            blobs[top] = s
        elif op == 9:  # explicit split
            t1, t2 = new("sp"), new("sp")
            lt += layer(name, "Split", [b], [t1, t2])
            blobs[t1] = blobs[t2] = s
        elif op == 10:  # flatten / reshape
            top = new("fl")
            lt += layer(name, "Flatten", [b], [top])
            blobs[top] = (s[0], int(np.prod(s[1:])))
        elif op == 11:  # reshape (keep count)
            top = new("rs")
            lt += layer(name, "Reshape", [b], [top], "reshape_param { shape { dim: 0 dim: -1 } }")
            blobs[top] = (s[0], int(np.prod(s[1:])))
        elif op == 12:  # slice on axis 1 (maybe a single top)
            if s[1] >= 2 and rng.rand() < 0.7:
                t1, t2 = new("sl"), new("sl")
                lt += layer(name, "Slice", [b], [t1, t2], "slice_param { axis: 1 slice_point: 1 }")
                blobs[t1] = (s[0], 1) + tuple(s[2:])
                blobs[t2] = (s[0], s[1] - 1) + tuple(s[2:])
            else:
                t1 = new("sl")
                lt += layer(name, "Slice", [b], [t1], "slice_param { axis: 1 }")
                blobs[t1] = s
        elif op == 13:  # single-bottom concat
            top = new("c1")
            lt += layer(name, "Concat", [b], [top])
            blobs[top] = s
        elif op == 14:  # scale/bias by another blob (2 bottoms) or learned, maybe in place
            typ = ["Scale", "Bias"][rng.randint(2)]
            key = "scale_param" if typ == "Scale" else "bias_param"
            top = b if inplace else new("sc")
            lt += layer(name, typ, [b], [top], "%s { axis: 1 num_axes: 1 filler { type: "
                        "\"uniform\" min: -1 max: 1 } }" % key, pspecs(1) + " " + lw())
            blobs[top] = s
        elif op == 15:  # softmax / mvn / lrn
            typ = ["Softmax", "MVN", "LRN"][rng.randint(3)] if len(s) == 4 else "Softmax"
            top = new("nm")
            lt += layer(name, typ, [b], [top], "", lw())
            blobs[top] = s
        elif op == 16:  # reduction to (N,)
            top = new("red")
            lt += layer(name, "Reduction", [b], [top], "reduction_param { operation: %s axis: 1 }"
                        % ["SUM", "ASUM", "SUMSQ", "MEAN"][rng.randint(4)], lw())
            blobs[top] = (s[0],)
        elif op == 17:  # silence something
            lt += layer(name, "Silence", [b], [])
        elif op == 18:  # tile on axis 1
            top = new("ti")
            lt += layer(name, "Tile", [b], [top], "tile_param { axis: 1 tiles: 2 }")
            blobs[top] = (s[0], 2 * s[1]) + tuple(s[2:])
        elif op == 19:  # deconv / lr_mult 0 conv
            if len(s) != 4:
                continue
            top = new("dc")
            o = rng.randint(1, 3)
            lt += layer(name, "Deconvolution", [b], [top],
                        "convolution_param { num_output: %d kernel_size: 2 stride: 1 %s }"
                        % (o, filler(rng)), pspecs(2))
            blobs[top] = (s[0], o, s[2] + 1, s[3] + 1)
        elif op >= 20:  # alias a blob and rewrite the alias in place
            kind = ["Reshape", "Flatten", "Split"][rng.randint(3)]
            al = new("al")
            if kind == "Reshape":
                lt += layer(name, "Reshape", [b], [al],
                            "reshape_param { shape { dim: 0 dim: -1 } }")
                blobs[al] = (s[0], int(np.prod(s[1:])))
            elif kind == "Flatten":
                lt += layer(name, "Flatten", [b], [al])
                blobs[al] = (s[0], int(np.prod(s[1:])))
            else:
                al2 = new("al")
                lt += layer(name, "Split", [b], [al, al2])
                blobs[al] = blobs[al2] = s
            typ = ["ReLU", "Sigmoid", "TanH", "Power", "Scale", "Dropout"][rng.randint(6)]
            if typ == "Dropout" and phase == "TRAIN":
                typ = "ELU"
            pp = "scale_param { axis: 1 num_axes: 0 filler { type: \"constant\" value: 0.5 } }" \
                if typ == "Scale" else ""
            lt += layer(new("L"), typ, [al], [al], pp)
    # losses
    feat = pick(lambda s: True)
    lt += layer("cls", "InnerProduct", [feat], ["score"],
                "inner_product_param { num_output: %d %s %s }" % (K, filler(rng), BIAS_FILLER))
    lt += layer("loss", "SoftmaxWithLoss", ["score", "label"], ["loss"],
                "", "loss_weight: %.2f" % rng.uniform(0.5, 2) if rng.rand() < 0.3 else "")
    if rng.rand() < 0.5:
        a = pick(lambda s: True)
        lt += layer("aux", "InnerProduct", [a], ["aux"],
                    "inner_product_param { num_output: 3 %s %s }" % (filler(rng), BIAS_FILLER))
        lt += layer("l2", "EuclideanLoss", ["aux", "target"], ["l2"], "",
                    "loss_weight: %.2f" % rng.uniform(0, 1))
        target = randn(rng, n, 3)
    else:
        target = None
    if phase == "TEST" or rng.rand() < 0.3:
        lt += layer("acc", "Accuracy", ["score", "label"], ["acc"])
    ins = {"x": randn(rng, *blobs["x"]), "label": rng.randint(0, K, (n,)).astype(np.float32)}
    if target is not None:
        ins["target"] = target
    return dict(layers=lt, inputs=ins, phase=phase, force_backward=rng.rand() < 0.5,
                rtol=1e-4, atol=1e-5)
