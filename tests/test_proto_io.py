"""Reading prototxt and binary files: clear file:line:col errors, atomic writes."""
import os

import pytest

from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2
from caffecli.proto.io import read_net_param, read_solver_param, write_binary, read_binary


def test_syntax_error_names_file_line_col(tmp_path):
    p = tmp_path / "bad.prototxt"
    p.write_text('name: "x"\nlayer {\n  name: "a"\n  type: "ReLU\n}\n')
    with pytest.raises(CaffeError) as e:
        read_net_param(str(p))
    assert str(e.value).startswith(str(p) + ":4:")
    assert "\n" not in str(e.value)


def test_unknown_field_names_position(tmp_path):
    p = tmp_path / "bad.prototxt"
    p.write_text('name: "x"\nlayer {\n  name: "a"\n  colour: 3\n}\n')
    with pytest.raises(CaffeError, match=r"bad.prototxt:4:3: .*colour"):
        read_net_param(str(p))


def test_missing_file():
    with pytest.raises(CaffeError, match="nope.prototxt: file not found"):
        read_solver_param("nope.prototxt")


def test_truncated_binary(tmp_path):
    net = caffe_pb2.NetParameter(name="n")
    layer = net.layer.add(name="a", type="InnerProduct")
    layer.blobs.add().data.extend([1.0] * 100)
    path = str(tmp_path / "m.caffemodel")
    write_binary(path, net)
    assert read_binary(path, caffe_pb2.NetParameter()).layer[0].name == "a"
    data = open(path, "rb").read()
    open(path, "wb").write(data[:len(data) // 2])
    with pytest.raises(CaffeError, match="not a valid"):
        read_binary(path, caffe_pb2.NetParameter())


def test_atomic_write_leaves_no_temp(tmp_path):
    path = str(tmp_path / "a.caffemodel")
    write_binary(path, caffe_pb2.NetParameter(name="n"))
    assert os.listdir(tmp_path) == ["a.caffemodel"]
