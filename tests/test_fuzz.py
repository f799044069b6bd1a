"""A seeded battery of mutated inputs: byte flips, truncations, deleted and duplicated lines and
out-of-range numbers over the zoo prototxts, a net, a solver, a caffemodel, a solverstate with
its sidecar and an LMDB. Every run must end cleanly (success, or one error line and exit 1),
print no traceback, not hang, and change none of the files it was given.

Runs are in-process (the command's own ``run``); a seeded sample is run again as a real
process, and LMDB byte flips only run as one (a corrupt mapped file could kill the process).
"""
import hashlib
import os
import random
import re
import shutil

import numpy
import pytest

from bad_input_helpers import assert_clean_end, make_workspace, run_command
from caffecli import context
from caffecli.errors import CaffeError
from caffecli.net import Net, TEST, TRAIN
from caffecli.proto import caffe_pb2
from golden import golden_dir, require_golden
from test_cli import run_subprocess
from test_zoo import zoo_dir

from fidelity import mutants

SEED = 20261123
BAD_NUMBERS = ["-1", "0", "-2147483649", "4294967296", "1e40", "-1e40"]
NUMBER = re.compile(rb"(?<![\w.])-?\d+(?:\.\d+)?(?:e[-+]?\d+)?(?![\w.])")
KINDS = ("flip", "truncate", "delete_line", "duplicate_line", "number")
BINARY_KINDS = ("flip", "truncate")


def mutate(data, kind, rnd):
    """``data`` with one mutation of ``kind`` at a position drawn from ``rnd``."""
    if kind == "flip":
        i = rnd.randrange(len(data))
        return data[:i] + bytes([data[i] ^ (1 << rnd.randrange(8))]) + data[i + 1:]
    if kind == "truncate":
        return data[:rnd.randrange(len(data))]
    lines = data.splitlines(keepends=True)
    i = rnd.randrange(len(lines))
    if kind == "delete_line":
        return b"".join(lines[:i] + lines[i + 1:])
    if kind == "duplicate_line":
        return b"".join(lines[:i + 1] + lines[i:])
    numbers = list(NUMBER.finditer(data))
    if not numbers:
        return mutate(data, "flip", rnd)
    m = numbers[rnd.randrange(len(numbers))]
    return data[:m.start()] + rnd.choice(BAD_NUMBERS).encode() + data[m.end():]


def zoo_cases():
    """(zoo file, mutation kind): every zoo prototxt once, the kinds in turn."""
    folder = zoo_dir()
    if folder is None:
        return []
    names = sorted(n for n in os.listdir(folder) if n.endswith(".prototxt"))
    return [(n, KINDS[i % len(KINDS)]) for i, n in enumerate(names)]


# (input, mutation kinds, command run on the mutated input, mutants)
TARGETS = [
    ("deploy", KINDS, ["time", "-model", "{deploy}", "-iterations", "1"], 5),
    ("fuzz_solver", KINDS, ["train", "-solver", "{fuzz_solver}"], 6),
    ("model_binaryproto", BINARY_KINDS,
     ["test", "-model", "{deploy}", "-weights", "{model_binaryproto}", "-iterations", "1"], 6),
    ("state_binaryproto", BINARY_KINDS,
     ["train", "-solver", "{resume}", "-snapshot", "{state_binaryproto}"], 5),
    ("sidecar", KINDS, ["train", "-solver", "{resume}", "-snapshot", "{state_binaryproto}"], 6),
    ("lmdb", ("truncate",), ["compute_image_mean", "{db}"], 3),
]
SUBPROCESS_SAMPLE = 4


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz_inputs")
    files = make_workspace(str(folder), formats=("BINARYPROTO",))
    (folder / "fuzz_solver.prototxt").write_text(
        (folder / files["solver_binaryproto"]).read_text()
        .replace("snapshot: 2", "snapshot: 0").replace('"snap_binaryproto"', '"fuzz"'))
    files["fuzz_solver"] = "fuzz_solver.prototxt"
    files["sidecar"] = files["state_binaryproto"] + ".caffecli"
    files["lmdb"] = os.path.join(files["db"], "data.mdb")
    return folder, files


def fingerprint(folder):
    """Every file under ``folder``: its bytes' digest and modification time."""
    out = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                out[path] = (hashlib.sha256(f.read()).hexdigest(), os.stat(path).st_mtime_ns)
    return out


def prepare(originals, tmp_path, key, kind, rnd):
    """A copy of the workspace with input ``key`` mutated; (folder, command words)."""
    source, files = originals
    folder = tmp_path / "w"
    shutil.copytree(source, folder)
    path = folder / files[key]
    path.write_bytes(mutate(path.read_bytes(), kind, rnd))
    return folder, files


