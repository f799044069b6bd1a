"""Data and ImageData layers: order, wrap-around, errors, exact resume, OpenCV pixels."""

import gc
import re
import weakref

import numpy
import pytest

import caffecli
from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2
from data_helpers import close_net, data_net, write_datum_db, write_png

RS = numpy.random.RandomState(3)
ARRAYS = [RS.randint(0, 256, size=(2, 5, 4)) for _ in range(7)]


def _data_layer(path, batch=3, extra="", backend="LMDB", tops=('top: "data" top: "label"')):
    return data_net('name: "d" type: "Data" %s %s data_param { source: "%s" backend: %s '
                    'batch_size: %d }' % (tops, extra, path, backend, batch))


@pytest.mark.parametrize("backend", ["lmdb", "leveldb"])
def test_data_layer_order_and_wrap(tmp_path, backend):
    path = write_datum_db(str(tmp_path / "db"), ARRAYS, backend=backend)
    net = _data_layer(path, 3, backend=backend.upper())
    seen = []
    for _ in range(4):            # 12 records from 7: wraps to the start
        net.forward_pass()
        seen.extend(net.blob_by_name("label").data.astype(int).tolist())
        first = int(net.blob_by_name("label").data[0])
        numpy.testing.assert_array_equal(net.blob_by_name("data").data[0], ARRAYS[first])
    assert seen == [0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4]
    close_net(net)


def test_a_dropped_net_closes_its_database_at_once(tmp_path):
    """Caffe's ~Net stops the prefetch thread and closes the database: a net dropped without
    the cyclic collector (a notebook rebuilding its net) must not keep LevelDB's lock."""
    path = write_datum_db(str(tmp_path / "db"), ARRAYS, backend="leveldb")
    gc.disable()
    try:
        net = _data_layer(path, 3, backend="LEVELDB")
        net.forward_pass()
        layer = weakref.ref(net.layers[0])
        del net
        assert layer() is None
        net = _data_layer(path, 3, backend="LEVELDB")     # LevelDB's lock is free again
        net.forward_pass()
        assert net.blob_by_name("label").data.tolist() == [0, 1, 2]
        close_net(net)
    finally:
        gc.enable()


def test_a_data_layer_that_fails_to_set_up_closes_its_database(tmp_path):
    """A crop larger than the records fails at setup, after the database opened: the error
    names the layer once, and the database is closed, so a corrected net can open it."""
    path = write_datum_db(str(tmp_path / "db"), ARRAYS, backend="leveldb")
    gc.disable()
    try:
        with pytest.raises(CaffeError) as err:
            _data_layer(path, 3, backend="LEVELDB", extra="transform_param { crop_size: 6 }")
        assert str(err.value).count("Layer d (Data)") == 1 and "crop_size 6" in str(err.value)
        del err
        net = _data_layer(path, 3, backend="LEVELDB")
        net.forward_pass()
        close_net(net)
    finally:
        gc.enable()


def test_data_layer_single_top_and_float_data(tmp_path):
    arrays = [a.astype(numpy.float32) / 7 for a in ARRAYS]
    path = write_datum_db(str(tmp_path / "db"), arrays, floats=True)
    net = _data_layer(path, 2, 'transform_param { scale: 3 }', tops='top: "data"')
    net.forward_pass()
    assert net.blob_by_name("data").shape == (2, 2, 5, 4)
    numpy.testing.assert_allclose(net.blob_by_name("data").data[1], arrays[1] * 3, rtol=1e-6)
    close_net(net)


def test_missing_database_is_one_line_error(tmp_path):
    with pytest.raises(CaffeError) as e:
        _data_layer(str(tmp_path / "nope"))
    assert "nope" in str(e.value) and "\n" not in str(e.value)


def test_missing_leveldb_is_error(tmp_path):
    with pytest.raises(CaffeError, match="nope"):
        _data_layer(str(tmp_path / "nope"), backend="LEVELDB")


def test_datum_size_mismatch_names_record(tmp_path):
    arrays = ARRAYS[:2] + [numpy.zeros((2, 4, 4))]
    path = write_datum_db(str(tmp_path / "db"), arrays)
    net = _data_layer(path, 3)
    with pytest.raises(CaffeError) as e:
        net.forward_pass()
    assert "00000002" in str(e.value) and "2x4x4" in str(e.value)
    close_net(net)


def test_undecodable_encoded_datum_is_error(tmp_path):
    from caffecli.data import db as db_mod
    path = str(tmp_path / "db")
    with db_mod.open_writer(path, "lmdb") as w:
        w.put("00000000", caffe_pb2.Datum(data=b"not an image", encoded=True).SerializeToString())
    with pytest.raises(CaffeError, match="00000000.*decode"):
        _data_layer(path, 1)


def test_mean_file_shape_mismatch_is_error(tmp_path):
    from caffecli.proto.io import write_binary
    path = write_datum_db(str(tmp_path / "db"), ARRAYS)
    mean = caffe_pb2.BlobProto(num=1, channels=2, height=3, width=3)
    mean.data.extend([0.0] * 18)
    write_binary(str(tmp_path / "mean.bp"), mean)
    net = _data_layer(path, 2, 'transform_param { mean_file: "%s" }' % (tmp_path / "mean.bp"))
    with pytest.raises(CaffeError, match="mean file.*2x3x3.*2x5x4"):
        net.forward_pass()
    close_net(net)


