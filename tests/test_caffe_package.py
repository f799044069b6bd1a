"""``import caffe``: pycaffe's names and module paths over caffecli, and a real pycaffe earlier on
PYTHONPATH still winning."""
import os
import subprocess
import sys

import caffe
import caffecli
import caffecli.pycaffe

PYCAFFE_NAMES = ["Net", "SGDSolver", "NesterovSolver", "AdaGradSolver", "RMSPropSolver",
                 "AdaDeltaSolver", "AdamSolver", "Layer", "get_solver", "set_mode_cpu",
                 "set_mode_gpu", "set_device", "set_random_seed", "init_log", "log",
                 "layer_type_list", "solver_count", "solver_rank", "set_solver_count",
                 "set_solver_rank", "set_multiprocess", "has_nccl", "NCCL", "Timer",
                 "__version__", "TRAIN", "TEST", "io",
                 "layers", "params", "NetSpec", "to_proto", "Classifier", "Detector", "proto",
                 "net_spec", "draw", "coord_map", "classifier", "detector", "pycaffe"]


def test_caffe_has_pycaffes_names_and_the_facades():
    assert [n for n in PYCAFFE_NAMES if not hasattr(caffe, n)] == []
    assert all(getattr(caffe, n) is getattr(caffecli.pycaffe, n) for n in caffecli.pycaffe.__all__)
    assert caffe.Net is caffecli.Net and caffe.TEST == caffecli.TEST == 1
    assert caffe.io is sys.modules["caffe.io"] is sys.modules["caffecli.pycaffe.io"]
    assert caffe.proto.caffe_pb2 is sys.modules["caffecli.proto.caffe_pb2"]
    assert issubclass(caffe.Classifier, caffe.Net) and issubclass(caffe.Detector, caffe.Net)


def _run(code, env=None, cwd=None):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, cwd=cwd)


def test_pycaffe_import_forms_work_in_a_fresh_interpreter(tmp_path):
    code = ("import caffe.proto.caffe_pb2, caffe.io, caffe.draw\n"
            "from caffe import layers as L, params as P\n"
            "from caffe.proto import caffe_pb2\n"
            "from caffe.coord_map import crop\n"
            "from caffe.net_spec import NetSpec\n"
            "from caffe.classifier import Classifier\n"
            "from caffe.pycaffe import Net, SGDSolver\n"
            "import caffecli as c2\n"
            "print(caffe_pb2.NetParameter.__name__, L.ReLU.__name__, P.Pooling.MAX,\n"
            "      caffe.Net is c2.Net)")
    result = _run(code, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["NetParameter", "layer_fn", "0", "True"]


def test_a_pycaffe_earlier_on_pythonpath_wins(tmp_path):
    fake = tmp_path / "caffe"
    fake.mkdir()
    (fake / "__init__.py").write_text("REAL_PYCAFFE = True\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    result = _run("import caffe; print(caffe.__file__, caffe.REAL_PYCAFFE)", env=env,
                  cwd=os.path.dirname(str(tmp_path)))
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str(fake / "__init__.py"), "True"]
