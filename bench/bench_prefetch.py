"""Prefetch overlap: with a slow decode (D ms per batch) and a compute step (C ms), an iteration
takes about max(D, C) with the prefetch thread, and D + C without it.

    python3 bench/bench_prefetch.py [--decode_ms 40] [--compute_ms 60] [--iters 20]

The decode sleeps (as blocking I/O and OpenCV decoding release the GIL); the compute is a
numpy matrix product sized to take about C ms, then padded with a sleep to exactly C.
"""
import argparse
import os
import sys
import time

import numpy

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from caffecli.data.prefetch import Prefetcher  # noqa: E402


def make_decode(ms):
    rs = numpy.random.RandomState(0)

    def decode():
        time.sleep(ms / 1000.0)
        return rs.rand(64, 64).astype(numpy.float32)
    return decode


def make_compute(ms):
    def compute(batch):
        start = time.perf_counter()
        out = batch @ batch.T
        left = ms / 1000.0 - (time.perf_counter() - start)
        if left > 0:
            time.sleep(left)
        return float(out[0, 0])
    return compute


def run(decode_ms, compute_ms, iters, prefetch):
    decode, compute = make_decode(decode_ms), make_compute(compute_ms)
    if prefetch:
        p = Prefetcher(decode, capacity=4)
        p.start()
        compute(p.get())                    # warm-up: the first batch cannot overlap
        start = time.perf_counter()
        for _ in range(iters):
            compute(p.get())
        per = (time.perf_counter() - start) / iters
        p.stop()
    else:
        start = time.perf_counter()
        for _ in range(iters):
            compute(decode())
        per = (time.perf_counter() - start) / iters
    return per * 1000.0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--decode_ms", type=float, default=40.0)
    ap.add_argument("--compute_ms", type=float, default=60.0)
    ap.add_argument("--iters", type=int, default=20)
    a = ap.parse_args()
    print("decode %.1f ms, compute %.1f ms per batch, %d iterations"
          % (a.decode_ms, a.compute_ms, a.iters))
    for d, c in ((a.decode_ms, a.compute_ms), (a.compute_ms, a.decode_ms)):
        serial = run(d, c, a.iters, prefetch=False)
        overlapped = run(d, c, a.iters, prefetch=True)
        print("  decode %5.1f  compute %5.1f | no prefetch %6.1f ms/iter (sum %5.1f) | "
              "prefetch %6.1f ms/iter (max %5.1f)" % (d, c, serial, d + c, overlapped,
                                                       max(d, c)))


if __name__ == "__main__":
    main()
