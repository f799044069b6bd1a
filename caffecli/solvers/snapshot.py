"""Solver snapshots: weights + SolverState as binary proto or HDF5 (Caffe's layout), and a JSON
sidecar (``<state file>.caffecli``) with the random generator and data positions for exact resume.

Every file is written atomically (temporary file + rename). A state without a sidecar (made by
Caffe) restores as Caffe does: the data layers restart at their first record.
"""
import contextlib
import hashlib
import io
import json
import os

import numpy

from .. import backend, caffe_rng, context, glog
from ..blob import Blob, shape_string
from ..errors import CaffeError, first_line
from ..proto import caffe_pb2
from ..proto.io import read_binary, write_binary, write_bytes_atomic
from ..util.hdf5_class import note_dataset_class
from ..util.lazy import h5py

SIDECAR_SUFFIX = ".caffecli"
SIDECAR_FORMAT = "caffecli-resume-2"  # 2: the stream is mt19937 (caffe_rng)


# ---- writing ------------------------------------------------------------------------------
def snapshot(solver):
    """Caffe's Solver::Snapshot plus the sidecar; returns the paths written."""
    fmt = solver.param.snapshot_format
    write_diff = solver.param.snapshot_diff
    if fmt == caffe_pb2.SolverParameter.BINARYPROTO:
        model = solver.snapshot_filename(".caffemodel")
        glog.info("solver.snapshot_binary", "Snapshotting to binary proto file " + model)
        write_binary(model, solver.net.to_proto(write_diff))
        state = solver.snapshot_filename(".solverstate")
        glog.info("sgd_solver.snapshot_state_binary",
                  "Snapshotting solver state to binary proto file " + state)
        state_bytes = state_proto(solver, model).SerializeToString()
        write_bytes_atomic(state, state_bytes)
    elif fmt == caffe_pb2.SolverParameter.HDF5:
        model = solver.snapshot_filename(".caffemodel.h5")
        glog.info("solver.snapshot_hdf5", "Snapshotting to HDF5 file " + model)
        solver.net.save(model, write_diff)
        state = solver.snapshot_filename(".solverstate.h5")
        glog.info("sgd_solver.snapshot_state_hdf5",
                  "Snapshotting solver state to HDF5 file " + state)
        state_bytes = state_hdf5_bytes(solver, model)
        write_bytes_atomic(state, state_bytes)
    else:
        raise CaffeError("Unsupported snapshot format: %d" % fmt)
    sidecar = state + SIDECAR_SUFFIX
    side = sidecar_state(solver)
    side["state_sha256"] = hashlib.sha256(state_bytes).hexdigest()
    write_bytes_atomic(sidecar, json.dumps(side, cls=_Encoder, sort_keys=True).encode("utf-8"))
    glog.vlog(1, "snapshot.sidecar_saved", "Saved random and data positions to " + sidecar)
    return [model, state, sidecar]


def state_proto(solver, model_filename):
    state = caffe_pb2.SolverState()
    state.iter = solver.iter
    state.learned_net = model_filename
    state.current_step = solver.current_step
    for blob in solver.history_blobs():
        blob.to_proto(state.history.add())
    return state


def state_hdf5_bytes(solver, model_filename):
    buf = io.BytesIO()
    with h5py.File(buf, "w") as f:
        f.create_dataset("iter", data=numpy.array([solver.iter], dtype=numpy.int32))
        name = model_filename.encode("utf-8") + b"\0"   # Caffe stores the C string's NUL too
        f.create_dataset("learned_net", data=numpy.array(name, dtype="S%d" % len(name)))
        f.create_dataset("current_step", data=numpy.array([solver.current_step],
                                                          dtype=numpy.int32))
        group = f.create_group("history")
        for i, blob in enumerate(solver.history_blobs()):
            group.create_dataset(str(i), data=blob.cpu_data())
    return buf.getvalue()


def layer_states(net):
    """{layer name: data position} of the net's layers that report one (get_data_state)."""
    out = {}
    for name, layer in zip(net.layer_names, net.layers):
        getter = getattr(layer, "get_data_state", None)
        if callable(getter):
            out[name] = getter()
    return out


def sidecar_state(solver):
    return {
        "format": SIDECAR_FORMAT,
        "iter": solver.iter,
        "type": solver.type,
        "rng": context.rng_state(),
        "c_rand": list(caffe_rng.c_rand.state),
        "train_net": layer_states(solver.net),
        "test_nets": [layer_states(n) for n in solver.test_nets],
    }


# ---- reading ------------------------------------------------------------------------------
def restore(solver, state_file):
    """Caffe's Solver::Restore: HDF5 when the name ends in .h5, else binary; then the sidecar."""
    if not os.path.exists(state_file):
        raise CaffeError("%s: solver state file not found" % state_file)
    if state_file.endswith(".h5"):
        _restore_hdf5(solver, state_file)
    else:
        _restore_binary(solver, state_file)
    _restore_sidecar(solver, state_file)


