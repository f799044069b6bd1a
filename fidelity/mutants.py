"""Mutants: real nets with random edits, run by BVLC Caffe and by caffecli with the same seed and
inputs, then compared: both refuse, both run and agree, or one refuses what the other runs (a
leniency, or a refusal Caffe does not make), or the numbers differ.

    python fidelity/mutants.py make OUT --count 1000 --seed 7 [CORPUS ...]
    PYTHONPATH=$CAFFE/python $CAFFE_PYTHON fidelity/mutants.py run caffe OUT
    python fidelity/mutants.py run caffecli OUT
    python fidelity/mutants.py compare OUT
    python fidelity/mutants.py make-solvers OUT --count 300 --seed 7 [CORPUS ...]
    PATH=$CAFFE/build/tools:.venv/bin:$PATH python fidelity/compare_logs.py OUT/* \
        -- train -solver solver.prototxt

CORPUS folders hold cases in the golden format (default: ../shared/golden); each mutant is one
case's net.prototxt with one to three edits: a set field nudged (kernel_size + 1, a flipped
bool, a value halved), a field of the layer's parameter set to an odd value (0, -1, NaN, an
unknown enum), a bottom renamed or added, a top dropped, a layer deleted or its type changed,
a param spec added. Caffe aborts on what it refuses: ``run caffe`` starts again after the case
that aborted and records its fatal line. ``make-solvers`` edits the solver or the net of the
corpus's solver cases instead (at most 12 iterations), for compare_logs.py to train with both.
Mutations are made in caffecli's protobuf messages; ``run caffe`` reads only the text files,
with numpy and pycaffe.
"""
import argparse
import ctypes
import glob
import json
import os
import random
import shutil
import signal
import subprocess
import sys

import numpy
from google.protobuf import text_format

SKIPPED_KINDS = ("python", "solver", "cli", "legacy", "model")  # code, or not one net
CASE_FILES = ("net.prototxt", "case.h5", "case.json", "init.caffemodel")  # not linked
HANG_SECONDS = 120
ODD_NUMBERS = [0, 1, 2, 3, -1, -2, 7, 100, 0.5, -0.5, 1e-9, 1e9, float("nan")]
TYPES = ["Convolution", "Pooling", "InnerProduct", "ReLU", "Concat", "Slice", "Eltwise",
         "Reshape", "Crop", "Scale", "Bias", "BatchNorm", "LRN", "Softmax", "SoftmaxWithLoss",
         "Flatten", "Split", "Tile", "Reduction", "ArgMax", "Accuracy", "MVN", "Embed", "LSTM",
         "RNN", "Deconvolution", "SPP", "Filter", "Silence", "PReLU", "Dropout", "Power", "Exp",
         "Log"]


# ---- make (caffecli's Python) ---------------------------------------------------------------
def _repeated(field):
    flag = getattr(field, "is_repeated", None)
    return flag if flag is not None else field.label == field.LABEL_REPEATED


def _odd_value(field, rng):
    """A value of ``field``'s type that a net rarely holds, or None for strings and bytes."""
    fd = field
    if fd.type == fd.TYPE_BOOL:
        return rng.random() < 0.5
    if fd.type == fd.TYPE_ENUM:
        numbers = [v.number for v in fd.enum_type.values]
        return rng.choice(numbers + [max(numbers) + 1])
    if fd.type in (fd.TYPE_FLOAT, fd.TYPE_DOUBLE):
        return float(rng.choice(ODD_NUMBERS))
    if fd.type in (fd.TYPE_INT32, fd.TYPE_INT64, fd.TYPE_SINT32, fd.TYPE_SINT64):
        return rng.choice([0, 1, 2, 3, -1, -2, 5, 100])
    if fd.type in (fd.TYPE_UINT32, fd.TYPE_UINT64):
        return rng.choice([0, 1, 2, 3, 5, 7, 100])
    return None