def plan():
    """Every (target index, kind, seed) the battery runs, drawn from SEED."""
    rnd = random.Random(SEED)
    cases = []
    for t, (key, kinds, _, count) in enumerate(TARGETS):
        cases += [(t, kinds[i % len(kinds)], rnd.randrange(2 ** 32)) for i in range(count)]
    return cases


PLAN = plan()
SAMPLE = random.Random(SEED).sample(range(len(PLAN)), SUBPROCESS_SAMPLE)


def check_run(folder, args, subprocess_too=False):
    before = fingerprint(folder)
    status, _, err = run_command(args, folder)
    line = assert_clean_end(status, err)
    changed = {p for p, v in fingerprint(folder).items() if p in before and before[p] != v}
    assert not changed, changed
    if subprocess_too:
        proc = run_subprocess(args, folder)
        assert proc.returncode == status, proc.stderr[-2000:]
        assert assert_clean_end(proc.returncode, proc.stderr) == line


@pytest.mark.parametrize("index", range(len(PLAN)))
def test_mutated_input_ends_cleanly(originals, tmp_path, index):
    t, kind, seed = PLAN[index]
    key, _, command, _ = TARGETS[t]
    folder, files = prepare(originals, tmp_path, key, kind, random.Random(seed))
    check_run(folder, [w.format(**files) for w in command], index in SAMPLE)


@pytest.mark.parametrize("seed", range(4))
def test_lmdb_byte_flips_end_cleanly_in_a_real_process(originals, tmp_path, seed):
    folder, files = prepare(originals, tmp_path, "lmdb", "flip", random.Random(SEED + seed))
    before = fingerprint(folder)
    proc = run_subprocess(["compute_image_mean", files["db"]], folder)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    assert_clean_end(proc.returncode, proc.stderr)
    assert fingerprint(folder) == before


@pytest.mark.parametrize("name, kind", zoo_cases() or [("<no zoo>", None)])
def test_mutated_zoo_prototxt_ends_cleanly(tmp_path, name, kind):
    if kind is None:
        pytest.skip("zoo prototxts not found (set CAFFECLI_ZOO)")
    data = open(os.path.join(zoo_dir(), name), "rb").read()
    # deploy nets score one image, not ten: the battery stays quick
    data = re.sub(rb"(input_dim|dim): 10\b", rb"\1: 1", data, count=1)
    (tmp_path / name).write_bytes(mutate(data, kind, random.Random(SEED + len(name))))
    check_run(tmp_path, ["test", "-model", name, "-weights", "none.caffemodel",
                         "-iterations", "1"])


# ---- structural edits of the golden nets (fidelity/mutants.py's, without Caffe) -------------
MUTANTS = 1500
MUTANT_BLOB_LIMIT = 1 << 22     # values a mutant may ask for: larger ones are skipped, not run


def test_mutated_golden_nets_run_or_refuse_in_one_line():
    """A field nudged or made odd, a bottom renamed, a layer dropped or retyped: every mutant
    either runs forward and backward or is refused with a CaffeError; any other exception is
    a bug (a blob with no values, a division by a zero count, bytes for a name ...)."""
    require_golden()
    bases = [net for _, net in mutants.net_bases([golden_dir()],
                                                 mutants.SKIPPED_KINDS + ("data",))]
    rnd = random.Random(SEED)
    ran = refused = 0
    bugs = []
    for i in range(MUTANTS):
        net = caffe_pb2.NetParameter()
        net.CopyFrom(rnd.choice(bases))
        for _ in range(rnd.choice([1, 1, 2, 3])):
            mutants.mutate(net, rnd)
        net.force_backward = rnd.random() < 0.5
        context.set_random_seed(i + 1)
        try:
            built = Net(net, rnd.choice([TRAIN, TEST]), log=False)
            if max((r.blob.count for r in built.blob_records), default=0) > MUTANT_BLOB_LIMIT:
                continue
            inputs = numpy.random.RandomState(i)
            for blob in built.input_blobs:
                blob.data[...] = inputs.randint(0, 2, blob.shape)
            with numpy.errstate(all="ignore"):
                built.forward_pass()
                built.backward_pass()
            ran += 1
        except CaffeError:
            refused += 1
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            bugs.append("mutant %d: %s: %s\n%s" % (i, type(exc).__name__, exc, net))
    assert not bugs, bugs[0]
    assert ran > MUTANTS // 10 and refused > MUTANTS // 10, (ran, refused)
