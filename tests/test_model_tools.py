"""draw_net, classify, detect and the upgrade_* tools as commands (subprocesses and click), and
caffe.Classifier / caffe.Detector against preprocessing and a forward pass done by hand."""
import csv
import os
import subprocess
import sys

import h5py
import numpy
import pytest
from click.testing import CliRunner
from google.protobuf import text_format
from PIL import Image

import caffe
from caffecli.cli.main import cli
from caffecli.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEPLOY = """name: "tiny_deploy"
layer { name: "data" type: "Input" top: "data"
  input_param { shape { dim: 1 dim: 3 dim: 6 dim: 6 } } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip"
  inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.05 }
    bias_filler { type: "gaussian" std: 0.5 } } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
"""


def caffecli(args, cwd):
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "caffecli"] + args, cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=300)


def invoke(args, cwd):
    old = os.getcwd()
    os.chdir(str(cwd))
    try:
        return CliRunner().invoke(cli, args)
    finally:
        os.chdir(old)


@pytest.fixture
def model(tmp_path):
    """A 3x6x6 -> 4-class deploy net with random weights, and two 10x8 RGB images."""
    (tmp_path / "deploy.prototxt").write_text(DEPLOY)
    caffe.set_random_seed(3)
    caffe.Net(str(tmp_path / "deploy.prototxt"), caffe.TEST).save(str(tmp_path / "w.caffemodel"))
    rng = numpy.random.RandomState(0)
    (tmp_path / "images").mkdir()
    for name in ("a", "b"):
        pixels = (rng.rand(10, 8, 3) * 255).astype(numpy.uint8)
        Image.fromarray(pixels).save(tmp_path / "images" / (name + ".png"))
    return tmp_path


def by_hand(model_dir, image, box, mirror=False):
    """Softmax of the InnerProduct over the preprocessed crop ``box`` of the resized image
    (flipped left to right with ``mirror``)."""
    net = caffe.Net(str(model_dir / "deploy.prototxt"), caffe.TEST,
                    weights=str(model_dir / "w.caffemodel"))
    y0, x0, y1, x1 = box
    crop = caffe.io.resize_image(image, (8, 8))[y0:y1, x0:x1]
    if mirror:
        crop = crop[:, ::-1]
    x = (crop.transpose(2, 0, 1)[::-1] * 255.0).ravel()
    w, b = (p.data for p in net.params["ip"])
    logits = w @ x + b
    e = numpy.exp(logits - logits.max())
    return e / e.sum()


def test_classifier_centre_crop_and_oversampling(model):
    classifier = caffe.Classifier(str(model / "deploy.prototxt"), str(model / "w.caffemodel"),
                                  image_dims=(8, 8), raw_scale=255.0, channel_swap=(2, 1, 0))
    image = caffe.io.load_image(str(model / "images" / "a.png"))
    centre = classifier.predict([image], oversample=False)
    numpy.testing.assert_allclose(centre[0], by_hand(model, image, (1, 1, 7, 7)), rtol=1e-4)
    averaged = classifier.predict([image, image])
    assert averaged.shape == (2, 4)
    numpy.testing.assert_allclose(averaged.sum(1), 1, rtol=1e-5)
    # the ten crops: four corners and the centre, each also mirrored, averaged
    crops = [by_hand(model, image, box, mirror) for mirror in (False, True) for box in
             [(0, 0, 6, 6), (0, 2, 6, 8), (2, 0, 8, 6), (2, 2, 8, 8), (1, 1, 7, 7)]]
    assert not numpy.allclose(averaged[0], centre[0])
    numpy.testing.assert_allclose(averaged[0], numpy.mean(crops, 0), rtol=1e-4, atol=1e-7)


def test_classify_command_saves_probabilities(model):
    args = ["classify", "images", "out.npy", "--model_def", "deploy.prototxt",
            "--pretrained_model", "w.caffemodel", "--mean_file", "", "--images_dim", "8,8",
            "--ext", "png", "--center_only"]
    result = caffecli(args, model)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[:3] == ["CPU mode", "Loading folder: images",
                                              "Classifying 2 inputs."]
    saved = numpy.load(model / "out.npy")
    image = caffe.io.load_image(str(model / "images" / "a.png"))
    numpy.testing.assert_allclose(saved[0], by_hand(model, image, (1, 1, 7, 7)), rtol=1e-4)
    numpy.save(model / "mean.npy", numpy.full((3, 8, 8), 100.0))
    result = invoke(["classify", "images/b.png", "one", "--model_def", "deploy.prototxt",
                     "--pretrained_model", "w.caffemodel", "--mean_file", "mean.npy",
                     "--images_dim", "8,8"], model)
    assert result.exit_code == 0, result.output
    one = numpy.load(model / "one.npy")
    assert one.shape == (1, 4) and numpy.isfinite(one).all()
    missing = caffecli(["classify", "images/b.png", "x.npy"], model)
    assert missing.returncode == 1
    assert missing.stderr.startswith("caffecli: error: ") and len(missing.stderr.splitlines()) == 1


