"""Solver snapshots: weights + SolverState as binary proto or HDF5 (Caffe's layout), and a JSON
sidecar (``<state file>.caffecli``) with the random generator and data positions for exact resume.

Every file is written atomically (temporary file + rename). A state without a sidecar (made by
Caffe) restores as Caffe does: the data layers restart at their first record.
"""
import hashlib
import io
import json
import os

import numpy

from .. import backend, context, glog
from ..errors import CaffeError
from ..proto import caffe_pb2
from ..proto.io import read_binary, write_binary, write_bytes_atomic

SIDECAR_SUFFIX = ".caffecli"
SIDECAR_FORMAT = "caffecli-resume-1"


# ---- writing ------------------------------------------------------------------------------
def snapshot(solver):
    """Caffe's Solver::Snapshot plus the sidecar; returns the paths written."""
    fmt = solver.param.snapshot_format
    write_diff = solver.param.snapshot_diff
    if fmt == caffe_pb2.SolverParameter.BINARYPROTO:
        model = solver.snapshot_filename(".caffemodel")
        glog.info("solver.cpp:464", "Snapshotting to binary proto file " + model)
        write_binary(model, solver.net.to_proto(write_diff))
        state = solver.snapshot_filename(".solverstate")
        glog.info("sgd_solver.cpp:284", "Snapshotting solver state to binary proto file " + state)
        state_bytes = state_proto(solver, model).SerializeToString()
        write_bytes_atomic(state, state_bytes)
    elif fmt == caffe_pb2.SolverParameter.HDF5:
        model = solver.snapshot_filename(".caffemodel.h5")
        glog.info("solver.cpp:474", "Snapshotting to HDF5 file " + model)
        solver.net.save(model, write_diff)
        state = solver.snapshot_filename(".solverstate.h5")
        glog.info("sgd_solver.cpp:296", "Snapshotting solver state to HDF5 file " + state)
        state_bytes = state_hdf5_bytes(solver, model)
        write_bytes_atomic(state, state_bytes)
    else:
        raise CaffeError("Unsupported snapshot format: %d" % fmt)
    sidecar = state + SIDECAR_SUFFIX
    side = sidecar_state(solver)
    side["state_sha256"] = hashlib.sha256(state_bytes).hexdigest()
    write_bytes_atomic(sidecar, json.dumps(side, cls=_Encoder, sort_keys=True).encode("utf-8"))
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
    import h5py
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
    if os.path.exists(learned_net):
        return learned_net
    beside = os.path.join(os.path.dirname(state_file), os.path.basename(learned_net))
    if os.path.exists(beside):
        return beside
    raise CaffeError("%s: the weights file it names, %s, was not found" % (state_file,
                                                                          learned_net))


def _restore_binary(solver, state_file):
    state = read_binary(state_file, caffe_pb2.SolverState(), "solver state")
    solver.iter = state.iter
    if state.HasField("learned_net"):
        solver.net.copy_trained_layers_from(_learned_net_path(state.learned_net, state_file))
    solver.current_step = state.current_step
    from ..blob import Blob
    arrays = []
    for proto in state.history:
        values = proto.double_data or proto.data
        arrays.append(numpy.asarray(values, dtype=numpy.float64 if proto.double_data
                                    else numpy.float32).reshape(Blob.proto_shape(proto)))
    if len(arrays) != len(solver.history_blobs()):
        raise CaffeError("%s: Incorrect length of history blobs (file has %d, the %s solver "
                         "needs %d)" % (state_file, len(arrays), solver.type,
                                        len(solver.history_blobs())))
    glog.info("sgd_solver.cpp:336", "SGDSolver: restoring history")
    solver.restore_history(arrays)


def _restore_hdf5(solver, state_file):
    import h5py
    try:
        f = h5py.File(state_file, "r")
    except OSError:
        raise CaffeError("Couldn't open solver state file " + state_file) from None
    with f:
        for key in ("iter", "current_step", "history"):
            if key not in f:
                raise CaffeError("%s: not a solver state (no '%s')" % (state_file, key))
        solver.iter = int(numpy.asarray(f["iter"]).reshape(-1)[0])
        if "learned_net" in f:
            raw = f["learned_net"][()]
            name = raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)
            name = name.rstrip("\0")
            solver.net.copy_trained_layers_from(_learned_net_path(name, state_file))
        solver.current_step = int(numpy.asarray(f["current_step"]).reshape(-1)[0])
        group = f["history"]
        if len(group) != len(solver.history_blobs()):
            raise CaffeError("%s: Incorrect length of history blobs (file has %d, the %s "
                             "solver needs %d)" % (state_file, len(group), solver.type,
                                                   len(solver.history_blobs())))
        arrays = []
        for i in range(len(group)):
            if str(i) not in group:
                raise CaffeError("%s: history/%d missing" % (state_file, i))
            arrays.append(numpy.asarray(group[str(i)]))
    solver.restore_history(arrays)


def _restore_sidecar(solver, state_file):
    """Restore rng and data positions from the sidecar written with ``state_file`` (if it is
    there and belongs to exactly that file)."""
    path = state_file + SIDECAR_SUFFIX
    if not os.path.exists(path):
        return False
    try:
        with open(path, "rb") as f:
            state = json.loads(f.read().decode("utf-8"), object_hook=_decode)
    except (OSError, ValueError) as exc:
        glog.warning("snapshot.py", "Ignoring unreadable resume sidecar %s (%s)" % (path, exc))
        return False
    with open(state_file, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    if (state.get("format") != SIDECAR_FORMAT or state.get("iter") != solver.iter
            or state.get("state_sha256") != digest):
        glog.warning("snapshot.py", "Ignoring resume sidecar %s: it does not match the solver "
                     "state (iteration %s, expected %d)" % (path, state.get("iter"), solver.iter))
        return False
    if state.get("rng") is not None:
        context.set_rng_state(state["rng"])
    set_layer_states(solver.net, state.get("train_net", {}))
    for net, states in zip(solver.test_nets, state.get("test_nets", [])):
        set_layer_states(net, states)
    return True


def set_layer_states(net, states):
    """Resume the net's data layers at positions ``layer_states`` reported."""
    for name, value in states.items():
        lid = net.layer_names_index.get(name)
        if lid is None:
            continue
        setter = getattr(net.layers[lid], "set_data_state", None)
        if callable(setter):
            setter(value)


class _Encoder(json.JSONEncoder):
    """JSON for numpy values: arrays as tagged lists, scalars as Python numbers."""

    def default(self, o):
        if isinstance(o, numpy.ndarray) or type(o).__module__.startswith("cupy"):
            arr = numpy.asarray(backend.to_host(o))
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
