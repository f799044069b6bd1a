"""Host array work split across the cores: numpy releases the GIL inside large operations, so a
pool of threads running the same numpy code on disjoint slices (images of a batch, channels)
keeps every core busy where one numpy call would use one.

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


def for_parts(xp, fn, n, elements):
    """fn(start, stop) over consecutive parts of range(n), one per thread on the host; whole
    for device arrays or when ``elements`` (the work's size) is too small to be worth it."""
    parts = min(num_threads(), n, max(1, elements // MIN_PART_ELEMENTS))
    if xp is not numpy or parts <= 1:
        fn(0, n)
        return
    bounds = [n * i // parts for i in range(parts + 1)]
    futures = [_executor(parts).submit(fn, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    for future in futures:
        future.result()
