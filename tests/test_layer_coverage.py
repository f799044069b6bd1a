"""Every BVLC layer type is registered, and every registered type has numeric and gradient tests.

Numeric coverage comes from the golden cases the golden tests replay (their nets' layer types,
collected automatically) plus an explicit map for the rest; gradient coverage is found by
scanning the test files for tests that call check_gradient on a net naming the type.
"""
import ast
import glob
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

import caffecli
from caffecli.cli.main import cli
from caffecli.layer import Layer
from caffecli.proto import caffe_pb2
from caffecli.proto.io import read_text
from caffecli.proto.upgrade import upgrade_net_as_needed
from caffecli.registry import _REGISTRY, layer_types, module_name
from golden import Case, require_golden

TESTS = os.path.dirname(os.path.abspath(__file__))

# The 61 types BVLC Caffe master (9b89154) registers: the first argument of every
# REGISTER_LAYER_CLASS / REGISTER_LAYER_CREATOR in src/caffe/layers/*.cpp and
# src/caffe/layer_factory.cpp (Convolution, Pooling, LRN, ReLU, Sigmoid, Softmax, TanH and
# Python are creators there), deduplicated and sorted.
BVLC_TYPES = [
    "AbsVal", "Accuracy", "ArgMax", "BNLL", "BatchNorm", "BatchReindex", "Bias", "Clip",
    "Concat", "ContrastiveLoss", "Convolution", "Crop", "Data", "Deconvolution", "Dropout",
    "DummyData", "ELU", "Eltwise", "Embed", "EuclideanLoss", "Exp", "Filter", "Flatten",
    "HDF5Data", "HDF5Output", "HingeLoss", "Im2col", "ImageData", "InfogainLoss", "InnerProduct",
    "Input", "LRN", "LSTM", "LSTMUnit", "Log", "MVN", "MemoryData", "MultinomialLogisticLoss",
    "PReLU", "Parameter", "Pooling", "Power", "Python", "RNN", "ReLU", "Reduction", "Reshape",
    "SPP", "Scale", "Sigmoid", "SigmoidCrossEntropyLoss", "Silence", "Slice", "Softmax",
    "SoftmaxWithLoss", "Split", "Swish", "TanH", "Threshold", "Tile", "WindowData",
]

# Types no golden case builds: the test that checks their numbers by hand.
HAND_NUMERIC = {
    "HDF5Output": "test_data_misc_layers.py::test_hdf5_output_writes_data_and_label",
    "MemoryData": "test_data_misc_layers.py::test_memory_data_batches_wrap_and_label_shape",
    "WindowData": "test_data_misc_layers.py::test_window_data_samples_fg_and_bg_windows",
}

# Types whose backward does something but that a finite-difference check of the layer alone
# cannot test (their top shares the bottom's diff, or the gradient is zero by definition):
# the test that checks their backward instead.
BACKWARD_WITHOUT_GRADCHECK = {
    "Flatten": "test_layers_structure.py::test_flatten_and_reshape_share_data_and_diff",
    "Reshape": "test_layers_structure.py::test_reshape_in_a_net_passes_gradients",
    "Silence": "test_layers_structure.py::test_silence_zeroes_diffs",
}

# Types whose backward computes nothing (Caffe's is NOT_IMPLEMENTED or empty).
NO_GRADIENT = {"Accuracy", "ArgMax", "Threshold", "HDF5Output"}

# Test files that only run with a GPU do not count as coverage on a CPU machine.
GPU_ONLY = {"test_gpu.py"}


def _golden_case_names():
    """The cases the golden test files actually replay (their parametrize lists)."""
    import test_golden_data
    import test_golden_layers
    import test_golden_solvers
    return test_golden_layers.CASES + test_golden_data.CASES + test_golden_solvers.CASES


def _net_types(path):
    """Layer types in a net prototxt, after upgrading V0/V1 nets as Net does."""
    param = read_text(path, caffe_pb2.NetParameter())
    upgrade_net_as_needed(param, path)
    return {layer.type for layer in param.layer}


def _test_exists(ref):
    """``file.py::test_name`` names a top-level test function in tests/."""
    fname, func = ref.split("::")
    path = os.path.join(TESTS, fname)
    if not os.path.exists(path):
        return False
    tree = ast.parse(open(path).read())
    return any(isinstance(n, ast.FunctionDef) and n.name == func for n in tree.body)


def _gradient_tests():
    """type -> ["file::test"] for tests whose body (with decorators and the module-level
    constants and helpers it names) calls check_gradient and spells ``"Type"``."""
    found = {}
    for path in sorted(glob.glob(os.path.join(TESTS, "test_*.py"))):
        fname = os.path.basename(path)
        if fname in GPU_ONLY:
            continue
        src = open(path).read()
        tree = ast.parse(src)
        named = {}
        for node in tree.body:
            if isinstance(node, ast.Assign):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        named[t.id] = ast.get_source_segment(src, node)
            elif isinstance(node, ast.FunctionDef) and not node.name.startswith("test_"):
                named[node.name] = ast.get_source_segment(src, node)
        for node in tree.body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test_")):
                continue
            body = ast.get_source_segment(src, node)
            if "check_gradient(" not in body:
                continue
            parts = [body] + [ast.get_source_segment(src, d) for d in node.decorator_list]
            names = {n.id for d in [node] + node.decorator_list for n in ast.walk(d)
                     if isinstance(n, ast.Name)}
            text = "\n".join(parts + [named[n] for n in names if n in named])
            for t in _builtin_types():
                if '"%s"' % t in text:
                    found.setdefault(t, []).append("%s::%s" % (fname, node.name))
    return found


