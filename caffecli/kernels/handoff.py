"""Hand-offs between kernels/threads.py's pool threads that neither hold the GIL nor sleep: one
side bumps a counter, the other waits for it in compiled code, giving its core away
(sched_yield) at each look, and sleeps on a semaphore only when it has looked ``spins`` times.

A thread woken from sleep starts late where an idle core must first wake up: about 50 us on
the 2-core EPYC (a Firecracker guest whose idle cores halt), twice for each split (the part,
then its caller's join), while the scheduler put a woken part on its caller's core and ran
the two one after the other (two parts of 330 us took 680 us; this way 335).
Imported only where a pool thread starts: it compiles with numba.
"""
import threading

import numpy
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from . import jit

COUNTER, SLEEPER = 0, 8   # slots a cache line apart: the posted count, the waiter's asleep mark


@intrinsic
def _load(typingctx, flags, slot):
    """flags[slot], read from memory at each call (sequentially consistent)."""
    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]])
        return builder.load_atomic(ptr, "seq_cst", 8)
    return types.int64(flags, slot), codegen


@intrinsic
def _store(typingctx, flags, slot, value):
    """flags[slot] = value, seen by every thread before what follows it."""
    def codegen(context, builder, sig, args):
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, sig.args[0], ary, [args[1]])
        builder.store_atomic(args[2], ptr, "seq_cst", 8)
        return context.get_dummy_value()
    return types.void(flags, slot, value), codegen


@intrinsic
def _yield_core(typingctx):
    """sched_yield(): another thread ready on this core runs first (a BLAS thread's part)."""
    def codegen(context, builder, sig, args):
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.IntType(32), []),
                                            "sched_yield")
        builder.call(fn, [])
        return context.get_dummy_value()
    return types.void(), codegen


def _reached(flags, target, spins):
    """Whether the counter reaches ``target`` within ``spins`` looks."""
    for _ in range(spins):
        if _load(flags, COUNTER) >= target:
            return True
        _yield_core()
    return _load(flags, COUNTER) >= target


def _post(flags, value):
    """Set the counter; whether its waiter had gone to sleep (it needs waking)."""
    _store(flags, COUNTER, value)
    return _load(flags, SLEEPER) == 1


def _will_sleep(flags, target):
    """Mark the waiter asleep unless the counter reached ``target`` meanwhile (then False):
    a post either sees the mark or is seen here."""
    _store(flags, SLEEPER, 1)
    if _load(flags, COUNTER) >= target:
        _store(flags, SLEEPER, 0)
        return False
    return True


def _awake(flags):
    _store(flags, SLEEPER, 0)


def _post_then_reached(flags, value, other, target, spins):
    """Post ``value`` (1: its waiter sleeps, nothing else done), then whether ``other``'s
    counter reaches ``target`` within ``spins`` looks (2, else 0): one call without the GIL."""
    if _post(flags, value):
        return 1
    return 2 if _reached(other, target, spins) else 0


class Signal:
    """A counter one thread raises and one other thread waits for."""

    def __init__(self):
        self.flags = numpy.zeros(16, numpy.int64)
        self.wake = threading.Semaphore(0)
        self._post, self._reached = jit.kernel(_post), jit.kernel(_reached)
        self._will_sleep, self._awake = jit.kernel(_will_sleep), jit.kernel(_awake)
        self._post_then_reached = jit.kernel(_post_then_reached)

    def post(self, value):
        if self._post(self.flags, value):
            self.wake.release()

    def post_then_wait(self, value, other, target, spins):
        """``post(value)``, then ``other.wait(target, spins)``, the spinning part in the same
        call: the poster needs the GIL only once the wait is over, so the thread woken by the
        post takes the GIL without waiting for it."""
        code = self._post_then_reached(self.flags, value, other.flags, target, spins)
        if code == 1:
            self.wake.release()
        if code != 2:
            other.wait(target, 0 if code == 0 else spins)

    def wait(self, target, spins):
        """Return once the counter reaches ``target``: spinning first, then asleep."""
        if self._reached(self.flags, target, spins) or not self._will_sleep(self.flags, target):
            return
        while self.flags[COUNTER] < target:   # a stray wake (from a post seen above) loops
            self.wake.acquire()
        self._awake(self.flags)