def _nudged(value, fd, rng):
    if fd.type == fd.TYPE_BOOL:
        return not value
    if fd.type == fd.TYPE_ENUM:
        return rng.choice([v.number for v in fd.enum_type.values])
    if fd.type in (fd.TYPE_FLOAT, fd.TYPE_DOUBLE):
        return rng.choice([value * 2, value / 2, -value, 0.0, value + 1])
    if fd.type in (fd.TYPE_UINT32, fd.TYPE_UINT64):
        return max(0, rng.choice([value + 1, value - 1, value * 2, 0, 1, value + 3]))
    return rng.choice([value + 1, value - 1, value * 2, 0, -1, 1])


def _assign(message, fd, value, rng):
    """Set ``fd`` of ``message`` to ``value`` (a repeated field: replace, drop or append)."""
    try:
        if not _repeated(fd):
            setattr(message, fd.name, value)
            return
        values = getattr(message, fd.name)
        pick = rng.random()
        if len(values) and pick < 0.3:
            del values[rng.randrange(len(values))]
        elif len(values) and pick < 0.6:
            values[rng.randrange(len(values))] = value
        else:
            values.append(value)
    except (TypeError, ValueError):     # out of the field's range: leave it
        pass


def nudge_set_field(message, rng):
    """Nudge one field that is already set, looking into set sub-messages; False if none."""
    fields = [(fd, v) for fd, v in message.ListFields() if fd.name not in ("blobs", "name")]
    if not fields:
        return False
    fd, value = rng.choice(fields)
    if fd.type == fd.TYPE_MESSAGE:
        subs = list(value) if _repeated(fd) else [value]
        return nudge_set_field(rng.choice(subs), rng) if subs else False
    if fd.type in (fd.TYPE_STRING, fd.TYPE_BYTES):
        return False
    if _repeated(fd):
        i = rng.randrange(len(value))
        try:
            value[i] = _nudged(value[i], fd, rng)
        except (TypeError, ValueError):
            return False
    else:
        _assign(message, fd, _nudged(value, fd, rng), rng)
    return True


def set_odd_field(message, rng, depth=0):
    """Give one field (set or not) of ``message`` or of a sub-message an odd value."""
    fields = [fd for fd in message.DESCRIPTOR.fields if fd.name not in ("blobs", "layer")]
    if not fields:
        return
    fd = rng.choice(fields)
    if fd.type != fd.TYPE_MESSAGE:
        value = _odd_value(fd, rng)
        if value is not None:
            _assign(message, fd, value, rng)
        return
    if _repeated(fd):
        subs = getattr(message, fd.name)
        if len(subs) and rng.random() < 0.3:
            del subs[rng.randrange(len(subs))]
            return
        sub = subs[rng.randrange(len(subs))] if len(subs) and rng.random() < 0.7 else subs.add()
    else:
        sub = getattr(message, fd.name)
    if depth < 3:
        set_odd_field(sub, rng, depth + 1)


def mutate(net, rng):
    """One random edit of NetParameter ``net``, in place."""
    layers = net.layer
    layer = layers[rng.randrange(len(layers))]
    pick = rng.random()
    if pick < 0.35:
        for _ in range(5):
            if nudge_set_field(layer, rng):
                return
    elif pick < 0.6:
        params = [fd for fd in layer.DESCRIPTOR.fields if fd.type == fd.TYPE_MESSAGE
                  and not _repeated(fd) and layer.HasField(fd.name)]
        set_odd_field(getattr(layer, rng.choice(params).name) if params else layer, rng)
    elif pick < 0.7:
        names = [b for other in layers for b in list(other.bottom) + list(other.top)]
        if layer.bottom and rng.random() < 0.5:
            layer.bottom[rng.randrange(len(layer.bottom))] = rng.choice(names + ["nope"])
        elif rng.random() < 0.5:
            layer.bottom.append(rng.choice(names + ["nope"]))
        elif layer.top:
            del layer.top[rng.randrange(len(layer.top))]
    elif pick < 0.8:
        if len(layers) > 1:
            layers.remove(layer)
    elif pick < 0.9:
        layer.type = rng.choice(TYPES)
    else:
        specs = layer.param
        spec = specs.add() if not len(specs) or rng.random() < 0.5 else \
            specs[rng.randrange(len(specs))]
        set_odd_field(spec, rng)


