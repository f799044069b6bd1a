"""The configurations BVLC Caffe aborted on (OUT/aborted/*, from make_cases.py): does caffecli
refuse them too? Prints ACCEPTED for those it runs through, with Caffe's message:

    python fidelity/check_refusals.py OUT/aborted
"""
import json
import os
import sys

import numpy

from caffecli import Net
from caffecli.proto import caffe_pb2


def fatal_line(folder):
    lines = [line for line in open(os.path.join(folder, "stderr.txt")) if line.startswith("F")]
    return lines[0].split("] ", 1)[-1].strip() if lines else "?"


def main():
    root = sys.argv[1]
    for name in sorted(os.listdir(root)):
        folder = os.path.join(root, name)
        spec_path = os.path.join(folder, "spec.json")
        if not os.path.exists(spec_path):     # solver and data cases: not replayed here
            continue
        spec = json.load(open(spec_path))
        inputs = numpy.load(os.path.join(folder, "inputs.npz"))
        try:
            net = Net(os.path.join(folder, "net.prototxt"), getattr(caffe_pb2, spec["phase"]),
                      log=False)
            for key in inputs.files:
                net.blob_by_name(key).data[...] = inputs[key]
            net.forward_pass()
            if spec["backward"]:
                net.backward_pass()
            print("ACCEPTED %-22s Caffe: %s" % (name, fatal_line(folder)[:120]))
        except Exception as exc:   # noqa: BLE001 - a refusal is what we look for
            print("refused  %-22s %s" % (name, str(exc)[:120]))


if __name__ == "__main__":
    main()
