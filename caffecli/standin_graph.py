"""CUDA graph capture on the stand-in device, as CUDA does it: a capture records and runs nothing.

The stand-in computes with numpy as it records (Python code between the operations needs their
shapes), so at the end of the capture every array that existed before it gets its old values
back: what the capture wrote is only in the graph, as on a GPU. ``Graph.launch`` runs the
recorded operations again on the same memory: an array an operation made during the capture is
refilled in place (a graph writes the addresses it captured), and a host value read at capture
(a Python scalar argument) stays what it was.
"""
import threading

import numpy

_thread = threading.local()   # .tape: this thread's capture in progress (cupy's current stream
                              # is per thread, so each thread captures on its own)


def active():
    """The Tape of this thread's capture in progress, or None."""
    return getattr(_thread, "tape", None)


def arrays(obj):
    """The numpy arrays in a (nested) argument or result, in order; stand-in arrays are
    anything with a numpy array in ``_a``."""
    if isinstance(obj, numpy.ndarray):
        return [obj]
    if isinstance(obj, numpy.generic):   # the stand-in hands it out as a 0-d array
        return [numpy.asarray(obj)]
    inner = getattr(obj, "_a", None)
    if isinstance(inner, numpy.ndarray):
        return [inner]
    if isinstance(obj, (list, tuple)):
        return [a for o in obj for a in arrays(o)]
    if isinstance(obj, dict):
        return arrays(list(obj.values()))
    return []


def _root(a):
    while isinstance(a.base, numpy.ndarray):
        a = a.base
    return a


class Step:
    """One recorded operation and the arrays it made (not views of its inputs)."""

    __slots__ = ("fn", "args", "kwargs", "made")

    def __init__(self, fn, args, kwargs, inputs, result):
        self.fn, self.args, self.kwargs = fn, args, kwargs
        self.made = [None if any(numpy.may_share_memory(r, a) for a in inputs) else r
                     for r in arrays(result)]

    def run(self):
        values = arrays(self.fn(*self.args, **self.kwargs))
        for target, value in zip(self.made, values):
            if target is not None:
                numpy.copyto(target, value)


class Tape:
    """The steps of one capture, and the values of the older arrays they touched."""

    def __init__(self):
        self.steps, self.saved, self.made = [], {}, set()

    def before(self, fn, args, kwargs):
        """The inputs of an operation about to run; older memory among them is saved once."""
        inputs = arrays((args, kwargs, getattr(fn, "__self__", None)))
        for a in inputs:
            root = _root(a)
            if id(root) not in self.made and id(root) not in self.saved:
                self.saved[id(root)] = (root, root.copy())
        return inputs

    def record(self, fn, args, kwargs, inputs, result):
        step = Step(fn, args, kwargs, inputs, result)
        self.made.update(id(_root(r)) for r in step.made if r is not None)
        self.steps.append(step)

    def close(self):
        """Undo the capture's writes to older memory; the steps, for a Graph. Newest first: two
        arrays over the same memory (one made from a pointer) may both be saved, and the older
        copy holds the values from before the capture."""
        for root, values in reversed(list(self.saved.values())):
            numpy.copyto(root, values)
        self.saved.clear()
        return self.steps


class CaptureUnsupported(RuntimeError):
    """What CUDA says of a synchronous copy, or a launch, on a capturing stream."""


def refuse(what):
    if active() is not None:
        raise CaptureUnsupported("cudaErrorStreamCaptureUnsupported: operation not permitted "
                                 "when stream is capturing (%s)" % what)


class Graph:
    """cupy.cuda.Graph: the steps of a capture, run again by ``launch``."""

    def __init__(self, steps):
        self.steps = steps

    def upload(self, stream=None):
        pass

    def launch(self, stream=None):
        refuse("a graph launch")
        for step in self.steps:
            step.run()


class Immediate:
    """What the stand-in's devices and streams share: work is done when it is issued, so
    waiting is free, and making one current (``with``) changes nothing."""

    def synchronize(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class Stream(Immediate):
    """cupy.cuda.Stream; the null stream (``ptr`` 0) cannot capture, as in CUDA."""

    def __init__(self, null=False, non_blocking=False, ptds=False, priority=None):
        self.ptr = 0 if null else id(self)
        self._tape = None

    def begin_capture(self, mode=None):
        if self.ptr == 0:
            raise RuntimeError("cannot capture on the default (legacy) stream")
        refuse("a second capture")
        _thread.tape = self._tape = Tape()

    def end_capture(self):
        if self._tape is None:
            raise RuntimeError("cudaErrorIllegalState: the stream is not capturing")
        tape, self._tape, _thread.tape = self._tape, None, None
        return Graph(tape.close())

    def is_capturing(self):
        return self._tape is not None


class MemoryPool:
    """cupy.cuda.MemoryPool: numpy memory needs no pool."""

    def malloc(self, size):
        raise NotImplementedError("the stand-in allocates with numpy")
