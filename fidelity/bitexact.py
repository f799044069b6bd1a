"""How many of a golden corpus's values caffecli reproduces to the bit, family by family: each
layer case run on the CPU (forward blobs, loss, input and parameter gradients) and each solver
case's parameters after every iteration, compared bitwise rather than within tolerance.

    .venv/bin/python -m fidelity.bitexact                  # ../shared/golden
    CAFFECLI_GOLDEN=/tmp/cases .venv/bin/python -m fidelity.bitexact --families lrn,softmax
"""
import argparse
import collections
import io
import os
import sys
import tempfile


ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests")]


def layer_counts(names):
    """{family: [values, values not bit-exact]} over the layer cases ``names``."""
    import golden
    counts = collections.defaultdict(lambda: [0, 0])
    current = []

    def count(got, want, rtol, atol, what):
        total, bad = golden.differing_bits(got, want)
        counts[current[0]][0] += total
        counts[current[0]][1] += bad
    golden.assert_close = count
    for name in names:
        current[:] = [name.split("__")[0]]
        golden.run_layer_case(name)
    return counts


def solver_iterations(names):
    """{case: the first iteration whose parameters are not Caffe's bits, or None}."""
    import golden
    first = {}
    cwd = os.getcwd()
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:
            case = golden.writable_case(name, tmp)
            os.chdir(tmp)
            try:
                first[name] = next((it for it, params in golden.solver_steps(case)
                                    if any(golden.differing_bits(got, want)[1]
                                           for _, _, got, want in params)), None)
            finally:
                os.chdir(cwd)
    return first


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--families", help="comma-separated case families (default: all)")
    args = parser.parse_args(argv)
    import golden
    from caffecli import glog
    glog.set_stream(io.StringIO())
    wanted = set(args.families.split(",")) if args.families else None
    names = [n for n in golden.case_names(exclude={"data", "cli"})
             if wanted is None or n.split("__")[0] in wanted]
    counts = layer_counts([n for n in names if not n.startswith("solver__")])
    total = [0, 0]
    for family in sorted(counts):
        values, bad = counts[family]
        total[0] += values
        total[1] += bad
        print("%-14s %8d values, %7d not bit-exact (%.1f%%)" % (family, values, bad,
                                                               100.0 * bad / max(values, 1)))
    print("layer cases: %d values, %d not bit-exact (%.2f%%)"
          % (total[0], total[1], 100.0 * total[1] / max(total[0], 1)))
    first = solver_iterations([n for n in names if n.startswith("solver__")])
    for name, it in sorted(first.items()):
        print("%-40s %s" % (name, "bit-exact throughout" if it is None
                            else "first differs after iteration %d" % it))
    if first:
        print("solver cases: %d of %d bit-exact throughout"
              % (sum(it is None for it in first.values()), len(first)))


if __name__ == "__main__":
    main()
