"""Bad input found by fuzzing, one test per family: each ends with one ``caffecli: error:`` line
naming the file and the field, layer or blob at fault, exit 1, no traceback."""
import json
import time

import h5py
import numpy
import pytest

from caffecli import Net, TRAIN, glog
from caffecli.cli import errors as cli_errors
from caffecli.data import prefetch
from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text

from bad_input_helpers import assert_clean_end, make_workspace, run_command


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    folder = tmp_path_factory.mktemp("inputs")
    return folder, make_workspace(str(folder))


@pytest.fixture
def ws(workspace, tmp_path):
    """A private copy of the workspace (tests damage its files)."""
    import shutil
    folder, files = workspace
    shutil.copytree(folder, tmp_path / "w")
    return tmp_path / "w", files


def check(args, cwd, *needles):
    status, _, err = run_command(args, cwd)
    return assert_clean_end(status, err, needles)


# ---- LMDB ----------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [["compute_image_mean", "db"],
                                     ["time", "-model", "train.prototxt", "-iterations", "1"]])
def test_truncated_lmdb_is_reported_before_it_is_read(ws, command):
    folder, _ = ws
    data = folder / "db" / "data.mdb"
    data.write_bytes(data.read_bytes()[:-4096])
    check(command, folder, "db/data.mdb", "truncated")


# ---- solver state sidecars ------------------------------------------------------------------
@pytest.mark.parametrize("field, value, needle", [
    ("rng", [], "rng"),
    ("rng", {"bit_generator": "PCG64", "state": {"state": 2 ** 200, "inc": 1}}, "rng"),
    ("train_net", [1, 2], "train_net"),
    ("train_net", {"data": {"key": "zz"}}, "layer 'data'"),
    ("train_net", {"data": [0]}, "layer 'data'"),
    ("test_nets", 3, "test_nets"),
])
def test_sidecar_with_bad_contents_names_file_and_field(ws, field, value, needle):
    folder, files = ws
    sidecar = folder / (files["state_binaryproto"] + ".caffecli")
    state = json.loads(sidecar.read_text())
    state[field] = value
    sidecar.write_text(json.dumps(state))   # state_sha256 still matches the state file
    check(["train", "-solver", "resume.prototxt", "-snapshot", files["state_binaryproto"]],
          folder, sidecar.name, needle)


def test_learned_net_name_that_is_not_utf8(ws):
    folder, files = ws
    state = folder / files["state_binaryproto"]
    raw = state.read_bytes()
    name = files["model_binaryproto"].encode()
    state.write_bytes(raw.replace(name, name[:4] + b"\xff" + name[5:]))
    check(["train", "-solver", "resume.prototxt", "-snapshot", state.name], folder,
          state.name, "was not found")


# ---- HDF5 weights and states ----------------------------------------------------------------
def _rewrite_h5(path, edit):
    with h5py.File(path, "r+") as f:
        edit(f)


@pytest.mark.parametrize("damage, needle", [
    (lambda f: (f.__delitem__("data"), f.create_dataset("data", data=1.0)), "'data' group"),
    (lambda f: (f["data"].__delitem__("ip"), f["data"].create_dataset("ip", data=1.0)),
     "data/ip"),
    (lambda f: (f["data/ip"].__delitem__("0"),
                f["data/ip"].create_dataset("0", data=numpy.array([b"x"]))), "data/ip/0"),
])
def test_hdf5_weights_with_bad_contents(ws, damage, needle):
    folder, files = ws
    _rewrite_h5(folder / files["model_hdf5"], damage)
    check(["test", "-model", "deploy.prototxt", "-weights", files["model_hdf5"],
           "-iterations", "1"], folder, files["model_hdf5"], needle)