def _builtin_types():
    """Registered types that caffecli itself defines (tests register a few of their own)."""
    layer_types()
    return sorted(t for t, c in _REGISTRY.items()
                  if getattr(c, "__module__", "").startswith("caffecli."))


CREATED_BY_FUNCTION = {"Python": True}  # type -> whether its layers have a backward


def _has_backward(type_name):
    creator = _REGISTRY[type_name]
    if not isinstance(creator, type):
        assert type_name in CREATED_BY_FUNCTION, \
            "%s is registered as a creator: say whether it has a backward" % type_name
        return CREATED_BY_FUNCTION[type_name]
    return creator.backward is not Layer.backward and type_name not in NO_GRADIENT


_GRADIENT_TESTS = _gradient_tests()


# ---- (a) every BVLC type is registered ---------------------------------------------------
def test_bvlc_list_has_61_distinct_types():
    assert len(BVLC_TYPES) == 61 == len(set(BVLC_TYPES))


def test_every_bvlc_type_is_registered():
    missing = sorted(set(BVLC_TYPES) - set(caffecli.layer_type_list()))
    assert not missing, "BVLC layer types caffecli does not register: %s" % missing


def test_layers_command_lists_every_bvlc_type():
    result = CliRunner().invoke(cli, ["layers"])
    assert result.exit_code == 0, result.output
    listed = result.output.split()
    assert listed == sorted(listed) == layer_types()
    assert set(BVLC_TYPES) <= set(listed)


# ---- (b) numbers checked for every registered type ---------------------------------------
def test_every_registered_type_has_a_numeric_test():
    require_golden()
    golden = set()
    for name in _golden_case_names():
        net = Case(name).path("net.prototxt")
        if os.path.exists(net):
            golden |= _net_types(net)
    assert {"Convolution", "LSTM", "Data", "Python"} <= golden  # the scan itself works
    for t, ref in HAND_NUMERIC.items():
        assert _test_exists(ref), "%s: %s does not exist" % (t, ref)
    uncovered = sorted(set(_builtin_types()) - golden - set(HAND_NUMERIC))
    assert not uncovered, ("registered types with neither a golden case nor an entry in "
                           "HAND_NUMERIC: %s" % uncovered)
    stale = sorted(set(HAND_NUMERIC) & golden)
    assert not stale, "HAND_NUMERIC entries now covered by golden cases: %s" % stale


@pytest.mark.parametrize("type_name", _builtin_types())
def test_type_with_backward_has_gradient_test(type_name):
    if not _has_backward(type_name):
        return
    found = _GRADIENT_TESTS.get(type_name, [])
    if type_name in BACKWARD_WITHOUT_GRADCHECK:
        ref = BACKWARD_WITHOUT_GRADCHECK[type_name]
        assert _test_exists(ref), "%s: %s does not exist" % (type_name, ref)
        assert not found, "%s has a gradient check now (%s): drop it from " \
                          "BACKWARD_WITHOUT_GRADCHECK" % (type_name, found)
        return
    assert found, "%s has a backward but no test calls check_gradient on it" % type_name


def test_gradient_scan_finds_known_tests():
    assert "test_layers_vision.py::test_convolution_gradient" in _GRADIENT_TESTS["Convolution"]
    assert "Accuracy" not in _GRADIENT_TESTS



# ---- (d) a layer's file is predictable from its type -------------------------------------
def test_each_builtin_type_lives_in_the_module_named_after_it():
    for type_name in _builtin_types():
        creator = _REGISTRY[type_name]
        assert creator.__module__ == "caffecli.layers." + module_name(type_name), type_name


def test_module_names_follow_the_rule():
    assert [module_name(t) for t in ("ReLU", "PReLU", "TanH", "InnerProduct", "HDF5Data",
                                     "LSTMUnit", "SigmoidCrossEntropyLoss", "Im2col")] == \
        ["relu", "prelu", "tanh", "inner_product", "hdf5_data", "lstm_unit",
         "sigmoid_cross_entropy_loss", "im2col"]


def test_a_net_imports_only_the_layer_modules_it_uses():
    code = ("import sys, caffecli\n"
            "from caffecli.proto import caffe_pb2\n"
            "from caffecli.proto.io import parse_text\n"
            "p = parse_text('layer { name: \"x\" type: \"Input\" top: \"x\" input_param { shape "
            "{ dim: 1 } } } layer { name: \"r\" type: \"ReLU\" bottom: \"x\" top: \"y\" }', "
            "caffe_pb2.NetParameter())\n"
            "caffecli.Net(p, caffecli.TEST, log=False)\n"
            "print(sorted(m for m in sys.modules if m.startswith('caffecli.layers.')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "['caffecli.layers.input', 'caffecli.layers.relu']"
