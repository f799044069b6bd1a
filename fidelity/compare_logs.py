"""Run one command with BVLC's ``caffe`` (on PATH) and with ``caffecli`` in a copy of each case
folder; report where the logs differ in their kinds of lines (tests/test_cli.py's line_kinds),
in the numbers of lines that are not timings, in stdout or in the files written:

    python fidelity/compare_logs.py [--kinds-only] OUT/conv__r0 OUT/net__r3 ... -- time ...

--kinds-only skips the numbers: for a command whose values come from random fills (``time``
without weights), which Caffe draws from its own generator. Lines of the data layers' prefetch
threads ("Waiting for data", "Restarting data prefetching from start.") are left out of both
logs: where they fall depends on the threads' timing. A case's symbolic links (to its data, as
examples.py and mutants.py make them, absolute) are copied as links.
"""
import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests"))
from test_cli import GLOG_LINE, NUMBER, line_kinds  # noqa: E402

TIMING = re.compile(r"iter/s|ms\.|Elapsed|Average|Total Time|ms$")
PREFETCH = re.compile(r"\] (Waiting for data|Restarting data prefetching from start\.)$")


def without_prefetch_lines(text):
    return "\n".join(line for line in text.splitlines() if not PREFETCH.search(line))


def numbers(text):
    """(message, its numbers) for every line but timings."""
    out = []
    for line in text.splitlines():
        m = GLOG_LINE.match(line)
        msg = m.group(7) if m else line
        if not (m and TIMING.search(msg)):
            out.append((msg, [float(x) for x in NUMBER.findall(msg)]))
    return out


def differ(a, b):
    return a != b and not (a != a and b != b) and abs(a - b) > 1e-4 + 1e-3 * abs(a)


def compare(folder, args, kinds_only=False):
    """A list of differences (empty when the logs agree), or None when Caffe itself failed."""
    with tempfile.TemporaryDirectory() as theirs, tempfile.TemporaryDirectory() as ours:
        for t in (theirs, ours):
            shutil.copytree(folder, t, symlinks=True, dirs_exist_ok=True)  # data stay linked
        a = subprocess.run(["caffe"] + args, cwd=theirs, capture_output=True, text=True,
                           env=dict(os.environ, GLOG_logtostderr="1"))
        if a.returncode:
            return None
        b = subprocess.run(["caffecli"] + args, cwd=ours, capture_output=True, text=True)
        files_a = sorted(os.listdir(theirs))
        files_b = sorted(f for f in os.listdir(ours) if not f.endswith(".caffecli"))
    bad = []
    if b.returncode:
        bad.append("caffecli exit %d: %s" % (b.returncode, b.stderr[-300:]))
    log_a, log_b = without_prefetch_lines(a.stderr), without_prefetch_lines(b.stderr)
    ka, kb = line_kinds(log_a), line_kinds(log_b)
    if ka != kb:
        bad.append("\n".join(list(difflib.unified_diff(
            ["%s %s %s" % k for k in ka], ["%s %s %s" % k for k in kb], "caffe", "caffecli",
            lineterm="", n=1))[:30]))
    elif not kinds_only:
        for (ma, xa), (mb, xb) in zip(numbers(log_a), numbers(log_b)):
            if len(xa) != len(xb) or any(differ(p, q) for p, q in zip(xa, xb)):
                bad.append("caffe: %s\n  caffecli: %s" % (ma, mb))
    if a.stdout != b.stdout:
        bad.append("stdout: %r vs %r" % (a.stdout[:300], b.stdout[:300]))
    if files_a != files_b:
        bad.append("files: %s vs %s" % (files_a, files_b))
    return bad


def main():
    if "--" not in sys.argv:
        sys.exit(__doc__)
    split = sys.argv.index("--")
    folders, args = sys.argv[1:split], sys.argv[split + 1:]
    kinds_only = "--kinds-only" in folders
    folders = [f for f in folders if f != "--kinds-only"]
    differing = skipped = 0
    for folder in folders:
        bad = compare(folder, args, kinds_only)
        if bad is None:
            skipped += 1
        elif bad:
            differing += 1
            print("==== %s\n%s" % (folder, "\n".join(bad[:5])))
    print("%d of %d differ (%d skipped: Caffe failed)" % (differing, len(folders), skipped))


if __name__ == "__main__":
    main()
