"""What every generator shares: BVLC's pycaffe, prototxt snippets, and the case writer that runs
Caffe on a net and stores what it computed in the golden format (shared/golden/README.md).

Each case runs in a forked child: a Caffe CHECK failure aborts only that case, whose folder then
moves to OUT/aborted/ with Caffe's stderr (what caffecli should refuse too).
"""
import json
import os
import shutil
import sys
import traceback

import numpy as np

# the checkout's own 'caffe' (caffecli's facade) must not shadow BVLC's pycaffe
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != _ROOT]
os.environ.setdefault("GLOG_minloglevel", "2")
import caffe  # noqa: E402  (BVLC's pycaffe: see fidelity/README.md)
import h5py  # noqa: E402

try:
    import caffe._caffe  # noqa: E402,F401  (the compiled module only BVLC's pycaffe has)
except ImportError:
    raise SystemExit("fidelity/ needs BVLC Caffe's pycaffe on PYTHONPATH, not caffecli's "
                     "'caffe' facade (see fidelity/README.md)")
caffe.set_mode_cpu()


# ---- prototxt snippets --------------------------------------------------------------------
def filler(rng, field="weight_filler"):
    """A random gaussian, uniform or xavier filler as the ``field`` message."""
    k = rng.randint(3)
    if k == 0:
        body = 'type: "gaussian" std: %.3f' % rng.uniform(0.1, 1.0)
    elif k == 1:
        body = 'type: "uniform" min: -%.3f max: %.3f' % (rng.uniform(0.1, 1), rng.uniform(0.1, 1))
    else:
        body = 'type: "xavier"'
    return "%s { %s }" % (field, body)


BIAS_FILLER = 'bias_filler { type: "uniform" min: -0.5 max: 0.5 }'


def layer(name, type_, bottoms, tops, params="", extra=""):
    """One ``layer { }`` block; ``params`` is its *_param text, ``extra`` any other fields."""
    s = 'layer {\n  name: "%s"\n  type: "%s"\n' % (name, type_)
    s += "".join('  bottom: "%s"\n' % b for b in bottoms)
    s += "".join('  top: "%s"\n' % t for t in tops)
    if extra:
        s += "  %s\n" % extra
    if params:
        s += "  %s\n" % params
    return s + "}\n"


def input_layers(inputs):
    return "".join(layer(b, "Input", [], [b], "input_param { shape { %s } }"
                         % " ".join("dim: %d" % s for s in arr.shape))
                   for b, arr in inputs.items())


def randn(rng, *shape):
    return np.asarray(rng.randn(*shape), dtype=np.float32)


def labels(rng, shape, k, ignore=None):
    """Integer class labels in [0, k) as floats, some set to ``ignore``."""
    lab = rng.randint(0, k, size=shape).astype(np.float32)
    if ignore is not None:
        lab[rng.rand(*shape) < 0.3] = ignore
    return lab


# ---- running Caffe in a child --------------------------------------------------------------
def in_child(folder, outdir, run):
    """Run ``run()`` in a forked child with stderr to folder/stderr.txt; True when it exits
    cleanly, else the folder moves to outdir/aborted/."""
    pid = os.fork()
    if pid == 0:
        fd = os.open(os.path.join(folder, "stderr.txt"), os.O_WRONLY | os.O_CREAT)
        os.dup2(fd, 2)
        try:
            run()
            os._exit(0)
        except Exception:   # noqa: BLE001 - reported in the case's stderr.txt
            traceback.print_exc()
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    if status:
        os.makedirs(os.path.join(outdir, "aborted"), exist_ok=True)
        shutil.move(folder, os.path.join(outdir, "aborted", os.path.basename(folder)))
        return False
    os.remove(os.path.join(folder, "stderr.txt"))
    return True


def write_layer_case(outdir, name, spec, seed, convert=None):
    """A layer/net case from ``spec`` (generator output: layers, inputs, and optionally phase,
    force_backward, backward, set_params, rtol, atol); ``convert`` may rewrite the net text
    (to the V1 format) or return None to drop the case. True when Caffe ran it."""
    d = os.path.join(outdir, name)
    os.makedirs(d, exist_ok=True)
    backward = spec.get("backward", True)
    fb = spec.get("force_backward", True) and backward
    phase = spec.get("phase", "TRAIN")
    text = 'name: "%s"\n' % name + ("force_backward: true\n" if fb else "")
    text += input_layers(spec["inputs"]) + spec["layers"]
    if convert is not None:
        text = convert(text)
        if text is None:
            shutil.rmtree(d)
            return False
    with open(os.path.join(d, "net.prototxt"), "w") as f:
        f.write(text)
    np.savez(os.path.join(d, "inputs.npz"), **spec["inputs"])
    with open(os.path.join(d, "spec.json"), "w") as f:
        json.dump(dict(phase=phase, force_backward=fb, backward=backward), f)
    meta = dict(family=name.split("__")[0], variant=name.split("__")[1], phase=phase,
                inputs=list(spec["inputs"]), has_backward=backward,
                rtol=spec.get("rtol", 1e-4), atol=spec.get("atol", 1e-5), force_backward=fb,
                seed=seed)
    return in_child(d, outdir, lambda: _run_layer_case(d, spec, meta))


def _run_layer_case(d, spec, meta):
    os.chdir(d)
    caffe.set_random_seed(meta["seed"] % 2 ** 31)
    net = caffe.Net("net.prototxt", getattr(caffe, meta["phase"]))
    for lname, values in spec.get("set_params", {}).items():
        for blob, v in zip(net.params[lname], values):
            blob.data[...] = v.reshape(blob.data.shape)
    if any(len(layer_.blobs) for layer_ in net.layers):
        net.save("init.caffemodel")
    for b, arr in spec["inputs"].items():
        net.blobs[b].data[...] = arr
    loss = net._forward(0, len(net.layers) - 1)
    rng = np.random.RandomState(meta["seed"] + 1)
    seeded = []
    with h5py.File("case.h5", "w") as h:
        for b, arr in spec["inputs"].items():
            h["inputs/" + b] = arr
        for b, blob in net.blobs.items():
            h["forward/" + b] = blob.data.copy()
        for lname, blobs in net.params.items():
            for i, p in enumerate(blobs):
                h["param_data/%s/%d" % (lname, i)] = p.data.copy()
        h["loss"] = np.float32(loss)
        if meta["has_backward"]:
            for o in net.outputs:
                if net.blob_loss_weights[o] == 0:
                    v = randn(rng, *net.blobs[o].data.shape)
                    net.blobs[o].diff[...] = v
                    h["top_diff/" + o] = v
                    seeded.append(o)
            for blobs in net.params.values():
                for p in blobs:
                    p.diff[...] = 0
            net._backward(len(net.layers) - 1, 0)
            for b, blob in net.blobs.items():
                h["backward/" + b] = blob.diff.copy()
            for lname, blobs in net.params.items():
                for i, p in enumerate(blobs):
                    h["param_diff/%s/%d" % (lname, i)] = p.diff.copy()
    meta.update(outputs=list(net.outputs), seeded_top_diffs=seeded)
    with open("case.json", "w") as f:
        json.dump(meta, f, indent=1)
