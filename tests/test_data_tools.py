"""Converter tools: CIFAR-10, MNIST, convert_imageset, compute_image_mean, extract_features."""
import os

import numpy
import pytest
from click.testing import CliRunner

from caffecli.data import db as db_mod
from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2
from caffecli.proto.io import read_blob_proto
from caffecli.tools import TOOLS, tool_command, compute_image_mean, convert_cifar_data, \
    convert_imageset, convert_mnist_data, convert_mnist_siamese_data, extract_features
from data_helpers import close_net, data_net, make_cifar_folder, write_datum_db, write_mnist, \
    write_png


def records(path, backend="lmdb"):
    return [(k.decode(), caffe_pb2.Datum.FromString(v)) for k, v in db_mod.iterate(path, backend)]


def test_tool_commands_are_click_commands_with_caffe_names():
    import click
    commands = [tool_command(name) for name in TOOLS]
    assert set(TOOLS) == {"convert_imageset", "compute_image_mean", "convert_cifar_data",
                     "convert_mnist_data", "convert_mnist_siamese_data", "extract_features",
                     "upgrade_net_proto_text",
                     "upgrade_net_proto_binary", "upgrade_solver_proto_text", "draw_net",
                     "classify", "detect", "parse_log", "plot_log"}
    assert all(isinstance(c, click.Command) for c in commands)
    assert {c.name for c in commands} == set(TOOLS)


@pytest.mark.parametrize("backend", ["lmdb", "leveldb"])
def test_convert_cifar_data_keys_planes_and_labels(tmp_path, backend):
    content = make_cifar_folder(str(tmp_path / "in"), per_file=3)
    os.makedirs(tmp_path / "out")
    train, test = convert_cifar_data.run(str(tmp_path / "in"), str(tmp_path / "out"), backend)
    assert train.endswith("cifar10_train_" + backend)
    recs = records(train, backend)
    assert [k for k, _ in recs][:4] == ["00000", "00001", "00002", "10000"]
    assert len(recs) == 15
    labels, images = content["data_batch_2.bin"]
    key, d = recs[4]
    assert key == "10001" and (d.channels, d.height, d.width) == (3, 32, 32)
    assert d.label == labels[1]
    numpy.testing.assert_array_equal(
        numpy.frombuffer(d.data, numpy.uint8).reshape(3, 32, 32), images[1].transpose(2, 0, 1))
    assert len(records(test, backend)) == 3


def test_cifar_db_feeds_a_data_layer(tmp_path):
    make_cifar_folder(str(tmp_path / "in"), per_file=2)
    train, _ = convert_cifar_data.run(str(tmp_path / "in"), str(tmp_path), "lmdb")
    net = data_net('name: "d" type: "Data" top: "data" top: "label" data_param { source: "%s" '
                   'backend: LMDB batch_size: 4 }' % train)
    net.forward_pass()
    assert net.blob_by_name("data").shape == (4, 3, 32, 32)
    close_net(net)


def test_convert_cifar_data_errors(tmp_path):
    with pytest.raises(CaffeError, match="data_batch_1.bin"):
        convert_cifar_data.run(str(tmp_path), str(tmp_path), "lmdb")
    make_cifar_folder(str(tmp_path / "in"), per_file=1)
    with open(tmp_path / "in" / "test_batch.bin", "ab") as f:
        f.write(b"x")
    with pytest.raises(CaffeError, match="whole number"):
        convert_cifar_data.run(str(tmp_path / "in"), str(tmp_path), "lmdb")
    assert not os.path.exists(tmp_path / "cifar10_test_lmdb")


def test_convert_mnist_data_cli(tmp_path):
    rs = numpy.random.RandomState(0)
    images = rs.randint(0, 256, size=(5, 4, 3))
    img, lab = write_mnist(str(tmp_path), images, [3, 1, 4, 1, 5])
    out = str(tmp_path / "mnist_db")
    result = CliRunner().invoke(convert_mnist_data.convert_mnist_data,
                                [img, lab, out, "--backend=leveldb"])
    assert result.exit_code == 0, result.output
    recs = records(out, "leveldb")
    assert [k for k, _ in recs] == ["%08d" % i for i in range(5)]
    assert [d.label for _, d in recs] == [3, 1, 4, 1, 5]
    numpy.testing.assert_array_equal(numpy.frombuffer(recs[2][1].data, numpy.uint8),
                                     images[2].ravel())
    assert (recs[0][1].channels, recs[0][1].height, recs[0][1].width) == (1, 4, 3)


