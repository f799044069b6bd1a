"""The data threads (data/workers.py): batches the same bits for any number of them, errors
reported for the first bad item in order, the count from the environment."""
import numpy
import pytest

import caffecli
from caffecli.data import datum as datum_mod
from caffecli.data import image_io, workers
from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2
from data_helpers import close_net, data_net, write_datum_db, write_png

RS = numpy.random.RandomState(4)
IMAGES = [RS.randint(0, 256, size=(9, 11, 3)).astype(numpy.uint8) for _ in range(10)]
TRANSFORM = ("transform_param { crop_size: 7 mirror: true scale: 0.5 mean_value: 3 "
             "mean_value: 9 mean_value: 27 }")


def _batches(make_net, threads, monkeypatch, count=4):
    """``count`` forward passes' data and labels with that many data threads."""
    monkeypatch.setenv("CAFFECLI_DATA_THREADS", str(threads))
    caffecli.set_random_seed(11)
    net = make_net()
    try:
        out = []
        for _ in range(count):
            net.forward_pass()
            out.append((net.blobs["data"].data.copy(), net.blobs["label"].data.copy()))
        return out
    finally:
        close_net(net)


def _encoded_db(tmp_path):
    path = str(tmp_path / "db")
    from caffecli.data import db as db_mod
    with db_mod.open_writer(path, "lmdb") as w:
        for i, img in enumerate(IMAGES):
            w.put("%08d" % i, datum_mod.from_encoded(image_io.encode(img, "png"), i)
                  .SerializeToString())
    return path


@pytest.mark.parametrize("encoded", [False, True])
def test_a_database_batch_is_the_same_for_any_thread_count(tmp_path, monkeypatch, encoded):
    path = _encoded_db(tmp_path) if encoded else write_datum_db(
        str(tmp_path / "db"), [img.transpose(2, 0, 1) for img in IMAGES])

    def make():
        return data_net('name: "d" type: "Data" top: "data" top: "label" include { phase: '
                        'TRAIN } %s data_param { source: "%s" backend: LMDB batch_size: 4 }'
                        % (TRANSFORM, path), caffe_pb2.TRAIN)
    one = _batches(make, 1, monkeypatch)
    three = _batches(make, 3, monkeypatch)
    for (d1, l1), (d3, l3) in zip(one, three):
        numpy.testing.assert_array_equal(d1, d3)
        numpy.testing.assert_array_equal(l1, l3)
    # every pass a different window of the records, wrapping around (10 records, batches of 4)
    assert [list(labels) for _, labels in one[:3]] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 0, 1]]
    assert not numpy.array_equal(one[0][0], one[2][0])


def _image_list(tmp_path, names):
    for i, img in enumerate(IMAGES):
        write_png(str(tmp_path / ("%d.png" % i)), img)
    listfile = tmp_path / "list.txt"
    listfile.write_text("".join("%s %d\n" % (n, i) for i, n in enumerate(names)))
    return listfile


def test_an_image_list_batch_is_the_same_for_any_thread_count(tmp_path, monkeypatch):
    listfile = _image_list(tmp_path, ["%d.png" % i for i in range(10)])

    def make():
        return data_net('name: "d" type: "ImageData" top: "data" top: "label" %s '
                        'image_data_param { source: "%s" root_folder: "%s/" batch_size: 5 '
                        'shuffle: true new_height: 8 new_width: 10 }'
                        % (TRANSFORM, listfile, tmp_path), caffe_pb2.TRAIN)
    one = _batches(make, 1, monkeypatch)
    three = _batches(make, 3, monkeypatch)
    for (d1, l1), (d3, l3) in zip(one, three):
        numpy.testing.assert_array_equal(d1, d3)
        numpy.testing.assert_array_equal(l1, l3)
    assert sorted(numpy.concatenate([one[0][1], one[1][1]])) == list(range(10))