def net_bases(corpora, skipped=SKIPPED_KINDS):
    """(path, NetParameter) of every case net of ``corpora`` whose kind is not ``skipped``
    and that parses."""
    # caffecli loads here, not at the top: ``run caffe`` runs this file in Caffe's Python
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from caffecli.errors import CaffeError
    from caffecli.proto.io import read_net_param

    bases = []
    for corpus in corpora:
        for path in sorted(glob.glob(os.path.join(corpus, "*", "net.prototxt"))):
            if os.path.basename(os.path.dirname(path)).split("__")[0] in skipped:
                continue
            try:
                bases.append((path, read_net_param(path)))
            except CaffeError:
                pass
    return bases


def make(out, count, seed, corpora):
    from caffecli.proto import caffe_pb2     # after net_bases put caffecli on the path

    bases = net_bases(corpora)
    rng = random.Random(seed)
    for i in range(count):
        path, base = rng.choice(bases)
        net = caffe_pb2.NetParameter()
        net.CopyFrom(base)
        for _ in range(rng.choice([1, 1, 2, 3])):
            mutate(net, rng)
        net.force_backward = True
        folder = os.path.join(out, "%05d" % i)
        os.makedirs(folder, exist_ok=True)
        case = os.path.dirname(os.path.abspath(path))
        for name in os.listdir(case):        # a data layer's sources, relative to the case
            if name not in CASE_FILES:
                os.symlink(os.path.join(case, name), os.path.join(folder, name))
        with open(os.path.join(folder, "net.prototxt"), "w") as f:
            f.write(text_format.MessageToString(net))
        with open(os.path.join(folder, "meta.json"), "w") as f:
            json.dump({"base": path, "phase": rng.choice(["TRAIN", "TEST"]),
                       "seed": rng.randrange(1, 1000)}, f)


SOLVER_KEPT = ("net", "net_param", "train_net", "test_net", "train_net_param", "test_net_param",
               "snapshot_prefix", "solver_mode", "device_id", "train_state", "test_state")


def _restore(message, kept, names):
    """Fields ``names`` of ``message`` as they are in ``kept``."""
    for name in names:
        fd = message.DESCRIPTOR.fields_by_name[name]
        message.ClearField(name)
        if _repeated(fd):
            getattr(message, name).extend(getattr(kept, name))
        elif kept.HasField(name):
            if fd.type == fd.TYPE_MESSAGE:
                getattr(message, name).CopyFrom(getattr(kept, name))
            else:
                setattr(message, name, getattr(kept, name))


def make_solvers(out, count, seed, corpora):
    """Solver cases (golden solver__* folders) with their solver or their net edited, at most
    12 iterations, for ``compare_logs.py OUT/* -- train -solver solver.prototxt``."""
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from caffecli.proto import caffe_pb2

    cases = [os.path.dirname(p) for corpus in corpora
             for p in sorted(glob.glob(os.path.join(corpus, "solver__*", "solver.prototxt")))]
    rng = random.Random(seed)
    for i in range(count):
        folder = os.path.join(out, "%05d" % i)
        shutil.copytree(rng.choice(cases), folder, symlinks=True,
                        ignore=shutil.ignore_patterns("snap*", "resume", "case.*"))
        solver, net = caffe_pb2.SolverParameter(), caffe_pb2.NetParameter()
        for message, name in ((solver, "solver.prototxt"), (net, "net.prototxt")):
            with open(os.path.join(folder, name)) as f:
                text_format.Merge(f.read(), message)
        for _ in range(rng.choice([1, 1, 2])):
            if rng.random() < 0.5:
                mutate(net, rng)
                continue
            kept = caffe_pb2.SolverParameter()
            kept.CopyFrom(solver)
            if rng.random() < 0.5:
                nudge_set_field(solver, rng)
            else:
                set_odd_field(solver, rng)
            _restore(solver, kept, SOLVER_KEPT)     # where the files are, which device
        if not 0 < solver.max_iter <= 12:
            solver.max_iter = 12
        for message, name in ((solver, "solver.prototxt"), (net, "net.prototxt")):
            with open(os.path.join(folder, name), "w") as f:
                f.write(text_format.MessageToString(message))


