"""SyncedMemory: a flat buffer with a host copy and a device copy, each made on first use.

As Caffe's syncedmem.cpp: the head says which copy is current (uninitialized, at the host, at the
device, or both synced); ``cpu_data``/``gpu_data`` copy only when the other side is newer, and
``mutable_*`` move the head to the side that will be written. New memory reads as zeros, or as
what a pending initializer (a filler) writes when it is first read; ``overwrite_cpu_data`` is for
a writer of every value (loading weights), which neither initializes nor copies first.
``clear_cpu_data`` zeroes the host copy lazily (a solver's ClearParamDiffs): the zeros are
written when the values are next used, unless a writer of every value claims the clear first.
"""
import threading

import numpy

from . import backend
from .kernels import host_memory

UNINITIALIZED, HEAD_AT_CPU, HEAD_AT_GPU, SYNCED = "uninitialized", "at_cpu", "at_gpu", "synced"

# .watch, while this thread captures a CUDA graph: what it reads and writes (replay.py)
capture = threading.local()


class SyncedMemory:
    """``size`` values of ``dtype``; the host copy is numpy, the device copy the device module's."""

    __slots__ = ("size", "dtype", "cpu", "gpu", "head", "init", "cleared")

    def __init__(self, size, dtype):
        self.size = int(size)
        self.dtype = numpy.dtype(dtype)
        self.cpu = None
        self.gpu = None
        self.head = UNINITIALIZED
        self.init = None
        self.cleared = False   # the host copy reads as zeros but still holds old values

    def initialize(self, write):
        """Have ``write(host array)`` set the values: when first read, or now if in use."""
        if self.head == UNINITIALIZED:
            self.init = write
        else:
            write(self.mutable_cpu_data())

    def to_cpu(self):
        if self.cleared:
            self.cleared = False
            self.cpu.fill(0)
        elif self.head == UNINITIALIZED:
            if self.init is None:
                self.cpu = host_memory.zeros(self.size, self.dtype)
            else:
                self.cpu = host_memory.empty(self.size, self.dtype)
                self.init, write = None, self.init
                write(self.cpu)
            self.head = HEAD_AT_CPU
        elif self.head == HEAD_AT_GPU:
            if self.cpu is None:
                self.cpu = host_memory.empty(self.size, self.dtype)
            self.gpu.get(out=self.cpu)
            self.head = SYNCED

    def to_gpu(self):
        if self.cleared or self.head == UNINITIALIZED and self.init is not None:
            self.to_cpu()  # initializers and pending clears write host values
        if self.head == UNINITIALIZED:
            self.gpu = backend.device_module().zeros(self.size, self.dtype)
            self.head = HEAD_AT_GPU
        elif self.head == HEAD_AT_CPU:
            if self.gpu is None:
                self.gpu = backend.device_module().empty(self.size, self.dtype)
            self.gpu.set(self.cpu)
            self.head = SYNCED

    def cpu_data(self):
        """The host copy, current; read it only (the head stays where it is, or becomes synced)."""
        self.to_cpu()
        return self.cpu

    def overwrite_cpu_data(self):
        """The host copy for writing every value: a pending initializer is dropped and nothing
        is copied from the device; the device copy is stale from now on."""
        if self.cpu is None:
            # fresh zero pages: no pass over them
            self.cpu = host_memory.zeros(self.size, self.dtype)
        self.init = None
        self.cleared = False
        self.head = HEAD_AT_CPU
        return self.cpu

    def clear_cpu_data(self):
        """Every value reads as zero from now on, the host copy current; the zeros are written
        when the values are next used, unless ``claim_clear`` is called first."""
        self.init = None
        if self.cpu is None:
            self.cpu = host_memory.zeros(self.size, self.dtype)   # fresh zero pages
        else:
            self.cleared = True
        self.head = HEAD_AT_CPU

    def claim_clear(self):
        """True, once, where the host copy is a clear not yet written: the caller then writes
        every value itself (``out = a @ b`` in place of ``out += a @ b``), and no zeros are
        written before it."""
        claimed, self.cleared = self.cleared, False
        return claimed

    def settle(self):
        """Write a pending clear's zeros now."""
        if self.cleared:
            self.to_cpu()

    def gpu_data(self):
        self.to_gpu()
        watch = getattr(capture, "watch", None)
        if watch is not None:
            watch.read(self)
        return self.gpu

    def mutable_cpu_data(self):
        """The host copy, current, for writing: the device copy is stale from now on."""
        self.to_cpu()
        self.head = HEAD_AT_CPU
        return self.cpu

    def mutable_gpu_data(self):
        self.to_gpu()
        self.head = HEAD_AT_GPU
        watch = getattr(capture, "watch", None)
        if watch is not None:   # synced first: what it holds may be read too
            watch.read(self)
            watch.write(self)
        return self.gpu

    def __repr__(self):
        return "SyncedMemory(%d x %s, %s)" % (self.size, self.dtype, self.head)
