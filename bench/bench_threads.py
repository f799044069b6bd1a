"""Where the cores go: caffecli's forward-backward at several thread counts, each layer type's
time split into its matrix products and the rest, next to PyTorch CPU at the same count, and the
cost of one hand-off to the kernel threads (kernels/threads.py). One run shows which part
stops scaling on a many-core machine.

Run by hand from the repository root (PyTorch is not a dependency of caffecli):

    python bench/bench_threads.py                       # LeNet at 1, 2, 4, ... cores
    python bench/bench_threads.py --nets lenet,caffenet --threads 1,2,4,8,16

Each thread count runs in its own process with OMP_NUM_THREADS set before numpy and torch
load, so BLAS, caffecli's kernel threads and torch all get that count. Figures are medians.
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def product_timer():
    """Wrap the host products of kernels/gemm.py (BLAS and the compiled few-row loops of
    kernels/skinny_jit.py); returns the running total of their seconds."""
    from caffecli.kernels import gemm, skinny_jit
    spent = [0.0]

    def wrap(module, name):
        real = getattr(module, name)

        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                spent[0] += time.perf_counter() - t
        setattr(module, name, timed)
    wrap(gemm, "_host_gemm")
    wrap(skinny_jit, "product")
    wrap(skinny_jit, "rows_product")
    return spent


def handoff_us(reps=300):
    """Microseconds of one for_parts over every thread with nothing to do."""
    import numpy
    from caffecli.kernels.threads import for_parts
    runs = []
    for _ in range(reps):
        t = time.perf_counter()
        for_parts(numpy, lambda a, b: None, 1 << 20, 1 << 40)
        runs.append(time.perf_counter() - t)
    return statistics.median(runs) * 1e6


def probe(nets, rounds):
    """This process's figures (one thread count) as a dict, printed as JSON."""
    import bench_cpu
    import torch
    kernel_threads = bench_cpu.start_kernel_threads()
    from caffecli.kernels.threads import num_threads
    torch.set_num_threads(num_threads())
    spent = product_timer()
    out = {"threads": num_threads(), "handoff_us": handoff_us(), "nets": {},
           "kernel_threads": kernel_threads}
    for name in nets:
        net = bench_cpu.caffecli_net(bench_cpu.NETS[name])
        twin = bench_cpu.torch_twin(net)
        twin()
        bench_cpu.caffecli_pass(net)   # after torch's: its threads spin a while after a pass
        passes, theirs = [], []
        kinds = collections.defaultdict(lambda: ([], []))
        for _ in range(rounds):
            t = time.perf_counter()
            bench_cpu.caffecli_pass(net)
            passes.append(time.perf_counter() - t)
            layer_total, layer_products = bench_cpu.layer_pass_by_type(net, spent)
            for kind in layer_total:
                kinds[kind][0].append(layer_total[kind])
                kinds[kind][1].append(layer_products[kind])
        twin()   # torch's threads last: they spin a while after each pass, taking the cores
        for _ in range(rounds):
            t = time.perf_counter()
            twin()
            theirs.append(time.perf_counter() - t)
        ms = lambda runs: statistics.median(runs) * 1e3  # noqa: E731
        out["nets"][name] = {"caffecli": ms(passes), "pytorch": ms(theirs),
                             "types": {k: [ms(v[0]), ms(v[1])] for k, v in kinds.items()}}
    print(json.dumps(out))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cores = len(os.sched_getaffinity(0))
    counts = sorted({1, cores} | {2 ** i for i in range(1, 8) if 2 ** i < cores})
    parser.add_argument("--nets", default="lenet")
    parser.add_argument("--threads", default=",".join(map(str, counts)),
                        help="comma-separated thread counts (default 1, 2, 4, ... cores)")
    parser.add_argument("--rounds", type=int, default=15, help="timed passes per count")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    nets = args.nets.split(",")
    if args.probe:
        probe(nets, args.rounds)
        return
    try:
        import torch  # noqa: F401
    except ImportError:
        raise SystemExit("PyTorch is needed for the comparison: pip install torch (CPU wheel)")
    import bench_cpu
    model, _ = bench_cpu.machine()
    print("machine: %s, %d cores; ms per forward-backward (every gradient), medians of %d"
          % (model, cores, args.rounds))
    results = []
    for count in args.threads.split(","):
        env = dict(os.environ, OMP_NUM_THREADS=count)
        proc = subprocess.run([sys.executable, os.path.abspath(__file__), "--probe", "--nets",
                               args.nets, "--rounds", str(args.rounds)], env=env, cwd=ROOT,
                              capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit("the probe at %s threads failed:\n%s" % (count, proc.stderr))
        results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
    print("caffecli's compiled kernels on " + results[-1]["kernel_threads"])
    header = "%-34s" % "threads" + "".join("%9d" % r["threads"] for r in results)
    print(header)
    print("%-34s" % "hand-off to the kernel threads, us"
          + "".join("%9.0f" % r["handoff_us"] for r in results))
    for name in nets:
        rows = [("%s caffecli" % name, lambda r: r["caffecli"]),
                ("%s pytorch" % name, lambda r: r["pytorch"]),
                ("%s ratio" % name, lambda r: r["caffecli"] / r["pytorch"])]
        first = results[0]["nets"][name]["types"]
        for kind in sorted(first, key=lambda k: -first[k][0]):
            # a type that is small on one core may be what stops scaling on many
            if all(r["nets"][name]["types"][kind][0] < 0.04 * r["nets"][name]["caffecli"]
                   for r in results):
                continue
            rows.append(("  %s products" % kind, lambda r, k=kind: r["types"][k][1]))
            rows.append(("  %s rest" % kind, lambda r, k=kind: r["types"][k][0] - r["types"][k][1]))
        for label, value in rows:
            print("%-34s" % label + "".join("%9.2f" % value(r["nets"][name]) for r in results))
    print("products = the layer type's matrix products (kernels/gemm.py: BLAS, and the few-row "
          "loops of kernels/skinny_jit.py); rest = everything else in its Forward and Backward")


if __name__ == "__main__":
    main()