# ---- run (either Python) --------------------------------------------------------------------
def _run_one(tool, folder, meta):
    """Seeded net, seeded inputs (labels 0 or 1), forward and backward: every blob's and
    parameter's data and diff."""
    if tool == "caffe":        # each Python imports only its own tool
        import caffe
        caffe.set_mode_cpu()
        caffe.set_random_seed(meta["seed"])
        ctypes.CDLL("libc.so.6").srand(1)   # HDF5Data shuffles with C's rand(): each case
    else:                                   # starts it afresh, as a new process would
        import caffecli as caffe
        from caffecli import caffe_rng, context
        context.set_random_seed(meta["seed"])
        caffe_rng.c_rand.srand(1)
    os.chdir(folder)        # data layers' sources are relative to the case
    net = caffe.Net("net.prototxt", getattr(caffe, meta["phase"]))
    rs = numpy.random.RandomState(meta["seed"])
    for name in net.inputs:
        blob = net.blobs[name]
        blob.data[...] = (rs.randint(0, 2, blob.data.shape) if "label" in name
                          else rs.standard_normal(blob.data.shape))
    net.forward()
    net.backward()
    out = {}
    for name, blob in net.blobs.items():
        out["blob/%s/data" % name] = numpy.array(blob.data)
        out["blob/%s/diff" % name] = numpy.array(blob.diff)
    for name, blobs in net.params.items():
        for j, blob in enumerate(blobs):
            out["param/%s/%d/data" % (name, j)] = numpy.array(blob.data)
            out["param/%s/%d/diff" % (name, j)] = numpy.array(blob.diff)
    return out


def run(tool, out):
    """Each case not yet done: result.TOOL.npz, or refused.TOOL.txt with the error."""
    out = os.path.abspath(out)
    if tool == "caffecli":
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for name in sorted(os.listdir(out)):
        folder = os.path.join(out, name)
        done = os.path.join(folder, "done." + tool)
        if not os.path.isdir(folder) or os.path.exists(done):
            continue
        with open(os.path.join(out, "current." + tool), "w") as f:
            f.write(name)
        meta = json.load(open(os.path.join(folder, "meta.json")))
        if tool == "caffe":     # a hang in Caffe's C++ (a data layer with prefetch: 0 waits
            signal.alarm(HANG_SECONDS)  # forever) ends the child: SIGALRM's default action
        try:
            numpy.savez(os.path.join(folder, "result.%s.npz" % tool),
                        **_run_one(tool, folder, meta))
        except Exception as exc:    # noqa: BLE001 - a refusal is a result
            with open(os.path.join(folder, "refused.%s.txt" % tool), "w") as f:
                f.write("%s: %s" % (type(exc).__name__, str(exc)[:500]))
        signal.alarm(0)
        open(done, "w").close()


def run_caffe(out):
    """``run caffe`` in a child process, again after each abort (Caffe's CHECKs end the
    process): the aborted case gets refused.caffe.txt with the fatal line."""
    while True:
        child = subprocess.run([sys.executable, os.path.abspath(__file__), "run-child", "caffe",
                                out], capture_output=True, text=True)
        if child.returncode == 0:
            return
        with open(os.path.join(out, "current.caffe")) as f:
            name = f.read()
        fatal = [line.split("] ", 1)[-1] for line in child.stderr.splitlines()
                 if line.startswith("F")] or child.stderr.strip().splitlines()[-1:]
        if child.returncode == -signal.SIGALRM:
            fatal = ["hung: stopped after %d s" % HANG_SECONDS]
        folder = os.path.join(out, name)
        with open(os.path.join(folder, "refused.caffe.txt"), "w") as f:
            f.write("aborted: %s" % (fatal[0] if fatal else child.returncode))
        open(os.path.join(folder, "done.caffe"), "w").close()


