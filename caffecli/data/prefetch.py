"""Background batch loading (Caffe's BasePrefetchingDataLayer / InternalThread).

A daemon thread calls ``produce()`` and keeps up to ``capacity`` finished batches in a bounded
queue, so decoding overlaps the net's compute. Errors raised in the thread re-raise in the
consumer; ``stop()`` (also run at interpreter exit and when the owner is collected) ends the
thread without leaving it blocked on a full queue.
"""
import atexit
import queue
import threading
import weakref

_LIVE = weakref.WeakSet()
_POLL_S = 0.05


class _Failure:
    def __init__(self, exc):
        self.exc = exc


class Prefetcher:
    """Runs ``produce()`` in a thread; ``get()`` returns its results in order."""

    def __init__(self, produce, capacity=4, name="prefetch"):
        self._produce = produce
        self.capacity = max(1, int(capacity))
        self._queue = queue.Queue(maxsize=self.capacity)
        self._stop = threading.Event()
        self._thread = None
        self.name = name
        _LIVE.add(self)

    @property
    def running(self):
        return self._thread is not None and self._thread.is_alive()

    def start(self):
        if self.running:
            return
        self._stop.clear()
        self._queue = queue.Queue(maxsize=self.capacity)
        self._thread = threading.Thread(target=_run, name=self.name, daemon=True,
                                        args=(self._produce, self._queue, self._stop))
        self._thread.start()

    def get(self):
        """The next batch (blocks until the thread has one); re-raises the thread's error."""
        if not self.running and self._queue.empty():
            self.start()
        while True:
            try:
                item = self._queue.get(timeout=_POLL_S)
                break
            except queue.Empty:
                if not self.running and self._queue.empty():
                    raise RuntimeError("%s: loader thread ended without a batch" % self.name)
        if isinstance(item, _Failure):
            self._thread.join()
            self._thread = None
            raise item.exc
        return item

    def pending(self):
        """Batches finished but not yet taken (read-ahead), oldest first; leaves them queued."""
        with self._queue.mutex:
            return [b for b in self._queue.queue if not isinstance(b, _Failure)]

    def stop(self):
        """Stop the thread and drop queued batches; safe to call repeatedly."""
        self._stop.set()
        thread, self._thread = self._thread, None
        # the loader thread itself may get here (the layer's finalizer, run by a collection
        # in that thread): it ends on its own once _stop is set
        if thread is not None and thread is not threading.current_thread():
            while thread.is_alive():
                _drain(self._queue)
                thread.join(timeout=_POLL_S)
        _drain(self._queue)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()


def _drain(q):
    try:
        while True:
            q.get_nowait()
    except queue.Empty:
        pass


def _run(produce, q, stop):
    """Thread body: it holds no reference to the owning layer, so the layer can be collected."""
    while not stop.is_set():
        try:
            item = produce()
        except BaseException as exc:  # hand every failure to the consumer
            item = _Failure(exc)
        while not stop.is_set():
            try:
                q.put(item, timeout=_POLL_S)
                break
            except queue.Full:
                continue
        if isinstance(item, _Failure):
            return


@atexit.register
def stop_all():
    """Stop every live prefetch thread (interpreter exit, Ctrl-C unwinding)."""
    for p in list(_LIVE):
        p.stop()