def _train_net(path, batch=2, prefetch=4):
    return data_net('name: "d" type: "Data" top: "data" top: "label" transform_param '
                    '{ crop_size: 3 mirror: true } data_param { source: "%s" backend: LMDB '
                    'batch_size: %d prefetch: %d }' % (path, batch, prefetch),
                    phase=caffe_pb2.TRAIN)


def test_data_state_resumes_exactly_despite_read_ahead(tmp_path):
    """State after k batches restores the (k+1)-th batch, random crops and mirrors included."""
    path = write_datum_db(str(tmp_path / "db"), ARRAYS)
    caffecli.set_random_seed(11)
    a = _train_net(path)
    for _ in range(3):
        a.forward_pass()
    import time
    time.sleep(0.2)                       # let the thread read several batches ahead
    state = a.layers[0].get_data_state()
    want = []
    for _ in range(4):
        a.forward_pass()
        want.append((a.blob_by_name("data").data.copy(), a.blob_by_name("label").data.copy()))
    caffecli.set_random_seed(99)          # a different net, its own random streams
    b = _train_net(path, prefetch=2)
    b.forward_pass()
    b.layers[0].set_data_state(state)
    for data, label in want:
        b.forward_pass()
        numpy.testing.assert_array_equal(b.blob_by_name("label").data, label)
        numpy.testing.assert_array_equal(b.blob_by_name("data").data, data)
    close_net(a)
    close_net(b)


def test_data_state_is_json_serializable(tmp_path):
    import json
    from caffecli.solvers import snapshot
    path = write_datum_db(str(tmp_path / "db"), ARRAYS)
    net = _train_net(path)
    net.forward_pass()
    text = json.dumps(net.layers[0].get_data_state(), cls=snapshot._Encoder)
    assert "key" in text
    close_net(net)


def test_data_layer_ignores_rand_skip_as_caffe_does(tmp_path):
    """Caffe's Data layer stopped reading the deprecated rand_skip (data_layer.cpp): every run
    starts at the first record, whatever the seed."""
    path = write_datum_db(str(tmp_path / "db"), ARRAYS)
    firsts = set()
    for seed in range(6):
        caffecli.set_random_seed(seed)
        net = data_net('name: "d" type: "Data" top: "data" top: "label" data_param { source: '
                       '"%s" backend: LMDB batch_size: 1 rand_skip: 4 }' % path)
        net.forward_pass()
        firsts.add(int(net.blob_by_name("label").data[0]))
        close_net(net)
    assert firsts == {0}


# ---- ImageData ---------------------------------------------------------------------------
RGB = numpy.array([[[255, 0, 0], [0, 255, 0], [0, 0, 255]],
                   [[10, 20, 30], [40, 50, 60], [70, 80, 90]]], dtype=numpy.uint8)  # 2x3 RGB


def _image_net(listfile, extra="", batch=1):
    return data_net('name: "d" type: "ImageData" top: "data" top: "label" %s '
                    'image_data_param { source: "%s" batch_size: %d %s }'
                    % ("", listfile, batch, extra))


def test_png_pixels_come_in_bgr_order(tmp_path):
    write_png(str(tmp_path / "a.png"), RGB)
    (tmp_path / "list.txt").write_text("a.png 7\n")
    net = _image_net(tmp_path / "list.txt", 'root_folder: "%s/"' % tmp_path)
    net.forward_pass()
    data = net.blob_by_name("data").data
    assert data.shape == (1, 3, 2, 3)
    numpy.testing.assert_array_equal(data[0], RGB[:, :, ::-1].transpose(2, 0, 1))
    assert net.blob_by_name("label").data[0] == 7
    close_net(net)


def test_gray_png_in_colour_is_replicated_and_resize_is_inter_linear(tmp_path):
    write_png(str(tmp_path / "g.png"), numpy.array([[0, 100], [100, 200]]))
    (tmp_path / "list.txt").write_text("%s 1\n" % (tmp_path / "g.png"))
    net = _image_net(tmp_path / "list.txt", "new_height: 4 new_width: 4")
    net.forward_pass()
    want = numpy.array([[0, 25, 75, 100], [25, 50, 100, 125],
                        [75, 100, 150, 175], [100, 125, 175, 200]], dtype=numpy.float32)
    data = net.blob_by_name("data").data
    for c in range(3):
        numpy.testing.assert_array_equal(data[0, c], want)
    close_net(net)


def test_is_color_false_gives_one_channel(tmp_path):
    write_png(str(tmp_path / "a.png"), RGB)
    (tmp_path / "list.txt").write_text("%s 0\n" % (tmp_path / "a.png"))
    net = _image_net(tmp_path / "list.txt", "is_color: false")
    net.forward_pass()
    assert net.blob_by_name("data").shape == (1, 1, 2, 3)
    close_net(net)