# ---- compare --------------------------------------------------------------------------------
def differences(a, b, rtol=1e-3, atol=1e-4):
    """Arrays of result ``a`` that ``b`` lacks or does not match (NaN matches NaN, inf its
    own sign), relative to the largest finite value of each array."""
    bad = []
    for key in a.files:
        if key not in b.files:
            bad.append("%s missing" % key)
            continue
        x = numpy.atleast_1d(a[key].astype(numpy.float64))
        y = numpy.atleast_1d(b[key].astype(numpy.float64))
        if x.shape != y.shape:
            bad.append("%s shape %s vs %s" % (key, x.shape, y.shape))
            continue
        finite = x[numpy.isfinite(x)]
        scale = max(1.0, numpy.abs(finite).max()) if finite.size else 1.0
        with numpy.errstate(invalid="ignore"):
            diff = numpy.abs(x - y)
        diff[(numpy.isnan(x) & numpy.isnan(y)) | (x == y)] = 0
        if not (diff <= rtol * scale + atol).all():
            bad.append("%s differs by %.3g (scale %.3g)" % (key, numpy.nanmax(diff), scale))
    return bad + ["%s only in caffecli" % k for k in b.files if k not in a.files]


def compare(out):
    tally = {}
    for name in sorted(os.listdir(out)):
        folder = os.path.join(out, name)
        if not os.path.isdir(folder):
            continue
        meta = json.load(open(os.path.join(folder, "meta.json")))
        base = os.path.basename(os.path.dirname(meta["base"]))
        outcome = {}
        for tool in ("caffe", "caffecli"):
            result = os.path.join(folder, "result.%s.npz" % tool)
            refused = os.path.join(folder, "refused.%s.txt" % tool)
            outcome[tool] = (numpy.load(result) if os.path.exists(result) else
                             open(refused).read().strip() if os.path.exists(refused) else None)
        a, b = outcome["caffe"], outcome["caffecli"]
        if a is None or b is None:
            kind = "not run"
        elif isinstance(a, str) and isinstance(b, str):
            kind = "both refuse"
        elif isinstance(a, str):
            kind = "caffe refuses"
            print("%s %s (%s): Caffe %s" % (kind, name, base, a[:160]))
        elif isinstance(b, str):
            kind = "caffecli refuses"
            print("%s %s (%s): %s" % (kind, name, base, b[:160]))
        else:
            bad = differences(a, b)
            kind = "DIFFER" if bad else "agree"
            if bad:
                print("%s %s (%s): %s" % (kind, name, base, "; ".join(bad[:3])))
        tally[kind] = tally.get(kind, 0) + 1
    print(", ".join("%s %d" % kv for kv in sorted(tally.items())))


MAKERS = {"make": ("make", 500), "make-solvers": ("make_solvers", 300)}


def main(argv):
    if argv[:1] and argv[0] in MAKERS:
        maker, count = MAKERS[argv[0]]
        parser = argparse.ArgumentParser(prog="mutants.py " + argv[0])
        parser.add_argument("out")
        parser.add_argument("corpora", nargs="*")
        parser.add_argument("--count", type=int, default=count)
        parser.add_argument("--seed", type=int, default=1)
        args = parser.parse_intermixed_args(argv[1:])
        here = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        globals()[maker](args.out, args.count, args.seed, args.corpora
                         or [os.path.join(os.path.dirname(here), "shared", "golden")])
    elif argv[:2] == ["run", "caffe"] and len(argv) == 3:
        run_caffe(argv[2])
    elif argv[:1] in (["run"], ["run-child"]) and len(argv) == 3:
        run(argv[1], argv[2])
    elif argv[:1] == ["compare"] and len(argv) == 2:
        compare(argv[1])
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
