"""caffe.draw: pycaffe's node labels, styles and phase filter in the DOT text, and real images
(PNG, SVG, PDF) laid out by Graphviz's dot or graphviz-pure."""
import io
import os
import sys

import numpy
import pytest
from google.protobuf import text_format
from PIL import Image

import caffe
import caffe.draw
from caffecli.errors import CaffeError
from caffecli.proto import caffe_pb2
from caffecli.proto.io import read_text

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LENET = os.path.join(ROOT, "models", "lenet", "lenet_train_test.prototxt")


def lenet():
    return read_text(LENET, caffe_pb2.NetParameter())


def layer(text):
    return text_format.Parse(text, caffe_pb2.LayerParameter())


def test_layer_labels_follow_rankdir_and_show_lr_mults():
    conv = layer('name: "c" type: "Convolution" param { lr_mult: 0 } '
                 'convolution_param { kernel_size: 5 stride: 2 pad: 1 }')
    assert caffe.draw.get_layer_label(conv, "LR") == \
        r'"c\n(Convolution)\nkernel size: 5\nstride: 2\npad: 1"'
    assert caffe.draw.get_layer_label(conv, "TB", display_lrm=True) == \
        '"c (Convolution) kernel size: 5 stride: 2 pad: 1 lr mult: 0.0, 1.0"'
    pool = layer('name: "p" type: "Pooling" pooling_param { pool: AVE kernel_size: 3 }')
    assert caffe.draw.get_layer_label(pool, "BT") == \
        '"p (Pooling AVE) kernel size: 3 stride: 1 pad: 0"'
    frozen = layer('name: "f" type: "InnerProduct" param { lr_mult: 0 } param { lr_mult: 0 }')
    assert caffe.draw.get_layer_label(frozen, "TB", display_lrm=True) == '"f (InnerProduct)"'
    with pytest.raises(ValueError):
        caffe.draw.get_layer_lr_mult(layer('name: "r" type: "ReLU"'))


def test_dot_text_has_pycaffes_styles_and_edges():
    dot = caffe.draw.get_pydot_graph(lenet(), "LR").to_string()
    assert dot.startswith("digraph LeNet {")
    assert "rankdir=LR;" in dot
    assert r'"conv1\n(Convolution)\nkernel size: 5\nstride: 1\npad: 0" [shape=record, ' \
           'fillcolor="#FF5050", style=filled];' in dot
    assert r'"relu1\n(ReLU)" [shape=record, fillcolor="#90EE90", style=filled];' in dot
    assert 'data [shape=octagon, fillcolor="#E0E0E0", style=filled];' in dot
    assert "loss;" in dot  # a top nothing reads keeps the default shape
    assert 'label="Batch 64"' in dot and 'label="Batch 100"' in dot and 'label=500' in dot


def test_phase_picks_layers():
    train = caffe.draw.get_pydot_graph(lenet(), "TB", phase=caffe.TRAIN).to_string()
    test = caffe.draw.get_pydot_graph(lenet(), "TB", phase=caffe.TEST).to_string()
    assert "Batch 64" in train and "Batch 100" not in train
    assert "Batch 100" in test and "accuracy (Accuracy)" in test
    assert "accuracy (Accuracy)" not in train
    both = lenet()
    both.layer[0].exclude.add(phase=caffe.TEST)
    with pytest.raises(ValueError, match="both include and exclude"):
        caffe.draw.get_pydot_graph(both, "LR", phase=caffe.TRAIN)


def test_png_svg_pdf_and_raw(tmp_path):
    png = caffe.draw.draw_net(lenet(), "TB")
    image = Image.open(io.BytesIO(png))
    assert image.format == "PNG" and 300 < image.height < 4000 and image.height > image.width
    colours = set(map(tuple, numpy.asarray(image.convert("RGB")).reshape(-1, 3).tolist()))
    assert (0xFF, 0x50, 0x50) in colours and (0xCC, 0x33, 0xFF) in colours  # conv, ip fills
    wide = Image.open(io.BytesIO(caffe.draw.draw_net(lenet(), "LR")))
    assert wide.width > wide.height
    svg = caffe.draw.draw_net(lenet(), "LR", ext="svg").decode("utf-8")
    assert "<svg" in svg and "conv1" in svg and "SoftmaxWithLoss" in svg
    path = str(tmp_path / "lenet.pdf")
    caffe.draw.draw_net_to_file(lenet(), path, "LR", caffe.TEST, True)
    with open(path, "rb") as f:
        assert f.read(5) == b"%PDF-"
    raw = caffe.draw.draw_net(lenet(), "LR", ext="raw").decode("utf-8")
    assert raw.startswith("digraph LeNet {") and "->" in raw
    with pytest.raises(CaffeError, match=r"could not write xyz: .*\bxyz\b"):
        caffe.draw.draw_net(lenet(), "LR", ext="xyz")


def test_missing_pydot_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pydot", None)
    with pytest.raises(ImportError, match=r"pip install 'caffecli\[draw\]'") as info:
        caffe.draw.draw_net(lenet(), "LR")
    assert isinstance(info.value, CaffeError)


def test_missing_graphviz_program_names_the_extra(monkeypatch):
    monkeypatch.setattr(caffe.draw.shutil, "which", lambda name, path=None: None)
    with pytest.raises(CaffeError, match=r"caffecli\[draw\].*apt-get install graphviz"):
        caffe.draw.draw_net(lenet(), "LR")
