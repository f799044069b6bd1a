"""Puts the package and the test helpers on sys.path; shared fixtures."""
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
