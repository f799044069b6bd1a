"""BVLC's own pycaffe suite (python/caffe/test/*.py of a BVLC/caffe checkout named by
BVLC_CAFFE_ROOT), run unchanged against this package's ``import caffe``; every test must pass.
Also the checkout's draw_net.py, classify.py and Python loss layer example, unchanged."""
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import numpy
import pytest

import caffe

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CHECKOUT = os.environ.get("BVLC_CAFFE_ROOT", "")
SUITE = os.path.join(CHECKOUT, "python", "caffe", "test")

if not os.path.isdir(SUITE):
    pytest.skip("BVLC_CAFFE_ROOT does not name a BVLC/caffe checkout", allow_module_level=True)


def test_bvlc_pycaffe_suite_passes(tmp_path):
    report = tmp_path / "report.xml"
    # run from an empty directory: the checkout's python/ holds BVLC's own caffe package, and
    # test_solver writes its snapshots to the current directory
    env = dict(os.environ, PYTHONPATH=ROOT)
    env.pop("CAFFECLI_STANDIN_GPU", None)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--junitxml",
         str(report), SUITE], cwd=str(tmp_path), env=env, capture_output=True, text=True,
        timeout=600)
    suite = ElementTree.parse(str(report)).getroot().find("testsuite")
    counts = {k: int(suite.get(k)) for k in ("tests", "failures", "errors", "skipped")}
    assert result.returncode == 0, result.stdout[-4000:]
    assert counts["tests"] >= 52 and counts["failures"] == counts["errors"] == 0, counts
    assert counts["skipped"] == 0, counts


def run_script(path, args, cwd, pythonpath=()):
    """Run a script of the checkout unchanged, as ``python path args`` would but without putting
    the checkout's python/ (BVLC's own caffe package) first on sys.path."""
    code = "import runpy, sys; sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], " \
           "run_name='__main__')"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join((ROOT,) + tuple(pythonpath)))
    env.pop("CAFFECLI_STANDIN_GPU", None)
    return subprocess.run([sys.executable, "-c", code, path] + args, cwd=str(cwd), env=env,
                          capture_output=True, text=True, timeout=300)


def test_bvlc_draw_net_script(tmp_path):
    pytest.importorskip("pydot")
    net = os.path.join(CHECKOUT, "examples", "mnist", "lenet_train_test.prototxt")
    done = run_script(os.path.join(CHECKOUT, "python", "draw_net.py"),
                      [net, "lenet.png", "--rankdir", "TB", "--phase", "TRAIN"], tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "Drawing net to lenet.png"
    with open(tmp_path / "lenet.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n"


TINY = """name: "tiny"
layer { name: "data" type: "Input" top: "data"
  input_param { shape { dim: 3 dim: 3 dim: 24 dim: 24 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 4 kernel_size: 5 stride: 2 weight_filler { type: "xavier" } } }
layer { name: "fc" type: "InnerProduct" bottom: "conv" top: "fc"
  inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.001 } } }
layer { name: "prob" type: "Softmax" bottom: "fc" top: "prob" }
"""


def test_bvlc_classify_script(tmp_path):
    (tmp_path / "deploy.prototxt").write_text(TINY)
    caffe.Net(str(tmp_path / "deploy.prototxt"), caffe.TEST).save(str(tmp_path / "w.caffemodel"))
    numpy.save(tmp_path / "mean.npy", numpy.full((3, 24, 24), 110.0, numpy.float32))
    image = os.path.join(CHECKOUT, "examples", "images", "cat.jpg")
    done = run_script(os.path.join(CHECKOUT, "python", "classify.py"),
                      [image, "out.npy", "--model_def", "deploy.prototxt", "--pretrained_model",
                       "w.caffemodel", "--mean_file", "mean.npy", "--images_dim", "32,32"],
                      tmp_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Classifying 1 inputs." in done.stdout
    out = numpy.load(tmp_path / "out.npy")
    assert out.shape == (1, 5) and abs(out.sum() - 1) < 1e-5


def test_bvlc_python_loss_example(tmp_path):
    layers = os.path.join(CHECKOUT, "examples", "pycaffe", "layers")
    linreg = os.path.join(CHECKOUT, "examples", "pycaffe", "linreg.prototxt")
    script = tmp_path / "linreg.py"
    script.write_text("import caffe\nnet = caffe.Net(%r, caffe.TRAIN)\n"
                      "loss = net.forward()['loss'][0]\nnet.backward()\n"
                      "print(loss > 0, net.params['ipx'][0].diff.any())\n" % linreg)
    done = run_script(str(script), [], tmp_path, pythonpath=(layers,))
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["True", "True"]