@pytest.mark.parametrize("cut", ["half", "header"])
def test_truncated_or_corrupt_hdf5_weights(ws, cut):
    folder, files = ws
    path = folder / files["model_hdf5"]
    raw = bytearray(path.read_bytes())
    if cut == "half":
        raw = raw[:len(raw) // 2]
    else:   # the superblock's addresses
        raw[24:40] = b"\xff" * 16
    path.write_bytes(bytes(raw))
    check(["test", "-model", "deploy.prototxt", "-weights", path.name, "-iterations", "1"],
          folder, path.name)


@pytest.mark.parametrize("damage, needle", [
    (lambda f: (f.__delitem__("iter"), f.create_dataset("iter", data=numpy.zeros(0, "i4"))),
     "'iter' must hold one integer"),
    (lambda f: (f.__delitem__("iter"), f.create_group("iter")), "'iter' is not a dataset"),
    (lambda f: (f.__delitem__("learned_net"), f.create_dataset("learned_net", data=[1, 2])),
     "'learned_net' must hold one string"),
    (lambda f: (f.__delitem__("history"), f.create_dataset("history", data=1)),
     "'history' is not a group"),
])
def test_hdf5_solverstate_with_bad_contents(ws, damage, needle):
    folder, files = ws
    _rewrite_h5(folder / files["state_hdf5"], damage)
    check(["train", "-solver", "resume.prototxt", "-snapshot", files["state_hdf5"]], folder,
          files["state_hdf5"], needle)


def test_truncated_hdf5_solverstate(ws):
    folder, files = ws
    path = folder / files["state_hdf5"]
    path.write_bytes(path.read_bytes()[:900])
    check(["train", "-solver", "resume.prototxt", "-snapshot", path.name], folder, path.name)


# ---- history shapes --------------------------------------------------------------------------
def test_swapped_history_shape_in_binary_state(ws):
    folder, files = ws
    path = folder / files["state_binaryproto"]
    state = caffe_pb2.SolverState.FromString(path.read_bytes())
    dims = list(state.history[0].shape.dim)
    assert dims == [3, 16]
    state.history[0].shape.dim[:] = dims[::-1]
    path.write_bytes(state.SerializeToString())
    check(["train", "-solver", "resume.prototxt", "-snapshot", path.name], folder, path.name,
          "history blob 0", "16 3 (48)", "3 16 (48)")


def test_swapped_history_shape_in_hdf5_state(ws):
    folder, files = ws

    def swap(f):
        values = numpy.asarray(f["history/0"])
        del f["history/0"]
        f.create_dataset("history/0", data=values.T)
    _rewrite_h5(folder / files["state_hdf5"], swap)
    check(["train", "-solver", "resume.prototxt", "-snapshot", files["state_hdf5"]], folder,
          "history blob 0", "16 3 (48)")


@pytest.mark.parametrize("field", ["iter", "current_step"])
def test_negative_counters_in_a_state(ws, field):
    folder, files = ws
    path = folder / files["state_binaryproto"]
    state = caffe_pb2.SolverState.FromString(path.read_bytes())
    setattr(state, field, -5)
    path.write_bytes(state.SerializeToString())
    check(["train", "-solver", "resume.prototxt", "-snapshot", path.name], folder, path.name,
          "%s is negative (-5)" % field)


def test_history_values_that_do_not_fill_the_shape(ws):
    folder, files = ws
    path = folder / files["state_binaryproto"]
    state = caffe_pb2.SolverState.FromString(path.read_bytes())
    state.history[1].shape.dim[:] = [2]
    path.write_bytes(state.SerializeToString())
    check(["train", "-solver", "resume.prototxt", "-snapshot", path.name], folder, path.name,
          "history blob 1 holds 3 values")


# ---- records, weights, solver values, flags ---------------------------------------------------
def test_datum_with_negative_dimensions(tmp_path):
    from caffecli.data import db as db_mod
    with db_mod.open_writer(str(tmp_path / "neg"), "lmdb") as w:
        w.put("00000000", caffe_pb2.Datum(channels=-1, height=-2, width=3,
                                          data=bytes(6)).SerializeToString())
    check(["compute_image_mean", "neg"], tmp_path, "neg record 00000000", "-1x-2x3")


def test_zero_length_caffemodel(ws):
    folder, _ = ws
    (folder / "empty.caffemodel").write_bytes(b"")
    check(["test", "-model", "deploy.prototxt", "-weights", "empty.caffemodel"], folder,
          "empty.caffemodel", "empty")


def test_iter_size_zero(ws):
    folder, _ = ws
    (folder / "s.prototxt").write_text((folder / "resume.prototxt").read_text()
                                       + "iter_size: 0\n")
    check(["train", "-solver", "s.prototxt"], folder, "s.prototxt", "iter_size")


@pytest.mark.parametrize("value", ["-1", "0"])
def test_test_iterations_must_be_positive(ws, value):
    folder, files = ws
    check(["test", "-model", "deploy.prototxt", "-weights", files["model_binaryproto"],
           "-iterations", value], folder, "-iterations", value)


def test_newline_in_a_path_stays_in_the_one_line(tmp_path):
    line = check(["time", "-model", "a\nb.prototxt"], tmp_path)
    assert "a\\nb.prototxt" in line


def test_releasing_a_database_while_another_opens_does_not_deadlock(tmp_path):
    """Opening an LMDB can run the garbage collector, which can close a dead Data layer's
    cursor (releasing its handle) inside the open: the handle table must allow that."""
    import threading
    from caffecli.data import db as db_mod
    from data_helpers import write_datum_db
    for name in ("a", "b"):
        write_datum_db(str(tmp_path / name), numpy.zeros((1, 1, 2, 2)))
    first = db_mod.open_reader(str(tmp_path / "a"), "lmdb")

    def open_second():
        first.close()   # what a finalizer run by the collector does
        return db_mod._open_lmdb(str(tmp_path / "b"))
    done = []
    worker = threading.Thread(target=lambda: done.append(
        db_mod._acquire("lmdb", str(tmp_path / "b"), open_second)), daemon=True)
    worker.start()
    worker.join(10)
    assert done, "deadlock: releasing a handle inside an open blocked"
    db_mod._release(done[0][0])


def test_the_error_is_the_last_line_even_with_a_prefetch_thread_logging(capsys):
    """A data thread that logs on must be stopped before the error line is printed."""
    def produce():
        glog.info("data.restarting", "Restarting data prefetching from start.")
        time.sleep(0.001)
        return 0

    def fail():
        prefetch.Prefetcher(produce, name="fuzz").start()
        time.sleep(0.05)
        raise CaffeError("the failure")
    saved = glog.snapshot_config()
    try:
        assert cli_errors.run_guarded(fail, debug=False) == 1
        time.sleep(0.05)
        glog.info("data.restarting", "after the error")
    finally:
        glog.restore_config(saved)
    lines = capsys.readouterr().err.splitlines()
    assert "Restarting data prefetching from start." in lines[0]
    assert lines[-1] == "caffecli: error: the failure"


def test_a_helpers_error_names_the_layer():
    """A filler does not know its layer; the error still names it (one line, exit 1)."""
    text = '''layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 } } }
layer { name: "b" type: "Bias" bottom: "x" top: "y"
        bias_param { axis: 0 num_axes: 0 filler { type: "xavier" } } }'''
    with pytest.raises(CaffeError, match=r"^Layer b \(Bias\): xavier filler needs a blob"):
        Net(parse_text(text, caffe_pb2.NetParameter()), TRAIN, log=False)


def test_layer_name_in_weights_that_is_not_utf8(ws):
    """protobuf hands such a name over as bytes: the layer is ignored, as Caffe ignores a name
    the net lacks, and the log shows it with a replacement character."""
    folder, files = ws
    model = folder / files["model_binaryproto"]
    raw = model.read_bytes()
    assert raw.count(b"\x0a\x02ip") == 1           # LayerParameter.name = "ip"
    model.write_bytes(raw.replace(b"\x0a\x02ip", b"\x0a\x02i\xff"))
    status, _, err = run_command(["test", "-model", "deploy.prototxt", "-weights", model.name,
                                  "-iterations", "1"], folder)
    assert status == 0, err[-2000:]
    assert "Ignoring source layer i\ufffd" in err


def _net_text(text):
    return Net(parse_text(text, caffe_pb2.NetParameter()), TRAIN, log=False)


@pytest.mark.parametrize("shape", ["", "input_param { shape { dim: 2 dim: 0 } }"])
def test_reading_a_blob_that_never_held_values(shape):
    """Caffe allocates on the first shape with values and aborts ('Check failed: data_') on
    reading a blob that never had one; caffecli raises one line. Once it has held values, a
    count of 0 reads as an empty array, as in Caffe."""
    net = _net_text('layer { name: "in" type: "Input" top: "x" %s }' % shape)
    with pytest.raises(CaffeError, match=r"never held values: it has no data .*data_"):
        net.blobs["x"].data
    with pytest.raises(CaffeError, match=r"never held values: it has no diff .*diff_"):
        net.blobs["x"].diff
    net.blobs["x"].reshape(2, 3)
    assert net.blobs["x"].data.shape == (2, 3)
    net.blobs["x"].reshape(0, 3)
    assert net.blobs["x"].data.shape == (0, 3)


def test_a_layer_reading_a_blob_without_values_names_itself():
    text = ('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 0 } } }\n'
            'layer { name: "sm" type: "Softmax" bottom: "x" top: "y" }')
    with pytest.raises(CaffeError, match=r"^Layer sm \(Softmax\): a blob of shape 2 0 \(0\) "
                                         r"has never held values"):
        _net_text(text).forward_pass()


def test_batch_norm_of_a_0_axis_blob():
    text = ('layer { name: "in" type: "Input" top: "x" input_param { shape { } } }\n'
            'layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" }')
    with pytest.raises(CaffeError, match=r"^Layer bn \(BatchNorm\): axis 1 out of range for "
                                         r"0-D blob with shape \(1\)"):
        _net_text(text)


def test_batch_norm_of_a_batch_without_values_per_channel():
    """A blob that held values may be reshaped to none (as in Caffe): BatchNorm then has no
    mean to take, and says so."""
    text = ('layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 3 dim: 4 '
            'dim: 2 dim: 3 } } }\nlayer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" }')
    net = _net_text(text)
    net.forward_pass()
    net.blobs["x"].reshape(3, 4, 0, 3)
    with pytest.raises(CaffeError, match=r"^Layer bn \(BatchNorm\): no values per channel to "
                                         r"normalize \(3 items of 0 values each\)"):
        net.forward_pass()


EMPTY_BATCH = '''
layer { name: "in" type: "Input" top: "x" top: "sel" top: "lab"
  input_param { shape { dim: 4 dim: 3 dim: 4 dim: 4 } shape { dim: 4 } shape { dim: 4 } } }
layer { name: "s" type: "Scale" bottom: "x" top: "xs"
  scale_param { axis: 1 num_axes: 1 filler { value: 1 } } }
layer { name: "f" type: "Filter" bottom: "xs" bottom: "lab" bottom: "sel" top: "fx" top: "flab"
  propagate_down: true propagate_down: false propagate_down: false }
'''


def _filtered_net(layer):
    """A Filter whose selector keeps no item feeds ``layer`` (the first reshape gives the
    full batch, as Caffe's does, so the blobs held values before they are emptied)."""
    net = _net_text(EMPTY_BATCH + layer)
    net.blobs["x"].data[...] = numpy.random.RandomState(0).rand(4, 3, 4, 4)
    net.blobs["sel"].data[...] = 0
    return net


@pytest.mark.parametrize("layer, top_shape", [
    ('layer { name: "d" type: "Deconvolution" bottom: "fx" top: "y" loss_weight: 1 '
     'convolution_param { num_output: 2 kernel_size: 3 weight_filler { type: "xavier" } '
     'bias_filler { type: "constant" value: 1 } } }', (0, 2, 6, 6)),
    ('layer { name: "fl" type: "Flatten" bottom: "fx" top: "ffl" }\n'
     'layer { name: "p" type: "Power" bottom: "ffl" top: "ffl2" }\n'
     'layer { name: "y" type: "ContrastiveLoss" bottom: "ffl" bottom: "ffl2" bottom: "flab" '
     'top: "y" }', ()),
    ('layer { name: "spp" type: "SPP" bottom: "fx" top: "y" loss_weight: 1 '
     'spp_param { pyramid_height: 2 } }', (0, 15)),
])
@pytest.mark.filterwarnings("ignore:invalid value")
def test_an_empty_batch_runs_where_caffe_loops_over_no_items(layer, top_shape):
    net = _filtered_net(layer)
    net.forward_pass()
    net.backward_pass()
    assert net.blobs["fx"].shape == (0, 3, 4, 4) and net.blobs["y"].shape == top_shape
    assert (net.params["s"][0].diff == 0).all()


def test_an_empty_batch_that_caffe_divides_by_is_one_error():
    """Caffe's HingeLoss computes count / num in int: a batch of 0 is its SIGFPE, caffecli's
    one line naming the layer and the blob."""
    net = _filtered_net('layer { name: "h" type: "HingeLoss" bottom: "fx" bottom: "flab" '
                        'top: "y" propagate_down: true propagate_down: false }')
    with pytest.raises(CaffeError, match=r"^Layer h \(HingeLoss\): cannot forward a bottom with "
                                         r"no values \(shape 0 3 4 4 \(0\)\): ZeroDivision"):
        net.forward_pass()


EMPTY_IN_TEST = '''name: "only_train"
layer { name: "x" type: "Input" top: "x" include { phase: TRAIN }
  input_param { shape { dim: 2 dim: 3 } } }
layer { name: "r" type: "ReLU" bottom: "x" top: "y" include { phase: TRAIN } }
'''


def test_a_net_its_rules_leave_empty_is_refused_when_run(tmp_path):
    """Caffe builds it and aborts on running it ('Check failed: end < layers_.size()')."""
    net = Net(parse_text(EMPTY_IN_TEST, caffe_pb2.NetParameter()), caffe_pb2.TEST,
              stages=["deploy"], log=False)
    assert net.blob_names == []
    needle = (r"net 'only_train' has no layers to run in phase TEST, level 0, stages \[deploy\]: "
              r"its include/exclude rules leave none")
    for run in (net.forward_pass, net.backward_pass):
        with pytest.raises(CaffeError, match=needle):
            run()
    (tmp_path / "net.prototxt").write_text(EMPTY_IN_TEST)
    check(["time", "-model", "net.prototxt", "-phase", "TEST", "-iterations", "1"], tmp_path,
          "has no layers to run in phase TEST")


def test_a_layer_that_would_reshape_its_bottom_in_place_is_refused():
    """Caffe lets a Reduction (or any layer that reshapes) write in place and goes on with the
    bottom cut to one value; caffecli's layers upstream then failed in backward."""
    text = ('layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 3 dim: 4 } } }\n'
            'layer { name: "s" type: "Scale" bottom: "x" top: "c" }\n'
            'layer { name: "r" type: "Reduction" bottom: "c" top: "c" }')
    with pytest.raises(CaffeError, match=r"^Layer r \(Reduction\) cannot compute in place: it "
                                         r"reshapes its bottom and top 'c' from 3 4 \(12\) to "
                                         r"\(1\); give the top a name of its own$"):
        _net_text(text)
    net = _net_text(text.replace('bottom: "c" top: "c"', 'bottom: "c" top: "r"'))
    assert net.blobs["c"].shape == (3, 4) and net.blobs["r"].shape == ()
