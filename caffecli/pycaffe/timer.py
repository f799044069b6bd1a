"""pycaffe's ``caffe.Timer`` (Caffe's benchmark.cpp Timer): ``start()``, ``stop()``, ``ms``."""
import math
import time

from .. import backend, context, glog


class Timer:
    """A stopwatch. In GPU mode queued device work is waited for at start and stop (Caffe
    records CUDA events) and ``ms`` has a fraction; in CPU mode ``ms`` is whole milliseconds,
    as Caffe's CPU timer truncates."""

    def __init__(self):
        self._running = False
        self._has_run = False
        self._start = self._stop = 0.0
        self._gpu = False

    def _now(self):
        if context.is_gpu():
            backend.synchronize()
        return time.perf_counter()

    def start(self):
        if not self._running:
            self._start = self._now()
            self._gpu = context.is_gpu()
            self._running = self._has_run = True

    def stop(self):
        if self._running:
            self._stop = self._now()
            self._running = False

    @property
    def ms(self):
        """Milliseconds from start to stop (a running timer is stopped first, as Caffe's is)."""
        if not self._has_run:
            glog.warning("benchmark.timer_not_started",
                         "Timer has never been run before reading time.")
            return 0.0
        self.stop()
        elapsed = (self._stop - self._start) * 1000.0
        return elapsed if self._gpu else float(math.floor(elapsed))