def test_convert_mnist_data_errors(tmp_path):
    img, lab = write_mnist(str(tmp_path), numpy.zeros((2, 2, 2)), [0, 1])
    with pytest.raises(CaffeError, match="magic"):
        convert_mnist_data.run(lab, img, str(tmp_path / "x"))
    img2, lab2 = write_mnist(str(tmp_path), numpy.zeros((3, 2, 2)), [0, 1])
    with pytest.raises(CaffeError, match="3 images.*2 labels"):
        convert_mnist_data.run(img2, lab2, str(tmp_path / "y"))
    assert not os.path.exists(tmp_path / "y")
    with pytest.raises(CaffeError, match="unable to open"):
        convert_mnist_data.run(str(tmp_path / "nope"), lab2, str(tmp_path / "z"))


def test_convert_mnist_siamese_data_pairs_from_caffes_generator(tmp_path, logs):
    images = numpy.arange(7 * 4 * 3).reshape(7, 4, 3) % 256
    labels = [3, 1, 4, 1, 5, 9, 3]
    img, lab = write_mnist(str(tmp_path), images, labels)
    out = str(tmp_path / "pairs")
    result = CliRunner().invoke(convert_mnist_siamese_data.convert_mnist_siamese_data,
                                [img, lab, out, "--seed=5489"])
    assert result.exit_code == 0, result.output
    # the example opens its leveldb itself: no "Opened leveldb" line of Caffe's db classes
    assert "convert_mnist_siamese_data.cpp:85] A total of 7 items." in logs.getvalue()
    assert "Opened" not in logs.getvalue()
    recs = records(out, "leveldb")
    assert [k for k, _ in recs] == ["%08d" % i for i in range(7)]
    # mt19937 seeded with 5489 (std's default) starts 3499211612, 581869302, ...
    first, second = convert_mnist_siamese_data.pairs(7, 5489)
    assert (first[0], second[0]) == (3499211612 % 7, 581869302 % 7)
    for (_, d), i, j in zip(recs, first, second):
        assert (d.channels, d.height, d.width) == (2, 4, 3)
        pair = numpy.frombuffer(d.data, numpy.uint8).reshape(2, 4, 3)
        numpy.testing.assert_array_equal(pair, images[[i, j]])
        assert d.label == int(labels[i] == labels[j])
    again = str(tmp_path / "again")
    convert_mnist_siamese_data.run(img, lab, again, "lmdb", seed=5489)
    assert [d.SerializeToString() for _, d in records(again)] == \
        [d.SerializeToString() for _, d in recs]
    net = data_net('name: "d" type: "Data" top: "pair_data" top: "sim" data_param { source: '
                   '"%s" backend: LMDB batch_size: 4 }' % again)
    net.forward_pass()
    assert net.blob_by_name("pair_data").shape == (4, 2, 4, 3)
    close_net(net)


def _images(tmp_path, n=3, shape=(6, 5, 3)):
    rs = numpy.random.RandomState(1)
    lines = []
    for i in range(n):
        write_png(str(tmp_path / ("i%d.png" % i)), rs.randint(0, 256, size=shape))
        lines.append("i%d.png %d" % (i, i))
    (tmp_path / "list.txt").write_text("\n".join(lines) + "\n")
    return str(tmp_path) + "/", str(tmp_path / "list.txt")


