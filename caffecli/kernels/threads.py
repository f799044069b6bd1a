"""Host array work split across the cores: numpy releases the GIL inside large operations, so a
pool of threads running the same numpy code on disjoint slices (images of a batch, channels)
keeps every core busy where one numpy call would use one. The calling thread runs the first
part itself. Each pool thread waits on a lock of its own, so a hand-off is one lock release and
one acquire back (about 14 us on the 2-core EPYC, against 50 us through a queue and futures).

Each part writes its own slice and nothing is summed across parts, so the results are the same
bits for any thread count. The count follows OMP_NUM_THREADS, else the CPU affinity, as BLAS's
does; device arrays (and one thread) run the whole range in one call: the reference path.
"""
import os
import threading

import numpy

MIN_PART_ELEMENTS = 1 << 15  # smaller parts cost more in hand-offs than they save


def num_threads():
    """OMP_NUM_THREADS when set to a positive number, else the CPUs this process may run on."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        n = 0
    return n if n > 0 else len(os.sched_getaffinity(0))


class _Worker:
    """A daemon thread that runs one part at a time: ``start`` hands it over by releasing
    ``go``; the thread releases ``done`` when the part has run (its error kept for ``join``)."""

    def __init__(self):
        self.go, self.done = threading.Lock(), threading.Lock()
        self.go.acquire()
        self.done.acquire()
        self.part = self.error = None
        threading.Thread(target=self._loop, daemon=True, name="caffecli-kernel").start()

    def _loop(self):
        while True:
            self.go.acquire()
            fn, a, b = self.part
            try:
                fn(a, b)
            except BaseException as exc:   # re-raised on the calling thread by join
                self.error = exc
            self.part = None
            self.done.release()

    def start(self, fn, a, b):
        self.part = (fn, a, b)
        self.go.release()

    def join(self):
        self.done.acquire()
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


# Parts on numba's OpenMP threads: one native hand-off (~8 us on 16 cores against ~270 us for
# this pool, whose threads take the GIL one after another), level on 2 cores, but on the
# 16-core host whole nets ran 3-5x slower (BLAS's products beside OpenMP's threads: CaffeNet's
# conv4 forward 4.4 -> 39 ms), so it is opt in until that is understood.
NATIVE = os.environ.get("CAFFECLI_NATIVE_THREADS", "0") == "1"
_native = [True]   # numba's threads may be used (not in a forked child: OpenMP is not fork-safe)


def _after_fork():
    global _pool
    _pool = _Pool()   # a forked child has none of the parent's threads
    _native[0] = False


os.register_at_fork(after_in_child=_after_fork)


def _parts(n, elements, min_part):
    return min(num_threads(), n, max(1, elements // (min_part or MIN_PART_ELEMENTS)))


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
    consecutive parts of range(n), as ``for_parts`` splits them: each part the serial driver on
    this module's pool (compiled code without the GIL), or with CAFFECLI_NATIVE_THREADS=1 all of
    them at once on numba's own threads (see NATIVE). Host arrays only."""
    from .jit import parallel, use_threads
    parts = _parts(n, elements, min_part) if NATIVE and _native[0] else 1
    if parts > 1 and _pool.busy.acquire(blocking=False):
        try:
            threaded = parallel(driver, threaded=True)
            use_threads(parts)   # one part a thread: no thread woken for nothing
            threaded(numpy.array(_bounds(n, parts), numpy.int64), *args)
        finally:
            _pool.busy.release()
        return
    serial = parallel(driver)
    for_parts(numpy, lambda a, b: serial(numpy.array([a, b], numpy.int64), *args), n, elements,
              min_part)