def test_the_first_unreadable_image_in_order_is_the_one_reported(tmp_path, monkeypatch,
                                                                  capsys):
    from caffecli import glog
    glog.set_stream(None)
    monkeypatch.setenv("CAFFECLI_DATA_THREADS", "4")
    names = ["0.png", "1.png", "missing_a.png", "3.png", "4.png", "5.png", "missing_b.png",
             "7.png"]
    listfile = _image_list(tmp_path, names)
    net = data_net('name: "d" type: "ImageData" top: "data" top: "label" image_data_param { '
                   'source: "%s" root_folder: "%s/" batch_size: 8 }' % (listfile, tmp_path))
    capsys.readouterr()
    with pytest.raises(CaffeError, match="missing_a.png") as e:
        net.forward_pass()
    assert "missing_b" not in str(e.value)
    err = capsys.readouterr().err
    assert "Could not open or find file %s/missing_a.png" % tmp_path in err
    assert "missing_b" not in err
    close_net(net)


def test_a_bad_record_is_named_with_several_threads(tmp_path, monkeypatch):
    monkeypatch.setenv("CAFFECLI_DATA_THREADS", "3")
    arrays = [img.transpose(2, 0, 1) for img in IMAGES[:5]] + [numpy.zeros((3, 4, 4))]
    path = write_datum_db(str(tmp_path / "db"), arrays)
    net = data_net('name: "d" type: "Data" top: "data" top: "label" data_param { source: '
                   '"%s" backend: LMDB batch_size: 6 }' % path)
    with pytest.raises(CaffeError) as e:
        net.forward_pass()
    assert "00000005" in str(e.value) and "3x4x4" in str(e.value)
    close_net(net)


def test_runs_cover_every_item_once_in_order():
    for n in range(0, 12):
        for parts in range(1, 6):
            cuts = workers.runs(n, parts)
            covered = [i for a, b in cuts for i in range(a, b)]
            assert covered == list(range(n))
            assert len(cuts) == max(1, min(parts, n))


def test_map_items_keeps_order_and_raises_the_first_error(monkeypatch):
    monkeypatch.setenv("CAFFECLI_DATA_THREADS", "3")
    assert workers.map_items(lambda x: x * x, list(range(10))) == [x * x for x in range(10)]

    def fail_on(x):
        if x in (4, 8):
            raise ValueError("item %d" % x)
        return x
    with pytest.raises(ValueError, match="item 4"):
        workers.map_items(fail_on, list(range(10)))


def test_thread_count_follows_the_environment_and_the_cores(monkeypatch):
    monkeypatch.setenv("CAFFECLI_DATA_THREADS", "6")
    assert workers.count() == 6
    monkeypatch.setenv("CAFFECLI_DATA_THREADS", "0")
    monkeypatch.setenv("OMP_NUM_THREADS", "16")
    assert workers.count() == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert workers.count() == 1
    monkeypatch.delenv("CAFFECLI_DATA_THREADS")
    monkeypatch.setenv("OMP_NUM_THREADS", "64")
    assert workers.count() == workers.MAX_DEFAULT


def test_a_window_data_batch_is_the_same_for_any_thread_count(tmp_path, monkeypatch):
    """The windows and mirror coins are drawn in Caffe's order before the crops are made."""
    blocks = []
    for i, img in enumerate(IMAGES[:3]):
        write_png(str(tmp_path / ("%d.png" % i)), img)
        blocks.append("# %d\n%s/%d.png\n3\n9\n11\n3\n1 0.9 2 1 9 7\n2 0.7 0 0 6 5\n"
                      "0 0.1 4 3 10 8\n" % (i, tmp_path, i))
    (tmp_path / "windows.txt").write_text("".join(blocks))

    def make():
        return data_net('name: "w" type: "WindowData" top: "data" top: "label" '
                        'transform_param { crop_size: 6 mirror: true mean_value: 50 scale: 0.5 '
                        '} window_data_param { source: "%s" batch_size: 8 fg_fraction: 0.5 '
                        'context_pad: 1 }' % (tmp_path / "windows.txt"), caffe_pb2.TRAIN)
    one = _batches(make, 1, monkeypatch, count=3)
    three = _batches(make, 3, monkeypatch, count=3)
    for (d1, l1), (d3, l3) in zip(one, three):
        numpy.testing.assert_array_equal(d1, d3)
        numpy.testing.assert_array_equal(l1, l3)
    assert not numpy.array_equal(one[0][0], one[1][0])


