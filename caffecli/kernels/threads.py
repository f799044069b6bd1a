"""Host array work split across the cores: numpy releases the GIL inside large operations, so a
pool of threads running the same numpy code on disjoint slices (images of a batch, channels)
keeps every core busy where one numpy call would use one. The calling thread runs the first
part itself. A hand-off is a counter each side waits for in compiled code without the GIL,
spinning a while before it sleeps (kernels/handoff.py; a semaphore without numba), but the
threads take the GIL one after another to start: compiled kernels split into three or more
parts start them all at once on numba's threads instead (``for_native``).

Each part writes its own slice and nothing is summed across parts, so the results are the same
bits for any thread count. The count follows OMP_NUM_THREADS, else the CPU affinity, as BLAS's
does; device arrays (and one thread) run the whole range in one call: the reference path.
"""
import math
import os
import threading

import numpy

from ..util import environ

MIN_PART_ELEMENTS = 1 << 15  # smaller parts cost more in hand-offs than they save


_cpus = []   # the CPUs this process may run on, counted once (BLAS counts them at load)


def num_threads():
    """OMP_NUM_THREADS when set to a positive number, else the CPUs this process may run on.
    Read at each split (a few per layer), so without an exception or a system call: 2.3 ->
    0.8 us a call, then 0.3 us with the environment read cheaply (util/environ.py)."""
    value = environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdecimal() and int(value) > 0:
        return int(value)
    if not _cpus:
        _cpus.append(len(os.sched_getaffinity(0)))
    return _cpus[0]


class _Semaphore:
    """A counter raised by one thread and waited for by one other, asleep: the hand-off where
    kernels/handoff.py's compiled one is not at hand."""

    def __init__(self):
        self.lock = threading.Semaphore(0)

    def post(self, value):
        self.lock.release()

    def wait(self, target, spins):
        self.lock.acquire()

    def post_then_wait(self, value, other, target, spins):
        self.post(value)
        other.wait(target, spins)


# Looks (a sched_yield each, ~0.5 us on the 2-core EPYC) a worker takes for its next part before
# it sleeps, and the caller for a part to end. LeNet's pass on 2 cores (medians, p90, of 600
# alternating in one process): 10.6 / 12.9 ms sleeping at once, 10.0 / 11.8 with these; a worker
# looking 1024 times competes with the BLAS threads' products: 10.2 / 22.5.
WORKER_SPINS = 128
JOIN_SPINS = 1024
SPIN_WAIT = os.environ.get("CAFFECLI_SPIN_WAIT", "1") != "0"


def _signal():
    """kernels/handoff.py's spinning hand-off, where numba compiles it and this platform has
    sched_yield (not with CAFFECLI_SPIN_WAIT=0 or CAFFECLI_JIT=0); else a semaphore."""
    from . import jit
    if SPIN_WAIT and hasattr(os, "sched_yield") and jit.usable():
        from . import handoff
        return handoff.Signal()
    return _Semaphore()


class _Worker:
    """A daemon thread that runs one part at a time: ``start`` raises its ``go`` count; the
    thread raises ``done`` when the part has run (its error kept for ``join``)."""

    def __init__(self):
        self.go, self.done = _signal(), _signal()
        self.sent = 0
        self.part = self.error = None
        threading.Thread(target=self._loop, daemon=True, name="caffecli-kernel").start()

    def _loop(self):
        taken = 1
        self.go.wait(taken, WORKER_SPINS)
        while True:
            fn, a, b = self.part
            try:
                fn(a, b)
            except BaseException as exc:   # re-raised on the calling thread by join
                self.error = exc
            self.part = None
            # done, and the wait for the next part, in one call without the GIL: the caller
            # takes the GIL back at once (LeNet's pass 9.38 -> 9.23 ms, alternating pools)
            self.done.post_then_wait(taken, self.go, taken + 1, WORKER_SPINS)
            taken += 1

    def start(self, fn, a, b):
        self.part = (fn, a, b)
        self.sent += 1
        self.go.post(self.sent)

    def join(self):
        self.done.wait(self.sent, JOIN_SPINS)
        error, self.error = self.error, None
        return error


class _Pool:
    """Workers for one split at a time; a split that finds the pool busy (another thread's,
    or a part that splits again) runs whole on its own thread: the same values, no deadlock."""

    def __init__(self):
        self.workers = []
        self.busy = threading.Lock()

    def run(self, fn, bounds):
        if not self.busy.acquire(blocking=False):
            fn(bounds[0], bounds[-1])
            return
        try:
            helpers = len(bounds) - 2
            while len(self.workers) < helpers:
                self.workers.append(_Worker())
            for worker, a, b in zip(self.workers, bounds[1:-1], bounds[2:]):
                worker.start(fn, a, b)
            try:
                fn(bounds[0], bounds[1])  # the first part on the calling thread
            finally:
                errors = [w.join() for w in self.workers[:helpers]]
            for error in errors:
                if error is not None:
                    raise error
        finally:
            self.busy.release()


