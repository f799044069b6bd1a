"""BVLC's own pycaffe suite (python/caffe/test/*.py of a BVLC/caffe checkout named by
BVLC_CAFFE_ROOT), run unchanged against this package's ``import caffe``; every test must pass."""
import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree

import pytest

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