def test_convert_imageset_cli_flags_and_keys(tmp_path):
    root, listfile = _images(tmp_path)
    out = str(tmp_path / "db")
    result = CliRunner().invoke(convert_imageset.convert_imageset,
                                ["-gray=true", "--resize_height=4", "-resize_width", "3",
                                 "--check_size", root, listfile, out])
    assert result.exit_code == 0, result.output
    recs = records(out)
    assert [k for k, _ in recs] == ["00000000_i0.png", "00000001_i1.png", "00000002_i2.png"]
    d = recs[1][1]
    assert (d.channels, d.height, d.width, d.label, d.encoded) == (1, 4, 3, 1, False)
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_convert_imageset_numbers_keys_by_line_blank_lines_included(tmp_path):
    """A blank line is an entry that fails to read (skipped with Caffe's log line), and the
    keys keep counting lines, as convert_imageset.cpp's line_id does."""
    root, _ = _images(tmp_path, n=2)
    (tmp_path / "gaps.txt").write_text("i0.png 0\n\ni1.png 1\n")
    assert convert_imageset.run(root, str(tmp_path / "gaps.txt"), str(tmp_path / "db")) == 2
    assert [k for k, _ in records(str(tmp_path / "db"))] == ["00000000_i0.png",
                                                             "00000002_i1.png"]


def test_convert_imageset_encoded_keeps_file_bytes_when_no_resize(tmp_path):
    root, listfile = _images(tmp_path, n=2)
    out = str(tmp_path / "db")
    convert_imageset.run(root, listfile, out, encoded=True)
    d = records(out)[0][1]
    assert d.encoded and d.data == (tmp_path / "i0.png").read_bytes()


def test_convert_imageset_errors(tmp_path):
    root, listfile = _images(tmp_path, n=2)
    with pytest.raises(CaffeError, match="nope.txt"):
        convert_imageset.run(root, str(tmp_path / "nope.txt"), str(tmp_path / "a"))
    (tmp_path / "empty.txt").write_text("")
    with pytest.raises(CaffeError, match="empty"):
        convert_imageset.run(root, str(tmp_path / "empty.txt"), str(tmp_path / "b"))
    os.makedirs(tmp_path / "exists")
    with pytest.raises(CaffeError, match="already exists"):
        convert_imageset.run(root, listfile, str(tmp_path / "exists"))
    # check_size: a differently sized image aborts and leaves no database behind
    write_png(str(tmp_path / "big.png"), numpy.zeros((9, 9, 3)))
    (tmp_path / "mixed.txt").write_text("i0.png 0\nbig.png 1\n")
    with pytest.raises(CaffeError, match="big.png.*size"):
        convert_imageset.run(root, str(tmp_path / "mixed.txt"), str(tmp_path / "c"),
                             check_size=True)
    assert not os.path.exists(tmp_path / "c")
    assert not [p for p in os.listdir(tmp_path) if ".tmp-" in p]


def test_convert_imageset_skips_unreadable_images_as_caffe(tmp_path):
    root, _ = _images(tmp_path, n=2)
    (tmp_path / "bad.png").write_bytes(b"junk")
    (tmp_path / "l.txt").write_text("i0.png 0\nbad.png 1\nmissing.png 2\ni1.png 3\n")
    assert convert_imageset.run(root, str(tmp_path / "l.txt"), str(tmp_path / "db")) == 2
    assert [k for k, _ in records(str(tmp_path / "db"))] == ["00000000_i0.png",
                                                             "00000003_i1.png"]


def test_compute_image_mean_matches_numpy_and_feeds_transformer(tmp_path):
    rs = numpy.random.RandomState(2)
    arrays = [rs.randint(0, 256, size=(3, 4, 5)) for _ in range(6)]
    path = write_datum_db(str(tmp_path / "db"), arrays)
    out = str(tmp_path / "mean.binaryproto")
    result = CliRunner().invoke(compute_image_mean.compute_image_mean, [path, out])
    assert result.exit_code == 0, result.output
    proto = read_blob_proto(out)
    assert (proto.num, proto.channels, proto.height, proto.width) == (1, 3, 4, 5)
    numpy.testing.assert_allclose(numpy.asarray(proto.data).reshape(3, 4, 5),
                                  numpy.mean(arrays, axis=0), rtol=1e-6)
    net = data_net('name: "d" type: "Data" top: "data" transform_param { mean_file: "%s" } '
                   'data_param { source: "%s" backend: LMDB batch_size: 6 }' % (out, path))
    net.forward_pass()
    numpy.testing.assert_allclose(net.blob_by_name("data").data.mean(axis=0), 0, atol=1e-4)
    close_net(net)


