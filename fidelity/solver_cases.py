"""Random solver cases: a solver of a random type, learning-rate policy, regularization,
clipping, iter_size and snapshot format over a small HDF5-fed net (or a random specs_net net),
stepped 12 times by Caffe with a snapshot at 6, stored as shared/golden's solver__* cases."""
import json
import os

import h5py
import numpy as np

from . import specs_net
from .writer import caffe, in_child

FILL = ('weight_filler { type: "gaussian" std: 0.4 } '
        'bias_filler { type: "uniform" min: -0.5 max: 0.5 }')
DATA = ('layer { name: "d" type: "HDF5Data" %s hdf5_data_param { source: "train_h5.txt" '
        'batch_size: %d } }')


def param_specs(rng, shared=None):
    """Up to two ``param { }`` blocks: names for sharing, random lr_mult / decay_mult."""
    out = ""
    for i in range(2):
        parts = ['name: "%s_%d"' % (shared, i)] if shared else []
        if rng.rand() < 0.3:
            parts.append("lr_mult: %s" % ["0", "0.5", "2", "1"][rng.randint(4)])
        if rng.rand() < 0.3:
            parts.append("decay_mult: %s" % ["0", "0.5", "2", "1"][rng.randint(4)])
        if parts:
            out += "  param { %s }\n" % " ".join(parts)
        elif i == 0 and rng.rand() < 0.5:
            break
    return out


def small_net(rng):
    """(net text, {top: array of 24 samples}): optional conv (+BatchNorm/Scale) and pooling,
    inner products with a random activation, shared weights, softmax or Euclidean loss."""
    conv = rng.rand() < 0.4
    L = ['name: "solvernet"', DATA % ('top: "data" top: "label"', 4)]
    bottom = "data"
    if conv:
        bn = rng.rand() < 0.5   # a bias before BatchNorm gets only rounding noise: none then
        fill = FILL.split(" bias_filler")[0] + " bias_term: false" if bn else FILL
        L.append('layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"\n%s'
                 '  convolution_param { num_output: 3 kernel_size: 3 pad: 1 %s } }'
                 % (param_specs(rng), fill))
        if bn:
            L.append('layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" }')
            L.append('layer { name: "sc" type: "Scale" bottom: "conv" top: "conv" '
                     'scale_param { bias_term: true } }')
        L.append('layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" '
                 'pooling_param { pool: %s kernel_size: 2 stride: 2 } }'
                 % ["MAX", "AVE"][rng.randint(2)])
        bottom = "pool"
    L.append('layer { name: "ip1" type: "InnerProduct" bottom: "%s" top: "ip1"\n%s'
             '  inner_product_param { num_output: 5 %s } }' % (bottom, param_specs(rng), FILL))
    L.append('layer { name: "act" type: "%s" bottom: "ip1" top: "ip1" }'
             % ["ReLU", "TanH", "Sigmoid", "PReLU"][rng.randint(4)])
    b = "ip1"
    if rng.rand() < 0.3:
        shared = param_specs(rng, "sh")
        for name in ("ipa", "ipb"):
            L.append('layer { name: "%s" type: "InnerProduct" bottom: "%s" top: "%s"\n%s'
                     '  inner_product_param { num_output: 5 %s } }' % (name, b, name, shared,
                                                                     FILL))
            b = name
    L.append('layer { name: "ip2" type: "InnerProduct" bottom: "%s" top: "ip2"\n%s'
             '  inner_product_param { num_output: 3 %s } }' % (b, param_specs(rng), FILL))
    euclid = rng.rand() < 0.25
    L.append('layer { name: "loss" type: "%s" bottom: "ip2" bottom: "label" top: "loss" }'
             % ("EuclideanLoss" if euclid else "SoftmaxWithLoss"))
    data = {"data": rng.randn(24, 2, 4, 4) if conv else rng.randn(24, 6),
            "label": rng.randn(24, 3) if euclid else rng.randint(0, 3, 24)}
    return "\n".join(L) + "\n", {k: v.astype(np.float32) for k, v in data.items()}


def random_net(rng):
    """A specs_net net fed by HDF5Data (12 samples, batch 2) instead of its Input layers."""
    while True:
        spec = specs_net.g_net(rng)
        if "Dropout" not in spec["layers"]:     # TRAIN-phase masks come from Caffe's RNG
            break
    inputs = spec["inputs"]
    text = 'name: "solvernet"\n' + DATA % (" ".join('top: "%s"' % t for t in inputs), 2) \
        + "\n" + spec["layers"]
    data = {}
    for name, arr in inputs.items():
        if name == "label":
            data[name] = rng.randint(0, max(2, int(arr.max()) + 1), 12).astype(np.float32)
        else:
            data[name] = rng.randn(12, *arr.shape[1:]).astype(np.float32)
    return text, data


