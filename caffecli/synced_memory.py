"""SyncedMemory: one flat buffer in the active backend plus a lazily made host mirror.

As in Caffe, the head says which copy is newer. On the CPU the two are the same numpy array
and nothing is ever copied; on the GPU a host read (pycaffe's ``blob.data``) pulls the
device values once, and the next device read pushes host writes back first.
"""
import numpy

from . import backend

AT_PRIMARY, AT_HOST, SYNCED = "primary", "host", "synced"


class SyncedMemory:
    """A flat array of ``size`` values; ``primary()`` for layers, ``host()`` for the user."""

    def __init__(self, size, dtype):
        self.size = int(size)
        self.dtype = numpy.dtype(dtype)
        self._primary = backend.xp().zeros(self.size, dtype=self.dtype)
        self._host = None
        self.head = AT_PRIMARY

    @property
    def on_host_backend(self):
        return isinstance(self._primary, numpy.ndarray)

    def primary(self):
        """The array layers compute on (numpy or cupy); host writes are pushed in first."""
        if self.head == AT_HOST:
            self._primary.set(self._host) if hasattr(self._primary, "set") \
                else self._primary.__setitem__(Ellipsis, backend.to_device(self._host))
        self.head = AT_PRIMARY
        return self._primary

    def host(self):
        """A numpy array with the current values, writable (the next primary() sees writes)."""
        if self.on_host_backend:
            return self._primary
        if self._host is None:
            self._host = numpy.empty(self.size, dtype=self.dtype)
            self.head = AT_PRIMARY if self.head != AT_HOST else self.head
        if self.head == AT_PRIMARY:
            self._host[...] = backend.to_host(self._primary)
        self.head = AT_HOST
        return self._host

    def peek_host(self):
        """Current values on the host without claiming host ownership (for snapshots)."""
        if self.on_host_backend or self.head == AT_HOST:
            return self.host() if not self.on_host_backend else self._primary
        return backend.to_host(self._primary)

    def to_backend(self):
        """Re-home the primary copy in the active backend, keeping the newest values."""
        xp = backend.xp()
        if backend.get_array_module(self._primary) is xp:
            return False
        values = self._host if self.head == AT_HOST else backend.to_host(self._primary)
        self._primary = xp.asarray(values)
        self._host = None
        self.head = AT_PRIMARY
        return True