_pool = _Pool()


# A compiled kernel's parts start at once on numba's threads where there are three or more:
# one native hand-off, against one GIL hand-over per pool thread (169 us for 16 threads); on
# 16 cores LeNet's pass took 8.6 ms against the pool's 9.8 (16.0 before the pool's parts were
# capped), CaffeNet's 108 against 124 ms. Two parts hand off as cheaply on the pool (one
# counter raised; level on 2 cores, where numba's work queue lost 2-4 ms a pass).
NATIVE = os.environ.get("CAFFECLI_NATIVE_THREADS", "1") != "0"
_native = []   # once decided: whether numba's threads can take the parts


def start():
    """Start numba's threads for the compiled kernels (once); whether they take the parts: not
    with CAFFECLI_NATIVE_THREADS=0, without numba, or in a forked child (its threads are not
    fork-safe)."""
    if not _native:
        from . import jit
        _native.append(NATIVE and jit.INSTALLED)
        if _native[0]:
            jit.start_threads()
    return NATIVE and _native[0]


def _after_fork():
    global _pool
    _pool = _Pool()   # a forked child has none of the parent's threads
    _native[:] = [False]
    _cpus.clear()     # and may run on other CPUs


os.register_at_fork(after_in_child=_after_fork)


def _parts(n, elements, min_part, pooled=True):
    """How many parts: one a thread, each of at least ``min_part`` elements. On the pool, whose
    threads take the GIL one after another to start theirs, at most sqrt(elements / min_part)
    parts of the default size: the fewest hand-offs plus work a part (16 cores: LeNet
    13.3 -> 9.3 ms a pass)."""
    worth = max(1, elements // (min_part or MIN_PART_ELEMENTS))
    if worth == 1:
        return 1
    if pooled and min_part is None and worth > 2:
        worth = max(2, round(math.sqrt(worth)))
    return min(num_threads(), n, worth)


def _bounds(n, parts):
    """The starts of ``parts`` consecutive, near-equal parts of range(n), and n."""
    return [n * i // parts for i in range(parts + 1)]


def for_parts(xp, fn, n, elements, min_part=None):
    """fn(start, stop) over consecutive parts of range(n), one per thread on the host; whole
    for device arrays or when ``elements`` (the work's size) is too small to be worth it
    (parts of fewer than ``min_part`` elements, MIN_PART_ELEMENTS unless given: larger for
    cheaper work per element)."""
    parts = _parts(n, elements, min_part)
    if xp is not numpy or parts <= 1:
        fn(0, n)
        return
    _pool.run(fn, _bounds(n, parts))


def for_native(driver, n, elements, *args, min_part=None):
    """``driver(bounds, *args)`` (a compiled kernel's parts: kernels/jit.py's ``parallel``) over
    consecutive parts of range(n), as ``for_parts`` splits them: all at once on numba's own
    threads (``start``), else each part the serial driver on this module's pool (compiled code
    without the GIL). Host arrays only."""
    from .jit import parallel, use_threads
    parts = _parts(n, elements, min_part, pooled=False)
    if parts > 2 and start() and _pool.busy.acquire(blocking=False):
        try:
            threaded = parallel(driver, threaded=True)
            use_threads(parts)   # one part a thread: no thread woken for nothing
            threaded(numpy.array(_bounds(n, parts), numpy.int64), *args)
        finally:
            _pool.busy.release()
        return
    serial = parallel(driver)
    if parts <= 1:   # the whole range here, its count not asked for again (a small layer's)
        serial(numpy.array([0, n], numpy.int64), *args)
        return
    for_parts(numpy, lambda a, b: serial(numpy.array([a, b], numpy.int64), *args), n, elements,
              min_part)


COPY_MIN_PART = 1 << 17  # values a part of a plain copy at least: smaller copies run faster
                         # whole (2 cores: 200K values 26 us whole, 38 split; 800K 265 -> 180 us)


def split_copy(xp, dst, src):
    """dst[...] = src for two 2-D arrays of one shape (views of blobs), split across the
    threads by rows where there are as many as threads, else by columns."""
    rows, cols = dst.shape
    if rows >= num_threads():
        for_parts(xp, lambda a, b: dst[a:b].__setitem__(Ellipsis, src[a:b]), rows, dst.size,
                  COPY_MIN_PART)
    else:
        for_parts(xp, lambda a, b: dst[:, a:b].__setitem__(Ellipsis, src[:, a:b]), cols,
                  dst.size, COPY_MIN_PART)


def split_sum(xp, terms, out):
    """out = terms[0] + terms[1] + ... (flat arrays of one size, added in that order: the
    same bits however split), split across the threads."""
    def part(a, b):
        xp.add(terms[0][a:b], terms[1][a:b], out=out[a:b])
        for t in terms[2:]:
            out[a:b] += t[a:b]
    for_parts(xp, part, out.size, out.size * len(terms))
