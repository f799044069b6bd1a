"""Scaling across processes: BVLC's LeNet trained by 1 process and by 2 MPI ranks on this
machine, in iterations and images per second.

    python3 bench/bench_mpi.py [--iters 300] [--display 50]

Needs the [mpi] extra (mpi4py and MPICH's mpiexec). Runs, over a generated LMDB of 28x28
digits-like images: 1 process with batch 64 (BLAS threads as the machine gives, then 1 thread),
2 ranks of batch 32 (the same effective batch: strong scaling) and 2 ranks of batch 64 (twice the
images per iteration: weak scaling). The rate is the mean of the solver's own ``iter/s`` figures
after the first display.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile

import numpy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from caffecli.data import db  # noqa: E402
from caffecli.proto import caffe_pb2  # noqa: E402

RATE = re.compile(r"Iteration \d+ \(([\d.e+-]+) iter/s")


def write_lmdb(path, count=2000):
    rng = numpy.random.default_rng(0)
    with db.open_writer(path, "lmdb") as out:
        for i in range(count):
            label = int(rng.integers(0, 10))
            pixels = (rng.random((28, 28)) * 60).astype(numpy.uint8)
            pixels[2 + 2 * label:4 + 2 * label, 4:24] = 250
            datum = caffe_pb2.Datum(channels=1, height=28, width=28, label=label,
                                    data=pixels.tobytes())
            out.put("%08d" % i, datum.SerializeToString())


def solver_for(folder, batch, iters, display):
    with open(os.path.join(ROOT, "models/lenet/lenet_train_test.prototxt")) as f:
        net = f.read().replace("data/mnist/mnist_train_lmdb", folder + "/lmdb")
    net = net.replace("data/mnist/mnist_test_lmdb", folder + "/lmdb")
    net_path = os.path.join(folder, "net%d.prototxt" % batch)
    with open(net_path, "w") as f:
        f.write(net.replace("batch_size: 64", "batch_size: %d" % batch, 1))
    path = os.path.join(folder, "solver%d.prototxt" % batch)
    with open(path, "w") as f:
        f.write('net: "%s"\nbase_lr: 0.01\nmomentum: 0.9\nweight_decay: 0.0005\n'
                'lr_policy: "inv"\ngamma: 0.0001\npower: 0.75\ndisplay: %d\nmax_iter: %d\n'
                'snapshot_after_train: false\nrandom_seed: 1\n' % (net_path, display, iters))
    return path


def rate(cmd, env):
    out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                         text=True, check=True).stdout
    rates = [float(r) for r in RATE.findall(out)][1:]  # the first display counts start-up
    return sum(rates) / len(rates)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=300)
    ap.add_argument("--display", type=int, default=50)
    args = ap.parse_args()
    mpiexec = shutil.which("mpiexec", path=sysconfig.get_path("scripts")) or "mpiexec"
    train = [sys.executable, "-m", "caffecli", "train", "--solver"]
    folder = tempfile.mkdtemp(prefix="bench_mpi_")
    try:
        write_lmdb(os.path.join(folder, "lmdb"))
        env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
        one = dict(env, OMP_NUM_THREADS="1")
        runs = [("1 process, batch 64, default BLAS threads", 64, [], env),
                ("1 process, batch 64, 1 BLAS thread", 64, [], one),
                ("2 ranks, batch 32 each (same batch)", 32, [mpiexec, "-n", "2"], env),
                ("2 ranks, batch 64 each (twice the batch)", 64, [mpiexec, "-n", "2"], env)]
        print("load average before: %.1f (other work on the machine skews the figures)"
              % os.getloadavg()[0])
        print("%-44s %10s %10s" % ("LeNet, %d iterations" % args.iters, "iter/s", "images/s"))
        for name, batch, launch, run_env in runs:
            solver = solver_for(folder, batch, args.iters, args.display)
            per_s = rate(launch + train + [solver], run_env)
            print("%-44s %10.1f %10.0f" % (name, per_s, per_s * batch * (2 if launch else 1)))
        print("load average after: %.1f" % os.getloadavg()[0])
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
