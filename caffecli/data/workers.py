"""Threads that make one batch's items side by side: the prefetch thread reads the records in
order, then these decode them and transform them in contiguous runs of items, and the batch
comes out the same whatever their number (each item is computed alone, in place).

A JPEG decode (OpenCV) and the compiled transform run without the GIL, so the batch is made
faster where cores are spare: on a GPU machine one thread cannot keep up with the device
(64 ImageNet crops of an encoded LMDB take 40-49 ms on one core of a 2-core Xeon, 25-27 ms on
two; an H200's CaffeNet pass at batch 256 takes about 56 ms for four times as many).
CAFFECLI_DATA_THREADS sets their number; by default a quarter of the cores (OMP_NUM_THREADS or
the CPU affinity), at most 4, at least 1: one keeps all the work on the prefetch thread, as
Caffe's single InternalThread does.
"""
import itertools
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from ..kernels import threads
from ..util import environ

MAX_DEFAULT = 4
BLOCK = 256   # items ``in_order`` computes side by side before it hands them on
_lock = threading.Lock()
_pools = {}   # (process, thread count) -> executor: a forked child makes its own


def count(every_core=False):
    """How many threads make a batch: CAFFECLI_DATA_THREADS when a positive number, else a
    quarter of the cores, from 1 to MAX_DEFAULT; with ``every_core`` (a converter, which
    shares the cores with nothing), else every core."""
    value = environ.get("CAFFECLI_DATA_THREADS", "").strip()
    if value.isdecimal() and int(value) > 0:
        return int(value)
    if every_core:
        return threads.num_threads()
    return max(1, min(MAX_DEFAULT, threads.num_threads() // 4))


def _executor(n):
    """The executor of ``n`` threads of this process (made on first use, then kept: a net's
    layers and a converter may ask for different counts at once)."""
    key = (os.getpid(), n)
    with _lock:
        pool = _pools.get(key)
        if pool is None:
            pool = _pools[key] = ThreadPoolExecutor(n, thread_name_prefix="caffecli-data")
        return pool


def runs(n, parts):
    """``n`` items cut into at most ``parts`` contiguous runs (start, stop) of near-equal size."""
    parts = max(1, min(parts, n))
    return [(n * p // parts, n * (p + 1) // parts) for p in range(parts)]


def each_run(n, work, parts=None):
    """work(start, stop) over contiguous runs of range(n), side by side on ``parts`` data
    threads (``count()`` by default; the caller waits; with one thread or one item, it runs
    the whole range itself). The first run's error, in item order, is raised."""
    parts = count() if parts is None else parts
    if parts == 1 or n < 2:
        if n:
            work(0, n)
        return
    pool = _executor(parts)
    futures = [pool.submit(work, a, b) for a, b in runs(n, parts)]
    for f in futures:
        f.result()


def map_items(fn, items, parts=None):
    """[fn(x) for x in items], computed in contiguous runs on ``parts`` data threads (as
    ``each_run``); the error of the first item that fails, in order, is raised."""
    out = [None] * len(items)

    def work(a, b):
        for i in range(a, b):
            out[i] = fn(items[i])
    each_run(len(items), work, parts)
    return out


def in_order(fn, items, parts=None):
    """(item, fn(item)) for each of ``items`` (any iterable, read BLOCK at a time) in order,
    each block's fn computed side by side on ``parts`` data threads (``map_items``): a
    converter's reads on every core, its writes and log lines in the input's order."""
    items = iter(items)
    while True:
        block = list(itertools.islice(items, BLOCK))
        if not block:
            return
        yield from zip(block, map_items(fn, block, parts))