def _learned_net_path(learned_net, state_file):
    """The weights file a state names: as written (relative to the working directory, as Caffe
    reads it), else beside the state file."""
    if isinstance(learned_net, bytes):
        learned_net = os.fsdecode(learned_net)
    if os.path.exists(learned_net):
        return learned_net
    beside = os.path.join(os.path.dirname(state_file), os.path.basename(learned_net))
    if os.path.exists(beside):
        return beside
    raise CaffeError("%s: the weights file it names, %r, was not found" % (state_file,
                                                                          learned_net))


def _check_history(solver, arrays, state_file):
    """The state's history blobs must be as many, and of the same shapes, as the solver's."""
    blobs = solver.history_blobs()
    if len(arrays) != len(blobs):
        raise CaffeError("%s: Incorrect length of history blobs (file has %d, the %s solver "
                         "needs %d)" % (state_file, len(arrays), solver.type, len(blobs)))
    for i, (arr, blob) in enumerate(zip(arrays, blobs)):
        if tuple(arr.shape) != tuple(blob.shape):
            raise CaffeError("%s: history blob %d has shape %s, the net's parameter has %s"
                             % (state_file, i, shape_string(arr.shape), blob.shape_string()))


def _check_counters(it, step, state_file):
    """A negative iter would train for ~2^31 iterations, a negative step index the stepvalues
    from the end: both are damage, not states Caffe writes."""
    for name, value in (("iter", it), ("current_step", step)):
        if value < 0:
            raise CaffeError("%s: %s is negative (%d)" % (state_file, name, value))


def _history_array(proto, i, state_file):
    shape = Blob.proto_shape(proto)
    values = proto.double_data or proto.data
    if min(shape, default=1) < 0 or len(values) != int(numpy.prod(shape)):
        raise CaffeError("%s: history blob %d holds %d values but its shape is %s"
                         % (state_file, i, len(values), " ".join(str(d) for d in shape)))
    return numpy.asarray(values, dtype=numpy.float64 if proto.double_data
                         else numpy.float32).reshape(shape)


def _restore_binary(solver, state_file):
    state = read_binary(state_file, caffe_pb2.SolverState(), "solver state")
    _check_counters(state.iter, state.current_step, state_file)
    solver.iter = state.iter
    if state.HasField("learned_net"):
        solver.net.copy_trained_layers_from(_learned_net_path(state.learned_net, state_file))
    solver.current_step = state.current_step
    arrays = [_history_array(p, i, state_file) for i, p in enumerate(state.history)]
    _check_history(solver, arrays, state_file)
    glog.info("sgd_solver.restoring_history", "SGDSolver: restoring history")
    solver.restore_history(arrays)


def _h5_dataset(f, key, state_file):
    """The array stored at ``key``; a group, a missing key or an unreadable dataset -> error."""
    obj = f.get(key)
    if not isinstance(obj, h5py.Dataset):
        raise CaffeError("%s: not a solver state ('%s' is %s)" % (
            state_file, key, "missing" if obj is None else "not a dataset"))
    return numpy.asarray(obj[()])


def _h5_int(f, key, state_file):
    arr = _h5_dataset(f, key, state_file)
    if arr.size != 1 or arr.dtype.kind not in "iu":
        raise CaffeError("%s: '%s' must hold one integer (found %s of shape %s)"
                         % (state_file, key, arr.dtype, arr.shape))
    return int(arr.reshape(-1)[0])


def _h5_text(f, key, state_file):
    raw = _h5_dataset(f, key, state_file)
    if raw.dtype.kind not in "SUO" or raw.size != 1:
        raise CaffeError("%s: '%s' must hold one string (found %s of shape %s)"
                         % (state_file, key, raw.dtype, raw.shape))
    value = raw.reshape(-1)[0]
    return (os.fsdecode(value) if isinstance(value, bytes) else str(value)).rstrip("\0")


def _read_hdf5_state(f, state_file):
    """(iter, learned_net or None, current_step, history arrays) from an open state file."""
    it = _h5_int(f, "iter", state_file)
    learned = _h5_text(f, "learned_net", state_file) if "learned_net" in f else None
    step = _h5_int(f, "current_step", state_file)
    group = f.get("history")
    if not isinstance(group, h5py.Group):
        raise CaffeError("%s: not a solver state ('history' is not a group)" % state_file)
    arrays = []
    for i in range(len(group)):
        arr = _h5_dataset(group, str(i), state_file)
        if arr.dtype.kind != "f":
            raise CaffeError("%s: history/%d holds %s, not floats" % (state_file, i, arr.dtype))
        arrays.append(arr)
    return it, learned, step, arrays


