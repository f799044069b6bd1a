"""Puts the package and the test helpers on sys.path; shared fixtures.

Test modules marked ``pytestmark = pytest.mark.devices`` run every test twice: ``[cpu]`` and
``[gpu]``. GPU mode uses the real GPU when cupy finds one, else the stand-in device
(caffecli.standin), so CI, which has no GPU, runs every device path too.
"""
import atexit
import io
import os
import shutil
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
sys.path.insert(0, ROOT)

# glog's files from the commands the tests run (in-process and subprocesses) go here, not /tmp
LOG_DIR = tempfile.mkdtemp(prefix="caffecli-test-logs-")
os.environ["GLOG_log_dir"] = LOG_DIR
atexit.register(shutil.rmtree, LOG_DIR, True)


def pytest_generate_tests(metafunc):
    """``devices``-marked tests run in CPU and GPU mode (eager: CAFFECLI_CUDA_GRAPHS=0);
    ``devices(graphs=True)`` also in GPU mode with CUDA graphs on."""
    marker = metafunc.definition.get_closest_marker("devices")
    if marker and "device_mode" in metafunc.fixturenames:
        modes = ["cpu", "gpu"] + (["gpu-graphs"] if marker.kwargs.get("graphs") else [])
        metafunc.parametrize("device_mode", modes, indirect=True)


def real_gpu_reason():
    """None when cupy has a usable GPU here, else why not."""
    from caffecli import backend
    old = os.environ.pop("CAFFECLI_STANDIN_GPU", None)
    try:
        return backend.unavailable_reason(0)
    finally:
        if old is not None:
            os.environ["CAFFECLI_STANDIN_GPU"] = old


def enter_gpu_mode(monkeypatch):
    """GPU mode on the real GPU, or on the stand-in device where there is none."""
    from caffecli import context
    if real_gpu_reason() is not None:
        monkeypatch.setenv("CAFFECLI_STANDIN_GPU", "1")
    context.set_device(0)
    context.set_mode_gpu()


@pytest.fixture(autouse=True)
def fresh_logging():
    """Each test starts with the logging configuration the session started with (an
    in-process command may start glog's files or silence it after its error line)."""
    from caffecli import glog
    saved = glog.snapshot_config()
    yield
    glog.restore_config(saved)


@pytest.fixture(autouse=True)
def device_mode(request, monkeypatch):
    """The mode a test runs in ("cpu" unless its module is marked ``devices``)."""
    from caffecli import context
    mode = getattr(request, "param", "cpu")
    if mode.startswith("gpu"):
        enter_gpu_mode(monkeypatch)
        monkeypatch.setenv("CAFFECLI_CUDA_GRAPHS", "1" if mode == "gpu-graphs" else "0")
    yield mode
    context.set_mode_cpu()


@pytest.fixture
def gpu_mode(monkeypatch):
    """GPU mode for one test (real GPU or stand-in)."""
    from caffecli import context
    enter_gpu_mode(monkeypatch)
    yield
    context.set_mode_cpu()


@pytest.fixture
def batched_convolution(monkeypatch):
    """Convolutions over a chunk's columns (im2col and wide GEMMs) even where products image by
    image (kernels/conv_jit.py) would be chosen, for every gradient: for tests of the batched
    path's own steps."""
    from caffecli.layers import _base_conv, convolution
    monkeypatch.setattr(_base_conv, "IMAGE_MAX_INNER", 0)
    monkeypatch.setattr(convolution, "DOWN_MAX_MACS", 0)


@pytest.fixture(params=["by-image", "batched"])
def conv_algorithm(request, monkeypatch):
    """The test twice: convolutions image by image where conv_jit applies (the default for
    narrow kernels), then over batched columns everywhere."""
    if request.param == "batched":
        from caffecli.layers import _base_conv, convolution
        monkeypatch.setattr(_base_conv, "IMAGE_MAX_INNER", 0)
        monkeypatch.setattr(convolution, "DOWN_MAX_MACS", 0)
    return request.param


@pytest.fixture
def standin(monkeypatch):
    """The stand-in device module (caffecli.standin), in use, its copy counters at zero."""
    from caffecli import context, standin as module
    monkeypatch.setenv("CAFFECLI_STANDIN_GPU", "1")
    module.reset_transfers()
    yield module
    context.set_mode_cpu()


@pytest.fixture
def logs():
    """glog lines written during the test, as a StringIO."""
    from caffecli import glog
    buf = io.StringIO()
    glog.set_stream(buf)
    yield buf
    glog.set_stream(None)


def pytest_terminal_summary(terminalreporter):
    """One line, not one per test, saying why the golden cases did not run."""
    from golden import MISSING, golden_dir
    if golden_dir() is None:
        terminalreporter.write_line("golden tests skipped: " + MISSING)
