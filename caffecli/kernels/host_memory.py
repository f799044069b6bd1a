"""Large host arrays placed on 2 MB boundaries, so the kernel's transparent huge pages (which
numpy asks for on allocations of 4 MB and more) cover them whole.

A buffer that merely contains some 2 MB-aligned stretch gets huge pages there and 4 kB pages at
its ends, and where it starts is up to the allocator. Blobs, layers' scratch buffers and the
column buffers come from here. On the 2-core EPYC, processes alternating with the code before
(medians of 6 each): LeNet forward-backward 17.0 -> 15.7 ms (12.4 -> 11.9 in the machine's
fast state), CaffeNet 282 -> 272 ms, its fc6 backward 22 -> 18 ms. The ends of the allocation
that alignment skips are never touched, so they cost address space, not memory.

``copy_in`` fills such a fresh array from a large source (a caffemodel's values) on every CPU.
"""
import threading

import numpy

from .threads import num_threads

HUGE_PAGE = 1 << 21
COPY_PART_BYTES = 1 << 22  # bytes a part of ``copy_in`` at least: smaller copies run whole
MIN_ALIGNED = HUGE_PAGE  # bytes: smaller arrays as numpy places them (with the slack, the
                         # aligned ones reach numpy's 4 MB for huge pages)


def _aligned(make, size, dtype):
    dtype = numpy.dtype(dtype)
    nbytes = size * dtype.itemsize
    if nbytes < MIN_ALIGNED:
        return make(size, dtype)
    raw = make(nbytes + HUGE_PAGE, numpy.uint8)
    skip = -raw.ctypes.data % HUGE_PAGE
    return raw[skip:skip + nbytes].view(dtype)


def empty(size, dtype):
    """numpy.empty(size, dtype), 1-D, starting on a 2 MB boundary when large."""
    return _aligned(numpy.empty, size, dtype)


def zeros(size, dtype):
    """numpy.zeros(size, dtype), 1-D, starting on a 2 MB boundary when large."""
    return _aligned(numpy.zeros, size, dtype)


def buffer(xp, size, dtype):
    """A work buffer of ``size`` values on ``xp``'s side: ``empty``'s on the host, xp's own on
    the device."""
    return empty(size, dtype) if xp is numpy else xp.empty(size, dtype=dtype)


def copy_in(dst, src):
    """dst[...] = src (one shape, both C-ordered host arrays), split over the CPUs on plain
    threads when large: the first touch of fresh memory (its page faults) and the copy then run
    on every core. CaffeNet's 244 MB load on the 2-core EPYC, 30 processes each way, alternating:
    median 0.060 -> 0.047 s, and 5 -> 2 loads over 0.1 s (the guest's slow first touches).
    Plain threads, not kernels/threads.py's pool: loading weights must not import numba."""
    parts = min(num_threads(), dst.nbytes // COPY_PART_BYTES)
    if parts < 2 or not (dst.flags.c_contiguous and src.flags.c_contiguous):
        dst[...] = src
        return
    d, s = dst.reshape(-1), src.reshape(-1)
    bounds = [d.size * i // parts for i in range(parts + 1)]
    errors = []

    def part(a, b):
        try:
            d[a:b] = s[a:b]
        except BaseException as exc:   # re-raised on the calling thread
            errors.append(exc)
    helpers = [threading.Thread(target=part, args=ab) for ab in zip(bounds[1:-1], bounds[2:])]
    for t in helpers:
        t.start()
    part(0, bounds[1])
    for t in helpers:
        t.join()
    if errors:
        raise errors[0]