def _restore_hdf5(solver, state_file):
    try:
        with h5py.File(state_file, "r") as f:
            it, learned, step, arrays = _read_hdf5_state(f, state_file)
    except (OSError, RuntimeError, KeyError, ValueError, TypeError) as exc:  # corrupt HDF5
        raise CaffeError("%s: cannot read the solver state (corrupt or truncated HDF5: %s)"
                         % (state_file, first_line(exc))) from None
    _check_counters(it, step, state_file)
    solver.iter = it
    if learned is not None:
        solver.net.copy_trained_layers_from(_learned_net_path(learned, state_file))
    solver.current_step = step
    for arr in arrays:   # Caffe's history datasets, read after the weights
        note_dataset_class(arr.dtype.kind)
    _check_history(solver, arrays, state_file)
    solver.restore_history(arrays)


def _restore_sidecar(solver, state_file):
    """Restore rng and data positions from the sidecar written with ``state_file`` (if it is
    there and belongs to exactly that file)."""
    path = state_file + SIDECAR_SUFFIX
    if not os.path.exists(path):
        return False
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
        state = json.loads(text)
    except (OSError, ValueError) as exc:
        glog.warning("snapshot.sidecar_unreadable",
                     "Ignoring unreadable resume sidecar %s (%s)" % (path, exc))
        return False
    with open(state_file, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    mismatch = _sidecar_mismatch(state, solver.iter, digest)
    if mismatch:
        glog.warning("snapshot.sidecar_ignored",
                     "Ignoring resume sidecar %s: %s" % (path, mismatch))
        return False
    # it belongs to this state: what it holds must now be usable, or the resume is not exact
    with _field(path, "the file"):
        state = json.loads(text, object_hook=_decode)
    if state.get("rng") is not None:
        with _field(path, "rng"):
            context.set_rng_state(state["rng"])
    if state.get("c_rand") is not None:
        with _field(path, "c_rand"):
            words = [int(v) & 0xFFFFFFFF for v in state["c_rand"]]
            if len(words) != len(caffe_rng.c_rand.state):
                raise ValueError("%d words, not %d" % (len(words), len(caffe_rng.c_rand.state)))
            caffe_rng.c_rand.state = words
    nets = [("train_net", solver.net, state.get("train_net", {}))]
    with _field(path, "test_nets"):
        tests = list(state.get("test_nets", []))
        nets += [("test_nets[%d]" % i, n, tests[i]) for i, n in enumerate(solver.test_nets)
                 if i < len(tests)]
    for field, net, states in nets:
        with _field(path, field):
            items = states.items()
        for name, value in items:
            with _field(path, "%s, layer '%s'" % (field, name)):
                _set_layer_state(net, name, value)
    glog.vlog(1, "snapshot.sidecar_restored", "Restored random and data positions from " + path)
    return True


def _sidecar_mismatch(state, iteration, digest):
    """Why a sidecar does not belong to the state just restored (None when it does)."""
    if not isinstance(state, dict) or state.get("format") != SIDECAR_FORMAT:
        return "not a %s file" % SIDECAR_FORMAT
    if state.get("iter") != iteration:
        return "it is for iteration %s, the solver state for %d" % (state.get("iter"), iteration)
    if state.get("state_sha256") != digest:
        return "it was written with another solver state file (checksum differs)"
    return None


@contextlib.contextmanager
def _field(path, field):
    """Turn what bad sidecar contents raise into one CaffeError naming the file and field."""
    try:
        yield
    except CaffeError:
        raise
    except (TypeError, ValueError, KeyError, IndexError, OverflowError, AttributeError) as exc:
        raise CaffeError("%s: bad resume state in %s (%s: %s)"
                         % (path, field, type(exc).__name__, exc)) from None


def set_layer_states(net, states):
    """Resume the net's data layers at the positions layer_states reported."""
    for name, value in states.items():
        _set_layer_state(net, name, value)


def _set_layer_state(net, name, value):
    lid = net.layer_names_index.get(name)
    if lid is None:
        return
    setter = getattr(net.layers[lid], "set_data_state", None)
    if callable(setter):
        setter(value)


class _Encoder(json.JSONEncoder):
    """JSON for numpy values: arrays as tagged lists, scalars as Python numbers."""

    def default(self, o):
        if isinstance(o, numpy.ndarray) or backend.is_device_array(o):
            arr = backend.to_host(o)
            return {"__ndarray__": arr.tolist(), "dtype": str(arr.dtype),
                    "shape": list(arr.shape)}
        if isinstance(o, numpy.generic):
            return o.item()
        if isinstance(o, (set, tuple)):
            return list(o)
        if isinstance(o, bytes):
            return {"__bytes__": o.hex()}
        return super().default(o)


def _decode(obj):
    if "__ndarray__" in obj:
        return numpy.asarray(obj["__ndarray__"], dtype=obj["dtype"]).reshape(obj["shape"])
    if "__bytes__" in obj and len(obj) == 1:
        return bytes.fromhex(obj["__bytes__"])
    return obj
