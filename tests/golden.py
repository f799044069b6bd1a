"""Reads the golden corpus made by BVLC Caffe (../shared/golden) and replays a case.

The corpus location: $CAFFECLI_GOLDEN, else ../shared/golden beside the checkout, else
tests/golden_data (where the GPU machine gets a copy). Missing in CI is a failure, not a skip.
"""
import contextlib
import json
import os

import numpy
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def golden_dir():
    for cand in (os.environ.get("CAFFECLI_GOLDEN"),
                 os.path.join(ROOT, "..", "shared", "golden"),
                 os.path.join(ROOT, "tests", "golden_data")):
        if cand and os.path.isdir(cand):
            return os.path.abspath(cand)
    return None


def case_names(families=None, exclude=()):
    """Case folder names, optionally only those of ``families`` (a set of prefixes)."""
    d = golden_dir()
    if d is None:
        return []
    names = sorted(n for n in os.listdir(d) if "__" in n and os.path.isdir(os.path.join(d, n)))
    if families is not None:
        names = [n for n in names if n.split("__")[0] in families]
    return [n for n in names if n.split("__")[0] not in exclude]


MISSING = ("golden corpus not found: expected at %s (or set CAFFECLI_GOLDEN)"
           % os.path.normpath(os.path.join(ROOT, "..", "shared", "golden")))


def require_golden():
    """Skip locally, fail in CI (the CI variable set), when the corpus is absent."""
    if golden_dir() is None:
        if os.environ.get("CI"):
            pytest.fail(MISSING)
        pytest.skip(MISSING)


@contextlib.contextmanager
def in_dir(path):
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


class Case:
    """One golden case: its folder, case.json and case.h5."""

    def __init__(self, name):
        require_golden()
        self.name = name
        self.dir = os.path.join(golden_dir(), name)
        with open(os.path.join(self.dir, "case.json")) as f:
            self.meta = json.load(f)
        self.rtol = self.meta.get("rtol", 1e-4)
        self.atol = self.meta.get("atol", 1e-5)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def h5(self):
        import h5py
        return h5py.File(self.path("case.h5"), "r")


def writable_case(name, dest):
    """The case ``name`` with its files copied into the folder ``dest`` (where a solver's
    snapshots may land); make ``dest`` the working directory to run it."""
    import shutil
    case = Case(name)
    for entry in os.listdir(case.dir):
        src = os.path.join(case.dir, entry)
        if os.path.isfile(src):
            shutil.copy(src, os.path.join(dest, entry))
    return case


def differing_bits(got, want):
    """(values, values whose float32 bits differ from ``want``'s, an array or an HDF5
    dataset): zeros of either sign count as equal, NaN as equal to NaN."""
    got = numpy.asarray(got, numpy.float32).ravel()
    want = numpy.asarray(want[()] if hasattr(want, "shape") else want, numpy.float32).ravel()
    same = (got == want) | (numpy.isnan(got) & numpy.isnan(want))
    return got.size, int(got.size - same.sum())


def solver_steps(case):
    """Replay solver ``case`` (its files in the working directory: ``writable_case``) one
    iteration at a time: (iteration, [(layer, blob index, parameter, Caffe's parameter)])."""
    from caffecli import solvers
    s = solvers.get_solver("solver.prototxt")
    s.net.copy_trained_layers_from("init.caffemodel")
    with case.h5() as h5:
        for it in range(1, len(h5["loss_per_iter"][()]) + 1):
            s.step(1)
            group = h5["params_after/%d" % it]
            yield it, [(name, i, s.net.layer_by_name(name).blobs[int(i)].data,
                        group[name][i][()]) for name in group for i in group[name]]


def assert_close(got, want, rtol, atol, what):
    got = numpy.asarray(got, dtype=numpy.float64)
    want = numpy.asarray(want, dtype=numpy.float64)
    assert got.size == want.size, "%s: size %s, Caffe has %s" % (what, got.shape, want.shape)
    got = got.reshape(want.shape)
    bad = numpy.abs(got - want) > atol + rtol * numpy.abs(want)
    bad |= numpy.isnan(got) != numpy.isnan(want)  # NaN compares false: count it by itself
    if bad.any():
        idx = numpy.argwhere(bad)[0]
        raise AssertionError("%s: %d of %d values differ; first at %s: got %r, Caffe %r"
                             % (what, bad.sum(), bad.size, tuple(idx), got[tuple(idx)],
                                want[tuple(idx)]))


def run_layer_case(name):
    """Build the case's net, feed inputs, forward, seed diffs, backward; compare everything
    (in the current mode: blob.data/diff are host values wherever the layers computed)."""
    import caffecli
    from caffecli import Net
    from caffecli.proto import caffe_pb2
    case = Case(name)
    meta = case.meta
    with in_dir(case.dir), case.h5() as h5:
        if os.path.isdir(case.dir) and meta.get("family") == "python":
            import sys
            sys.path.insert(0, case.dir)
        phase = caffe_pb2.TRAIN if meta.get("phase", "TRAIN") == "TRAIN" else caffe_pb2.TEST
        weights = "init.caffemodel" if os.path.exists("init.caffemodel") else None
        if "seed" in meta:
            caffecli.set_random_seed(meta["seed"])
        net = Net("net.prototxt", phase, weights=weights, log=False)
        for bname in h5["inputs"]:
            blob = net.blob_by_name(bname)
            arr = numpy.asarray(h5["inputs"][bname])
            if blob.shape != arr.shape:
                blob.reshape(arr.shape)
            blob.data[...] = arr
        loss = net.forward_pass()
        rt, at = case.rtol, case.atol
        for bname in h5["forward"]:
            if not net.has_blob(bname):
                assert "_split_" in bname, "blob %s missing" % bname
                continue
            assert_close(net.blob_by_name(bname).data, h5["forward"][bname],
                         rt, at, "%s forward %s" % (name, bname))
        if "loss" in h5:
            assert_close(loss, h5["loss"][()], rt, at, "%s loss" % name)
        if "param_data" in h5:
            for lname in h5["param_data"]:
                layer = net.layer_by_name(lname)
                for i in h5["param_data"][lname]:
                    assert_close(layer.blobs[int(i)].data,
                                 h5["param_data"][lname][i], rt, at,
                                 "%s param_data %s/%s" % (name, lname, i))
        if not meta.get("has_backward"):
            return net
        for bname in h5.get("top_diff", {}):
            net.blob_by_name(bname).diff[...] = h5["top_diff"][bname]
        net.clear_param_diffs()
        net.backward_pass()
        for bname in h5["backward"]:
            if not net.has_blob(bname):
                assert "_split_" in bname, "blob %s missing" % bname
                continue
            blob = net.blob_by_name(bname)
            bid = net.blob_names_index[bname]
            if not _receives_gradient(net, bid) and not numpy.any(h5["backward"][bname][()]):
                continue  # Caffe left it zero; we never touched it either way
            assert_close(blob.diff, h5["backward"][bname], rt, at,
                         "%s backward %s" % (name, bname))
        for lname in h5.get("param_diff", {}):
            layer = net.layer_by_name(lname)
            for i in h5["param_diff"][lname]:
                assert_close(layer.blobs[int(i)].diff,
                             h5["param_diff"][lname][i], rt, at,
                             "%s param_diff %s/%s" % (name, lname, i))
    return net


def _receives_gradient(net, bid):
    return any(rec.need_backward and need for rec in net.records
               for b, need in zip(rec.bottom_ids, rec.bottom_need_backward) if b == bid)