def test_detector_windows_and_context(model):
    detector = caffe.Detector(str(model / "deploy.prototxt"), str(model / "w.caffemodel"),
                              raw_scale=255.0, channel_swap=(2, 1, 0), context_pad=1,
                              mean=numpy.array([10.0, 20.0, 30.0]))
    assert detector.crop_dims.tolist() == [6, 6, 3]
    image = caffe.io.load_image(str(model / "images" / "a.png"))
    padded = detector.crop(image, numpy.array([0, 0, 4, 4]))
    assert padded.shape == (6, 6, 3)
    # the context box starts above and left of the image: that part is the mean, in RGB / 255
    numpy.testing.assert_allclose(padded[0, 0], [30 / 255.0, 20 / 255.0, 10 / 255.0], rtol=1e-6)
    plain = caffe.Detector(str(model / "deploy.prototxt"), str(model / "w.caffemodel"))
    window = numpy.array([1, 2, 5, 7])
    numpy.testing.assert_array_equal(plain.crop(image, window), image[1:5, 2:7])
    detections = plain.detect_windows([(str(model / "images" / "a.png"), [window, window])])
    assert [d["filename"] for d in detections] == [str(model / "images" / "a.png")] * 2
    assert detections[0]["prediction"].shape == (4,)


def test_detect_command_csv_h5_and_selective_search(model):
    with open(model / "windows.csv", "w") as f:
        f.write("filename,ymin,xmin,ymax,xmax\nimages/a.png,0,0,5,5\nimages/b.png,1,1,9,7\n"
                "images/a.png,2,2,10,8\n")
    common = ["--model_def", "deploy.prototxt", "--pretrained_model", "w.caffemodel",
              "--mean_file", "", "--crop_mode", "list", "--context_pad", "0"]
    result = invoke(["detect", "windows.csv", "out.csv"] + common, model)
    assert result.exit_code == 0, result.output
    with open(model / "out.csv", newline="") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["filename", "ymin", "xmin", "ymax", "xmax", "class0", "class1", "class2",
                       "class3"]
    assert [r[:5] for r in rows[1:]] == [["images/a.png", "0", "0", "5", "5"],
                                         ["images/a.png", "2", "2", "10", "8"],
                                         ["images/b.png", "1", "1", "9", "7"]]
    assert invoke(["detect", "windows.csv", "out.h5"] + common, model).exit_code == 0
    with h5py.File(model / "out.h5", "r") as f:
        assert f["prediction"].shape == (3, 4) and f["window"][2].tolist() == [1, 1, 9, 7]
    (model / "list.txt").write_text("images/a.png\n")
    result = invoke(["detect", "list.txt", "o.csv"] + common[:6], model)
    assert result.exit_code == 1 and "selective_search_ijcv_with_python" in result.output


def test_draw_net_command(tmp_path):
    model = os.path.join(ROOT, "models", "lenet", "lenet.prototxt")
    result = caffecli(["draw_net", model, "lenet.png", "--rankdir", "TB"], tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "Drawing net to lenet.png\n"
    image = Image.open(tmp_path / "lenet.png")
    assert image.format == "PNG" and image.height > image.width > 100
    bad = invoke(["draw_net", model, "x.png", "--phase", "VAL"], tmp_path)
    assert bad.exit_code == 1 and "Unknown phase: VAL" in bad.output


V1_NET = """name: "old"
input: "data"
input_dim: 1 input_dim: 1 input_dim: 5 input_dim: 5
layers { name: "conv" type: CONVOLUTION bottom: "data" top: "conv" blobs_lr: 1 blobs_lr: 2
  convolution_param { num_output: 2 kernel_size: 3 } }
layers { name: "relu" type: RELU bottom: "conv" top: "conv" }
"""


def test_upgrade_net_proto_text_and_binary(tmp_path):
    (tmp_path / "old.prototxt").write_text(V1_NET)
    result = invoke(["upgrade_net_proto_text", "old.prototxt", "new.prototxt"], tmp_path)
    assert result.exit_code == 0, result.output
    text = (tmp_path / "new.prototxt").read_text()
    assert 'type: "Input"' in text and 'type: "Convolution"' in text and "layers {" not in text
    assert "lr_mult: 1\n" in text and "lr_mult: 2\n" in text  # written as C++ Caffe writes
    assert len(caffe.Net(str(tmp_path / "new.prototxt"), caffe.TEST).layers) == 3
    again = invoke(["upgrade_net_proto_text", "new.prototxt", "same.prototxt"], tmp_path)
    assert "File already in latest proto format: new.prototxt" in again.output
    old = text_format.Parse(V1_NET, caffe_pb2.NetParameter())
    (tmp_path / "old.binaryproto").write_bytes(old.SerializeToString())
    result = invoke(["upgrade_net_proto_binary", "old.binaryproto", "new.binaryproto"], tmp_path)
    assert result.exit_code == 0, result.output
    new = caffe_pb2.NetParameter.FromString((tmp_path / "new.binaryproto").read_bytes())
    assert [l.type for l in new.layer] == ["Input", "Convolution", "ReLU"]


def test_upgrade_solver_proto_text(tmp_path):
    (tmp_path / "old.prototxt").write_text('net: "n.prototxt"\nsolver_type: NESTEROV\n'
                                           'base_lr: 0.5\n')
    result = invoke(["upgrade_solver_proto_text", "old.prototxt", "new.prototxt"], tmp_path)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "new.prototxt").read_text() == \
        'base_lr: 0.5\nnet: "n.prototxt"\ntype: "Nesterov"\n'
    (tmp_path / "bad.prototxt").write_text("base_lr: [\n")
    bad = invoke(["upgrade_solver_proto_text", "bad.prototxt", "x"], tmp_path)
    assert bad.exit_code == 1 and "bad.prototxt:1:" in bad.output