def test_compute_image_mean_missing_db_is_error(tmp_path):
    with pytest.raises(CaffeError, match="nope"):
        compute_image_mean.run(str(tmp_path / "nope"))


def test_extract_features_writes_float_datums(tmp_path):
    from caffecli import Net
    rs = numpy.random.RandomState(4)
    arrays = [rs.randint(0, 256, size=(1, 2, 2)) for _ in range(4)]
    src = write_datum_db(str(tmp_path / "db"), arrays)
    proto = tmp_path / "net.prototxt"
    proto.write_text('name: "f" layer { name: "d" type: "Data" top: "data" top: "label" '
                     'data_param { source: "%s" backend: LMDB batch_size: 2 } } '
                     'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
                     'inner_product_param { num_output: 3 weight_filler { type: "gaussian" } } }'
                     % src)
    net = Net(str(proto), caffe_pb2.TEST, log=False)
    weights = str(tmp_path / "w.caffemodel")
    net.save(weights)
    w = net.layer_by_name("ip").blobs[0].data.copy()
    close_net(net)
    out = str(tmp_path / "feat")
    result = CliRunner().invoke(extract_features.extract_features,
                                [weights, str(proto), "ip,data", out + "," + out + "_d", "2",
                                 "lmdb"])
    assert result.exit_code == 0, result.output
    recs = records(out)
    assert [k for k, _ in recs] == ["%010d" % i for i in range(4)]
    numpy.testing.assert_allclose(recs[3][1].float_data, w @ arrays[3].ravel(), rtol=1e-5)
    assert len(records(out + "_d")[0][1].float_data) == 4
    # as Caffe's tool (no FLAGS_alsologtostderr): INFO lines in glog's files only, the ERROR
    # lines it reports progress with on stderr too
    from test_cli import run_subprocess
    logs = tmp_path / "logs"
    logs.mkdir()
    done = run_subprocess(["-log_dir", str(logs), "extract_features", weights, str(proto), "ip",
                           out + "_2", "2", "lmdb"], str(tmp_path))
    assert done.returncode == 0, done.stderr
    err = [line for line in done.stderr.splitlines() if "] " in line]
    assert err and all(line[0] == "E" for line in err)
    assert err[-1].endswith("Successfully extracted the features!")
    info = [f for f in os.listdir(logs) if ".log.INFO." in f]
    assert info and "Opening dataset " + out + "_2" in (logs / info[0]).read_text()


def test_converters_log_caffes_lines_and_make_caffes_lmdb_folder(tmp_path, capsys):
    """The db opening line of db_lmdb.cpp before the counts, CIFAR's per-batch lines, the
    LMDB folder made as mkdir(source, 0744), and only Caffe's backend spellings."""
    from caffecli import glog
    glog.set_stream(None)
    img, lab = write_mnist(str(tmp_path), numpy.zeros((2, 2, 2)), [0, 1])
    convert_mnist_data.run(img, lab, str(tmp_path / "m"))
    make_cifar_folder(str(tmp_path / "in"), per_file=1)
    convert_cifar_data.run(str(tmp_path / "in"), str(tmp_path), "lmdb")
    lines = [line.split("] ", 1)[1] for line in capsys.readouterr().err.splitlines()
             if "] " in line]
    assert lines[:3] == ["Opened lmdb " + str(tmp_path / "m"), "A total of 2 items.",
                         "Rows: 2 Cols: 2"]
    train = "Opened lmdb " + os.path.join(str(tmp_path), "cifar10_train_lmdb")
    assert lines[lines.index(train) + 1:lines.index(train) + 7] == \
        ["Writing Training data"] + ["Training Batch %d" % i for i in range(1, 6)]
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(tmp_path / "m").st_mode & 0o777 == 0o744 & ~umask
    with pytest.raises(CaffeError, match="Unknown database backend 'LMDB'"):
        convert_mnist_data.run(img, lab, str(tmp_path / "m2"), "LMDB")
