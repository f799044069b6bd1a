"""Bad input through the command: one ``caffecli: error:`` line naming the problem, exit 1,
no traceback (a real subprocess, as a shell script would see it)."""
import pytest

from test_cli import TINY_NET, run_subprocess

BAD_NETS = {
    "syntax": ('layer { name: "a" type: "Input" top: "a"\n  input_param { shape { dim: 4 } }\n',
               ["bad.prototxt:2:", 'Expected "}"']),
    "unknown_field": ('layer { name: "a" type: "Input" top: "a" input_param { shape { dim: 4 } '
                      'bogus: 3 } }\n', ["bad.prototxt:1:", 'no field named "bogus"']),
    "unknown_type": ('layer { name: "a" type: "Bogus" top: "a" }\n',
                     ["Unknown layer type: Bogus", "known types", "InnerProduct"]),
    "missing_bottom": ('layer { name: "e" type: "ReLU" bottom: "nope" top: "c" }\n',
                       ["Unknown bottom blob 'nope'", "layer 'e'"]),
    "shape_mismatch": ('layer { name: "a" type: "Input" top: "a" input_param { shape { dim: 4 '
                       'dim: 3 } } }\nlayer { name: "b" type: "Input" top: "b" input_param { '
                       'shape { dim: 4 dim: 2 } } }\nlayer { name: "e" type: "Eltwise" '
                       'bottom: "a" bottom: "b" top: "c" }\n',
                       ["Layer e (Eltwise)", "4 3 (12)", "4 2 (8)"]),
    "wrong_bottom_count": ('layer { name: "a" type: "Input" top: "a" input_param { shape { '
                           'dim: 4 } } }\nlayer { name: "s" type: "Softmax" bottom: "a" '
                           'bottom: "a" top: "c" }\n', ["s", "Softmax", "bottom"]),
}


def assert_one_line_error(proc, *needles):
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    errors = [l for l in proc.stderr.splitlines() if l.startswith("caffecli: error: ")]
    assert len(errors) == 1, proc.stderr[-2000:]
    for n in needles:
        assert n in errors[0], errors[0]


@pytest.mark.parametrize("kind", sorted(BAD_NETS))
def test_bad_net_is_one_line(tmp_path, kind):
    text, needles = BAD_NETS[kind]
    (tmp_path / "bad.prototxt").write_text(text)
    proc = run_subprocess(["time", "-model", "bad.prototxt", "-iterations", "1"], tmp_path)
    assert_one_line_error(proc, *needles)


def test_weights_that_do_not_fit_name_layer_and_shapes(tmp_path):
    (tmp_path / "a.prototxt").write_text(TINY_NET)
    (tmp_path / "b.prototxt").write_text(TINY_NET.replace("num_output: 2", "num_output: 3"))
    import caffecli
    caffecli.Net(str(tmp_path / "a.prototxt"), caffecli.TEST).save(str(tmp_path / "a.caffemodel"))
    proc = run_subprocess(["test", "-model", "b.prototxt", "-weights", "a.caffemodel",
                           "-iterations", "1"], tmp_path)
    assert_one_line_error(proc, "a.caffemodel", "'ip'", "2 3 (6)", "3 3 (9)")


@pytest.mark.parametrize("args", [["time", "-model", "missing.prototxt"],
                                  ["train", "-solver", "missing_solver.prototxt"],
                                  ["test", "-model", "m.prototxt", "-weights", "missing.caffemodel"]])
def test_missing_file_is_one_line(tmp_path, args):
    (tmp_path / "m.prototxt").write_text(TINY_NET)
    proc = run_subprocess(args, tmp_path)
    assert_one_line_error(proc, "missing")
