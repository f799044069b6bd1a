"""Compiled host kernels: plain Python loops that numba compiles on their first call (cached on
disk), for host work that numpy can only do in many passes (pooling, LRN).

numba loads only when such a kernel first runs (importing it takes ~0.4 s), so the command
line, GPU runs and nets without these layers never pay for it. Without numba, or with
``CAFFECLI_JIT=0``, the layers keep their numpy code: the reference the kernels are tested
against. Kernels are ``nogil``: the threads of kernels/threads.py run them on disjoint images.
"""
import dis
import hashlib
import importlib.util
import os
import threading
import types

import numpy

from ..util import environ
from ..util.lazy import LazyModule

numba = LazyModule("numba")
PASS_MIN_PART = 1 << 20  # values per thread for a compiled elementwise pass: fewer are done
                         # before a pool thread wakes
prange = range   # a driver's loop over its parts: numba's prange once compiled (``parallel``)
INSTALLED = importlib.util.find_spec("numba") is not None
_compiled = {}
_lock = threading.RLock()
_FLOATS = frozenset([numpy.dtype(numpy.float32), numpy.dtype(numpy.float64)])


def usable(*arrays):
    """Whether compiled kernels can take these arrays: C-ordered float32/float64 host arrays,
    numba installed and not turned off. Asked a few times a layer: 2.0 -> 0.8 us for two
    arrays with the environment read cheaply and the dtypes looked up."""
    if not INSTALLED or environ.get("CAFFECLI_JIT") == "0":
        return False
    for a in arrays:
        if not (isinstance(a, numpy.ndarray) and a.dtype in _FLOATS and a.flags.c_contiguous):
            return False
    return True


def over_parts(run, *args, min_part=PASS_MIN_PART):
    """run(*args), a compiled elementwise pass, over consecutive parts of its flat arrays on the
    kernel threads (threads.for_parts): each array argument (C-ordered, all of one size) cut
    to the part, the others passed as they are."""
    from .threads import for_parts
    flat = [a.reshape(-1) if isinstance(a, numpy.ndarray) else a for a in args]
    n = next(a.size for a in flat if isinstance(a, numpy.ndarray))
    for_parts(numpy, lambda s, e: run(*[a[s:e] if isinstance(a, numpy.ndarray) else a
                                        for a in flat]), n, n, min_part)


def fast(*flags):
    """Mark a plain kernel function to compile with LLVM's fastmath ``flags`` (e.g. "reassoc":
    vectorized sums) wherever it compiles: called from Python (``kernel``) or from a driver
    (``parallel``), which share one compiled copy of it."""
    def mark(fn):
        fn.fastmath = frozenset(flags)
        return fn
    return mark


def inlined(fn):
    """Mark a small plain kernel function for numba to inline where a kernel calls it (numba's
    ``inline="always"``): a call that passes arrays counts references to them atomically, which
    costs more than a short row's own work."""
    fn.inline = "always"
    return fn


def kernel(fn, fastmath=None):
    """``fn`` compiled (once, on first use; later processes load it from numba's cache);
    ``fastmath``: LLVM's flags for it, else those ``fast`` marked it with. Division follows
    C's IEEE rules, as Caffe's loops do: x / 0 is inf or NaN, never an exception."""
    flags = getattr(fn, "fastmath", frozenset()) if fastmath is None else fastmath
    return once(fn, lambda: _njit(_linked(fn), nogil=True, fastmath=set(flags) or False,
                                  error_model="numpy", inline=getattr(fn, "inline", "never")))


def parallel(driver, threaded=False):
    """``driver(bounds, ...)``, whose loop over its parts is ``prange``, compiled: with numba's
    parallel loops where ``threaded`` (its parts start at once on numba's threads), else as a
    plain loop (kernels/threads.py's pool runs it a part at a time, without the GIL). The plain
    functions of its module that it calls (or holds in its closure) are compiled first."""
    return once((driver, threaded), lambda: _compile_driver(driver, threaded))


def once(key, make):
    """The compiled function (or other compile-time object: a driver, a kernel's constant
    tables) kept under ``key``, made by ``make()`` the first time (one thread makes it; a
    kernel compiling its callees takes the lock again)."""
    jitted = _compiled.get(key)
    if jitted is None:
        with _lock:
            jitted = _compiled.get(key)
            if jitted is None:
                jitted = _compiled[key] = make()
    return jitted


def vector_features(cpu_name, features, user_name=None, user_features=None):
    """The LLVM features to compile caffecli's kernels with (numba's CPU_FEATURES), or None for
    numba's own choice: on an AVX-512 host not AMD's, its features without LLVM's preference for
    256-bit vectors, under which loops over short rows (a pooled image's) stayed scalar with
    mispredicted branches (LeNet's pool1 backward 1.7 -> 0.13 ms, Xeon Emerald Rapids). None
    where the user named a CPU or features (NUMBA_CPU_NAME, NUMBA_CPU_FEATURES), on AMD (znver:
    sessions 28-44 measured LLVM's own choice there) and without AVX-512."""
    if user_name is not None or user_features is not None or cpu_name.startswith("znver"):
        return None
    if "+avx512f" not in features.split(","):
        return None
    return features + ",-prefer-256-bit"


def _tune_codegen():
    """Set numba's CPU features to ``vector_features``' choice; the features numba compiles
    with, '' for its own (run once, before caffecli's first compile: ``_njit``). numba has one
    code generator a process: a script's kernels compiled later get the same features, and one
    made earlier (by the script's own kernels) keeps its own."""
    config = numba.config
    import llvmlite.binding as ll
    from numba.core.codegen import get_host_cpu_features   # as numba reads them ('' if none)
    chosen = vector_features(ll.get_host_cpu_name(), get_host_cpu_features(), config.CPU_NAME,
                             config.CPU_FEATURES)
    if chosen is not None:
        config.CPU_FEATURES = chosen
    return config.CPU_FEATURES or ""