def test_convert_imageset_writes_and_logs_the_same_for_any_thread_count(tmp_path, monkeypatch,
                                                                         capsys):
    """Blocks of images are read side by side, then written and logged in the list's order:
    the records and the log lines (an image that cannot be read, a name without an extension)
    are one thread's."""
    import shutil
    from caffecli import glog
    from caffecli.data import db as db_mod
    from caffecli.tools import convert_imageset
    glog.set_stream(None)
    names = ["%d.png" % i for i in range(10)]
    names[3], names[7] = "gone.png", "noext"
    _image_list(tmp_path, ["%d.png" % i for i in range(10)])
    shutil.copy(str(tmp_path / "7.png"), str(tmp_path / "noext"))
    # absolute names, no root folder: a name without an extension is then its own "format",
    # which the file's bytes match (Caffe's matchExt), so its record keeps them
    (tmp_path / "list.txt").write_text("".join("%s/%s %d\n" % (tmp_path, n, i)
                                               for i, n in enumerate(names)))
    monkeypatch.setattr(workers, "BLOCK", 4)   # several blocks, one partly failing
    results = []
    for threads in (1, 3):
        monkeypatch.setenv("CAFFECLI_DATA_THREADS", str(threads))
        out = str(tmp_path / ("db%d" % threads))
        capsys.readouterr()
        count = convert_imageset.run("", str(tmp_path / "list.txt"), out, encoded=True)
        log = [line.split("]", 1)[1].replace(out, "OUT")
               for line in capsys.readouterr().err.splitlines() if "]" in line]
        results.append((count, log, list(db_mod.iterate(out, "lmdb"))))
    (c1, log1, rows1), (c3, log3, rows3) = results
    assert c1 == c3 == 9 and rows1 == rows3 and log1 == log3
    assert [k.decode()[:8] for k, _ in rows1] == ["%08d" % i for i in range(10) if i != 3]
    assert any("Could not open or find file %s/gone.png" % tmp_path in line for line in log1)
    assert any("Failed to guess the encoding of '%s/noext'" % tmp_path in line for line in log1)


def test_an_encoding_opencv_does_not_know_is_a_one_line_error(tmp_path):
    """Caffe's tool aborts in cv::imencode; caffecli says which format it could not write."""
    from caffecli.tools import convert_imageset
    _image_list(tmp_path, ["0.png"])
    with pytest.raises(CaffeError, match="could not encode image as noext"):
        convert_imageset.run(str(tmp_path) + "/", str(tmp_path / "list.txt"),
                             str(tmp_path / "db"), resize_height=4, resize_width=4,
                             encode_type="noext")


def test_compute_image_mean_is_the_same_for_any_thread_count(tmp_path, monkeypatch):
    """Records decoded side by side, summed in key order: the same float32 mean bits."""
    from caffecli.tools import compute_image_mean
    path = _encoded_db(tmp_path)
    monkeypatch.setattr(workers, "BLOCK", 3)
    means = []
    for threads in (1, 3):
        monkeypatch.setenv("CAFFECLI_DATA_THREADS", str(threads))
        means.append(compute_image_mean.run(path))
    numpy.testing.assert_array_equal(means[0], means[1])
    want = numpy.zeros((3, 9, 11), numpy.float32)
    for img in IMAGES:
        want += img.transpose(2, 0, 1).astype(numpy.float32)
    numpy.testing.assert_array_equal(means[0], want / numpy.float32(len(IMAGES)))
    bad = write_datum_db(str(tmp_path / "bad"), [img.transpose(2, 0, 1) for img in IMAGES[:4]]
                         + [numpy.zeros((3, 9, 10))])
    with pytest.raises(CaffeError, match="00000004.*3x9x10"):
        compute_image_mean.run(bad)


def test_two_thread_counts_at_once_share_nothing():
    """A net's prefetch thread and a converter in the same process may ask for different
    counts at the same time: each gets its own executor, and neither is shut down under the
    other."""
    import threading
    errors, results = [], {}

    def run(parts):
        try:
            for _ in range(100):
                results[parts] = workers.map_items(lambda x: x + parts, list(range(7)), parts)
        except Exception as exc:     # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=run, args=(p,)) for p in (2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == {p: [x + p for x in range(7)] for p in (2, 3)}
    # each count keeps its executor (none made anew, none shut down, when counts alternate)
    three = workers._executor(3)
    assert workers._executor(2) is not three and workers._executor(3) is three