# the lr_policy's own fields
POLICIES = {
    "fixed": lambda rng: [],
    "step": lambda rng: ["gamma: %.3g" % rng.uniform(0.1, 0.9),
                         "stepsize: %d" % rng.randint(1, 6)],
    "exp": lambda rng: ["gamma: %.4g" % rng.uniform(0.8, 0.99)],
    "inv": lambda rng: ["gamma: %.4g" % rng.uniform(0.01, 0.5),
                        "power: %.3g" % rng.uniform(0.5, 1)],
    "multistep": lambda rng: ["gamma: %.3g" % rng.uniform(0.1, 0.9)] + [
        "stepvalue: %d" % v for v in sorted(set(rng.randint(1, 12, 3).tolist()))],
    "poly": lambda rng: ["power: %.3g" % rng.uniform(0.5, 2)],
    "sigmoid": lambda rng: ["gamma: %.3g" % rng.uniform(0.1, 1),
                            "stepsize: %d" % rng.randint(2, 10)],
}
BASE_LR = {"SGD": 0.1, "Nesterov": 0.05, "AdaGrad": 0.1, "RMSProp": 0.02, "AdaDelta": 1.0,
           "Adam": 0.02}


def solver_lines(rng):
    """The random part of a solver.prototxt, one field per line."""
    typ = sorted(BASE_LR)[rng.randint(len(BASE_LR))]
    s = ['type: "%s"' % typ, "base_lr: %.4g" % (BASE_LR[typ] * rng.uniform(0.3, 2))]
    if typ in ("SGD", "Nesterov") and rng.rand() < 0.7 or typ == "AdaDelta":
        s.append("momentum: %.3g" % rng.uniform(0.5 if typ != "AdaDelta" else 0.8, 0.99))
    if typ == "Adam":
        if rng.rand() < 0.5:
            s.append("momentum: %.3g" % rng.uniform(0.8, 0.95))
        if rng.rand() < 0.5:
            s.append("momentum2: %.4g" % rng.uniform(0.99, 0.9999))
    if typ == "RMSProp" and rng.rand() < 0.6:
        s.append("rms_decay: %.3g" % rng.uniform(0.8, 0.99))
    if typ not in ("SGD", "Nesterov") and rng.rand() < 0.5:
        s.append("delta: %g" % [1e-8, 1e-6, 1e-4, 0.01][rng.randint(4)])
    if rng.rand() < 0.6:
        s.append("weight_decay: %g" % [5e-4, 1e-3, 0.01, 0.1][rng.randint(4)])
        if rng.rand() < 0.4:
            s.append('regularization_type: "%s"' % ["L1", "L2"][rng.randint(2)])
    policy = sorted(POLICIES)[rng.randint(len(POLICIES))]
    s += ['lr_policy: "%s"' % policy] + POLICIES[policy](rng)
    if rng.rand() < 0.3:
        s.append("clip_gradients: %.3g" % rng.uniform(0.01, 1))
    if rng.rand() < 0.3:
        s.append("iter_size: %d" % rng.randint(2, 4))
    if rng.rand() < 0.2:
        s.append("average_loss: %d" % rng.randint(2, 5))
    if rng.rand() < 0.2:
        s.append("snapshot_format: HDF5")
    return s


def write_solver_case(outdir, name, seed, net_maker=small_net):
    rng = np.random.RandomState(seed)
    d = os.path.join(outdir, name)
    os.makedirs(d)
    net, data = net_maker(rng)
    fields = solver_lines(rng)
    with open(os.path.join(d, "net.prototxt"), "w") as f:
        f.write(net)
    head = ['net: "net.prototxt"', "max_iter: 12", "display: 1", "random_seed: 3",
            "snapshot: 6", 'snapshot_prefix: "snap"']
    with open(os.path.join(d, "solver.prototxt"), "w") as f:
        f.write("\n".join(head + fields) + "\n")
    with h5py.File(os.path.join(d, "train.h5"), "w") as h:
        for key, arr in data.items():
            h[key] = arr
    with open(os.path.join(d, "train_h5.txt"), "w") as f:
        f.write("train.h5\n")
    return in_child(d, outdir, lambda: _run_solver_case(d, fields, seed))


def _run_solver_case(d, fields, seed):
    os.chdir(d)
    caffe.set_random_seed(seed % 2 ** 31)
    solver = caffe.get_solver("solver.prototxt")
    solver.net.save("init.caffemodel")
    losses = []
    with h5py.File("case.h5", "w") as h:
        for it in range(1, 13):
            solver.step(1)
            losses.append(float(solver.net.blobs["loss"].data))
            for lname, blobs in solver.net.params.items():
                for i, p in enumerate(blobs):
                    h["params_after/%d/%s/%d" % (it, lname, i)] = p.data.copy()
        h["loss_per_iter"] = np.array(losses, np.float32)
    for f in os.listdir("."):
        if f.startswith("snap_iter_12"):
            os.remove(f)
    ext = ".h5" if "snapshot_format: HDF5" in fields else ""
    meta = dict(family="solver", variant=os.path.basename(d).split("__")[1], solver=fields,
                iters=12, snapshots=["snap_iter_6.caffemodel" + ext,
                                     "snap_iter_6.solverstate" + ext],
                resume_bitwise_equal=True, rtol=1e-4, atol=1e-5)
    with open("case.json", "w") as f:
        json.dump(meta, f, indent=1)