def _njit(fn, **options):
    """numba.njit(**options)(fn), cached on disk, or in memory where no cache location is
    writable. A closure's cache entries are keyed by what its cells hold (_closure_cache)."""
    once(_tune_codegen, _tune_codegen)
    try:
        jitted = numba.njit(cache=True, **options)(fn)
    except RuntimeError:
        return numba.njit(**options)(fn)
    if fn.__closure__ or getattr(fn, "foreign", ()):
        try:
            jitted._cache = once(_closure_cache, _closure_cache)(fn)
        except (ImportError, AttributeError):   # another numba's internals: numba's own key
            pass
    return jitted


def _stable(value, pickle):
    """What identifies a closure cell's value in any process: a function (or a compiled one's
    Python function) by its module, name, bytecode, ``inlined`` mark and own cells; anything
    else by ``pickle`` (numba's), as numba's key does."""
    py = getattr(value, "py_func", value)
    if isinstance(py, types.FunctionType):
        return (py.__module__, py.__qualname__, py.__code__.co_code, getattr(py, "inline", None),
                tuple(_stable(c.cell_contents, pickle) for c in py.__closure__ or ()))
    return pickle(value)


def _closure_cache():
    """numba's FunctionCache keyed by ``_stable`` cells and the kernels a function calls from
    other modules (made once: ``once``). numba's own key pickles the cells, and a compiled
    function pickles with a fresh id in every process: the drivers that hold kernels in their
    cells (im2col's and pooling's parts) missed the disk cache in every process, compiled again
    (300 iterations of LeNet's `caffecli train`: 7.3-7.6 s against 5.3-5.4 s with this key) and
    added an entry each time (359 MB of them in this checkout's cache). numba checks only the
    calling function's own file for changes, so another module's kernel is keyed by its code."""
    from numba.core.caching import FunctionCache
    from numba.core.serialize import dumps

    class ClosureCache(FunctionCache):
        def _index_key(self, sig, codegen):
            fn = self._py_func
            code = fn.__code__.co_code
            held = [c.cell_contents for c in fn.__closure__ or ()] + list(fn.foreign)
            cells = repr(tuple(_stable(value, dumps) for value in held))
            return (sig, codegen.magic_tuple(), (hashlib.sha256(code).hexdigest(),
                                                 hashlib.sha256(cells.encode()).hexdigest()))
    return ClosureCache


def _linked(fn, **extra):
    """``fn`` rebuilt with the plain functions of its package's modules that it loads as globals
    (or holds in closure cells) compiled first by ``kernel``, as numba needs of a function a
    kernel calls, and ``extra`` globals; ``reach``: every such function it calls, directly or
    through them; ``foreign``: those of other modules (_closure_cache keys by their code, since
    a compiled function holds its whole call tree: a driver whose kernel calls another module's
    kernel ran that kernel's old code from the disk cache after it changed)."""
    names = dict(fn.__globals__)
    called = {op.argval for op in dis.get_instructions(fn) if op.opname == "LOAD_GLOBAL"}
    package = fn.__module__.rpartition(".")[0]
    reach = []
    for name in sorted(called):
        callee = names.get(name)
        if (isinstance(callee, types.FunctionType)
                and callee.__module__.rpartition(".")[0] == package):
            names[name] = kernel(callee)
            for f in (callee,) + getattr(names[name].py_func, "reach", ()):
                if f not in reach:
                    reach.append(f)
    names.update(extra)
    cells = tuple(types.CellType(kernel(c.cell_contents)
                                 if isinstance(c.cell_contents, types.FunctionType)
                                 else c.cell_contents) for c in fn.__closure__ or ())
    for cell in cells:   # a held kernel's callees (its own code is keyed as a cell)
        for f in getattr(getattr(cell.cell_contents, "py_func", None), "reach", ()):
            if f not in reach:
                reach.append(f)
    linked = types.FunctionType(fn.__code__, names, fn.__name__, fn.__defaults__, cells or None)
    linked.__module__, linked.__qualname__ = fn.__module__, fn.__qualname__
    linked.reach = tuple(reach)
    linked.foreign = tuple(f for f in reach if f.__module__ != fn.__module__)
    return linked


def _compile_driver(driver, parallel_loops):
    fn = _linked(driver, prange=numba.prange)
    # a name of its own for each kind: numba's disk cache files compiled code by name
    fn.__qualname__ = driver.__qualname__ + ("" if parallel_loops else "_serial")
    return _njit(fn, nogil=True, error_model="numpy", parallel=parallel_loops)


def start_threads():
    """Start numba's threading layer: its own work queue unless the user named another. On 16
    cores it ran LeNet as fast as GNU OpenMP's (8.6 against 8.4 ms a pass) without sharing an
    OpenMP runtime with other libraries: numba's OpenMP binds to one loaded first (PyTorch's,
    whose threads spin: a 50x500 @ 500x4096 product after a region took 0.46 -> 12 ms) and
    one loaded after binds to it (PyTorch's LeNet 4.8 -> 6.1 ms under a passive policy)."""
    if not os.environ.get("NUMBA_THREADING_LAYER"):
        numba.config.THREADING_LAYER = "workqueue"
    numba.get_num_threads()   # starts the threading layer now


def use_threads(n):
    """Run this thread's next parallel driver on ``n`` of numba's threads (at most as many as
    it started)."""
    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))