def test_empty_list_file_is_error(tmp_path):
    (tmp_path / "list.txt").write_text("")
    with pytest.raises(CaffeError, match="list.txt.*empty"):
        _image_net(tmp_path / "list.txt")


def test_blank_list_line_is_an_image_that_cannot_be_read(tmp_path, capsys):
    """As in Caffe (a blank line names the file ""), not a line to skip; io.cpp's error line
    comes first, as ReadImageToCVMat logs it before ImageData gives up."""
    from caffecli import glog
    glog.set_stream(None)
    (tmp_path / "list.txt").write_text("\n")
    with pytest.raises(CaffeError, match="could not open or find image"):
        _image_net(tmp_path / "list.txt")
    assert "io.cpp:80] Could not open or find file " in capsys.readouterr().err


def test_undecodable_image_is_error(tmp_path):
    (tmp_path / "bad.png").write_bytes(b"garbage")
    (tmp_path / "list.txt").write_text("%s 0\n" % (tmp_path / "bad.png"))
    with pytest.raises(CaffeError, match="bad.png.*decode"):
        _image_net(tmp_path / "list.txt")


def test_missing_image_in_later_batch_is_error(tmp_path):
    write_png(str(tmp_path / "a.png"), RGB)
    (tmp_path / "list.txt").write_text("%s 0\n%s 1\n" % (tmp_path / "a.png", tmp_path / "b.png"))
    net = _image_net(tmp_path / "list.txt", batch=2)
    with pytest.raises(CaffeError, match="b.png"):
        net.forward_pass()
    close_net(net)


def test_imagedata_shuffle_covers_every_image_each_epoch_and_resumes(tmp_path):
    lines = []
    for i in range(5):
        write_png(str(tmp_path / ("%d.png" % i)), numpy.full((2, 2), i * 10))
        lines.append("%s %d" % (tmp_path / ("%d.png" % i), i))
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    caffecli.set_random_seed(5)
    net = _image_net(tmp_path / "list.txt", "shuffle: true is_color: false", batch=5)
    epochs = []
    for _ in range(3):
        net.forward_pass()
        epochs.append(net.blob_by_name("label").data.astype(int).tolist())
    assert all(sorted(e) == [0, 1, 2, 3, 4] for e in epochs)
    assert len({tuple(e) for e in epochs}) > 1      # reshuffled at the wrap
    state = net.layers[0].get_data_state()
    net.forward_pass()
    nxt = net.blob_by_name("label").data.copy()
    net.layers[0].set_data_state(state)
    net.forward_pass()
    numpy.testing.assert_array_equal(net.blob_by_name("label").data, nxt)
    close_net(net)


def test_convert_imageset_then_data_equals_imagedata(tmp_path):
    from caffecli.tools import convert_imageset
    rs = numpy.random.RandomState(0)
    lines = []
    for i in range(4):
        write_png(str(tmp_path / ("im%d.png" % i)), rs.randint(0, 256, size=(7, 9, 3)))
        lines.append("im%d.png %d" % (i, i + 3))
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    root = str(tmp_path) + "/"
    for encoded in (False, True):
        db = str(tmp_path / ("db%d" % encoded))
        n = convert_imageset.run(root, str(tmp_path / "list.txt"), db, resize_height=5,
                                 resize_width=6, encoded=encoded, encode_type="png" if encoded
                                 else "")
        assert n == 4
        tp = "transform_param { scale: 0.5 mean_value: 10 mean_value: 20 mean_value: 30 }"
        a = data_net('name: "d" type: "Data" top: "data" top: "label" %s data_param { source: '
                     '"%s" backend: LMDB batch_size: 3 }' % (tp, db))
        b = data_net('name: "d" type: "ImageData" top: "data" top: "label" %s image_data_param '
                     '{ source: "%s" root_folder: "%s" batch_size: 3 new_height: 5 '
                     'new_width: 6 }' % (tp, tmp_path / "list.txt", root))
        for _ in range(3):
            a.forward_pass()
            b.forward_pass()
            numpy.testing.assert_array_equal(a.blob_by_name("data").data,
                                             b.blob_by_name("data").data)
            numpy.testing.assert_array_equal(a.blob_by_name("label").data,
                                             b.blob_by_name("label").data)
        close_net(a)
        close_net(b)


def test_image_data_rand_skip_says_how_many_it_skips(tmp_path, capsys):
    """ImageData still honours rand_skip, with image_data_layer.cpp's line."""
    from caffecli import glog
    glog.set_stream(None)
    write_png(str(tmp_path / "a.png"), RGB)
    (tmp_path / "list.txt").write_text("".join("a.png %d\n" % i for i in range(6)))
    net = _image_net(tmp_path / "list.txt", 'rand_skip: 5 root_folder: "%s/"' % tmp_path)
    net.forward_pass()
    skipped = re.findall(r"Skipping first (\d+) data points\.", capsys.readouterr().err)
    assert len(skipped) == 1 and int(skipped[0]) < 5
    assert net.blob_by_name("label").data[0] == int(skipped[0])
    close_net(net)
