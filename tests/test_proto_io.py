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


def test_missing_required_field_is_refused_as_caffe_refuses_it(tmp_path):
    """protobuf's C++ parser (Caffe's) fails on a required field left out; so does caffecli."""
    p = tmp_path / "clip.prototxt"
    p.write_text('layer { name: "x" type: "Input" top: "x" }\n'
                 'layer { name: "c" type: "Clip" bottom: "x" top: "y" clip_param { min: 1 } }\n')
    with pytest.raises(CaffeError, match=r"clip.prototxt: missing required field "
                                         r"layer\[1\]\.clip_param\.max$"):
        read_net_param(str(p))
    p.write_text(p.read_text().replace("min: 1", "min: 1 max: 2"))
    assert read_net_param(str(p)).layer[1].clip_param.max == 2


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


def test_text_output_escapes_and_prints_numbers_as_cpp_textformat():
    """C++'s TextFormat (log dumps, upgrade tools): strings C-escaped with bytes past ASCII in
    octal, floats by SimpleFtoa, the double fields by SimpleDtoa."""
    from caffecli.proto.io import net_to_text
    net = caffe_pb2.NetParameter(name='n\u00e9"t')
    blob = net.layer.add(name="l").blobs.add()
    blob.data.extend([0.1, 1e-05, 2.0])
    blob.double_data.extend([0.123456789, 1e-300])
    text = net_to_text(net)
    assert text.startswith('name: "n\\303\\251\\"t"\n')
    assert "data: 0.1\n" in text and "data: 1e-05\n" in text and "data: 2\n" in text
    assert "double_data: 0.123456789\n" in text and "double_data: 1e-300\n" in text
