"""Host array work split across the cores: numpy releases the GIL inside large operations, so a
pool of threads running the same numpy code on disjoint slices (images of a batch, channels)
keeps every core busy where one numpy call would use one. The calling thread runs the first
part itself, so a split of two costs one hand-off (about 0.1 ms on the 2-core EPYC, half of
handing both parts to the pool).

Each part writes its own slice and nothing is summed across parts, so the results are the same
bits for any thread count. The count follows OMP_NUM_THREADS, else the CPU affinity, as BLAS's
does; device arrays (and one thread) run the whole range in one call: the reference path.
"""
import concurrent.futures
import os

import numpy

MIN_PART_ELEMENTS = 1 << 15  # smaller parts cost more in hand-offs than they save

_pool = {}


def num_threads():
    """OMP_NUM_THREADS when set to a positive number, else the CPUs this process may run on."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        n = 0
    return n if n > 0 else len(os.sched_getaffinity(0))


def _executor(n):
    pool = _pool.get(n)
    if pool is None:
        pool = _pool[n] = concurrent.futures.ThreadPoolExecutor(
            n, thread_name_prefix="caffecli-kernel")
    return pool


def for_parts(xp, fn, n, elements, min_part=None):
    """fn(start, stop) over consecutive parts of range(n), one per thread on the host; whole
    for device arrays or when ``elements`` (the work's size) is too small to be worth it
    (parts of fewer than ``min_part`` elements, MIN_PART_ELEMENTS unless given: larger for
    cheaper work per element)."""
    parts = min(num_threads(), n, max(1, elements // (min_part or MIN_PART_ELEMENTS)))
    if xp is not numpy or parts <= 1:
        fn(0, n)
        return
    bounds = [n * i // parts for i in range(parts + 1)]
    pool = _executor(parts - 1)
    futures = [pool.submit(fn, a, b) for a, b in zip(bounds[1:-1], bounds[2:])]
    try:
        fn(bounds[0], bounds[1])  # the first part on the calling thread, which would only wait
    finally:
        for future in futures:
            future.result()
