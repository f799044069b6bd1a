"""Make random cases in the golden format with BVLC Caffe (its pycaffe on PYTHONPATH):

    python -m fidelity.make_cases OUT [--kinds layers,nets,solvers,data] [--count N]
                                      [--seed S] [--v1] [--families conv,pool,...]

then replay them against caffecli with CAFFECLI_GOLDEN=OUT pytest tests/test_golden_*.py.
Configurations Caffe aborts on land in OUT/aborted/ with its message (check_refusals.py runs
them through caffecli, which should refuse them too).
"""
import argparse
import os
import zlib

import numpy

from . import data_cases, solver_cases, specs_more, specs_net, specs_vision
from .writer import write_layer_case

LAYER_FAMILIES = dict(specs_vision.FAMILIES, **specs_more.FAMILIES)


def _seed(base, name, i):
    return base + 7919 * i + zlib.crc32(name.encode()) % 1000


def layers(out, args):
    convert = None
    if args.v1:
        from .v1 import convert as to_v1     # needs BVLC's caffe_pb2: imported only here
        convert = to_v1
    made = 0
    for fam in args.families.split(",") if args.families else sorted(LAYER_FAMILIES):
        for i in range(args.count):
            seed = _seed(args.seed, fam, i)
            spec = LAYER_FAMILIES[fam](numpy.random.RandomState(seed))
            made += write_layer_case(out, "%s__r%d" % (fam, i), spec, seed, convert)
    return made


def nets(out, args):
    made = 0
    for i in range(args.count):
        seed = _seed(args.seed, "net", i)
        spec = specs_net.g_net(numpy.random.RandomState(seed))
        made += write_layer_case(out, "net__r%d" % i, spec, seed)
    return made


def solvers(out, args):
    made = sum(solver_cases.write_solver_case(out, "solver__r%d" % i, _seed(args.seed, "s", i))
               for i in range(args.count))
    return made + sum(solver_cases.write_solver_case(
        out, "solver__net%d" % i, _seed(args.seed, "sn", i), solver_cases.random_net)
        for i in range(args.count))


def data(out, args):
    return sum(data_cases.write_data_case(out, kind, "data__%s_r%d" % (kind, i),
                                          _seed(args.seed, kind, i))
               for kind in sorted(data_cases.GENERATORS) for i in range(args.count))


KINDS = {"layers": layers, "nets": nets, "solvers": solvers, "data": data}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out")
    parser.add_argument("--kinds", default=",".join(KINDS))
    parser.add_argument("--count", type=int, default=10, help="cases per family or kind")
    parser.add_argument("--seed", type=int, default=1000)
    parser.add_argument("--v1", action="store_true", help="layer nets in the V1 format")
    parser.add_argument("--families", default="", help="layer families (default: all)")
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for kind in args.kinds.split(","):
        print("%s: %d cases" % (kind, KINDS[kind](args.out, args)), flush=True)


if __name__ == "__main__":
    main()
