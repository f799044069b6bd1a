"""The thread counts of the OpenBLAS builds this process loaded (numpy's and scipy's), lowered
to one while compiled kernels call BLAS from several threads at once (kernels/conv_jit.py), and
their threads restarted where they loaded before caffecli set OPENBLAS_THREAD_TIMEOUT.

An OpenBLAS product above 65536 x 4 multiply-adds starts its own threads, and products that do
so from several threads at once wait for each other's: LeNet's conv2 image by image on the
2-core EPYC took 513 ms against 1.5 ms with every product on its caller's thread.
"""
import contextlib
import ctypes
import threading

_lock = threading.Lock()
_libraries = []   # (get, set) of each OpenBLAS found, once looked for
_held = [0, []]   # callers inside ``one_thread``, and the counts to restore
_CORENAMES = ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename",
              "openblas_get_corename")


def _loaded():
    """Each loaded OpenBLAS, opened by ctypes (Linux: /proc/self/maps)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = sorted({line.split()[-1] for line in maps if "openblas" in line.split()[-1]})
    except OSError:
        return []
    libs = []
    for path in paths:
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def _find(libs=None):
    """(get_num_threads, set_num_threads) of each loaded OpenBLAS (of ``libs``, where given)."""
    found = []
    for lib in _loaded() if libs is None else libs:
        for prefix in ("scipy_openblas", "openblas"):
            names = [(prefix + "_get_num_threads" + end, prefix + "_set_num_threads" + end)
                     for end in ("64_", "")]
            pair = next(((getattr(lib, g), getattr(lib, s)) for g, s in names
                         if hasattr(lib, g) and hasattr(lib, s)), None)
            if pair is not None:
                found.append(pair)
                break
    return found


def core_names():
    """The kernel names (lower case) of each loaded OpenBLAS: what OPENBLAS_CORETYPE forces,
    else what it picked for this CPU ("skylakex", "haswell", ...)."""
    names = []
    for lib in _loaded():
        get = next((getattr(lib, n) for n in _CORENAMES if hasattr(lib, n)), None)
        if get is not None:
            get.restype = ctypes.c_char_p
            names.append(get().decode().lower())
    return names


def available():
    """Whether this process's BLAS is OpenBLAS whose threads ``one_thread`` can hold to one
    (scipy's, which numba's numpy.dot calls, loaded)."""
    if not _libraries:   # looked for once; a layer asks at each reshape
        with _lock:
            if not _libraries:
                from scipy.linalg import cython_blas  # noqa: F401  (loads scipy's OpenBLAS)
                _libraries.append(_find())
    return bool(_libraries[0])


@contextlib.contextmanager
def one_thread():
    """Every loaded OpenBLAS on one thread inside (nested or from several threads: the counts
    come back when the last caller leaves)."""
    available()
    with _lock:
        if not _held[0]:
            _held[1] = [get() for get, _ in _libraries[0]]
            for _, set_count in _libraries[0]:
                set_count(1)
        _held[0] += 1
    try:
        yield
    finally:
        with _lock:
            _held[0] -= 1
            if not _held[0]:
                for (_, set_count), count in zip(_libraries[0], _held[1]):
                    set_count(count)


def restart_threads(timeout, count=None):
    """Have every loaded OpenBLAS read its environment again and stop its threads, which it
    starts again at its next threaded product: one loaded before caffecli set
    OPENBLAS_THREAD_TIMEOUT (``import numpy; import caffecli``) would otherwise spin ~0.1 s
    after each product, taking the cores from what follows; with ``count``, each runs that many
    threads (an MPI rank's share of the cores, launcher.share_cpus). True where each one could
    and now reads ``timeout`` (OpenBLAS does this itself after a fork: blas_thread_shutdown_)."""
    libs = _loaded()
    if count:
        for _, set_count in _find(libs):
            set_count(int(count))
    for lib in libs:
        if not hasattr(lib, "blas_thread_shutdown_"):
            return False
    for lib in libs:
        if hasattr(lib, "openblas_read_env"):   # 0.3.7 on; before, the restart reads it
            lib.openblas_read_env()
            if hasattr(lib, "openblas_thread_timeout") and \
                    lib.openblas_thread_timeout() != int(timeout):
                return False
        lib.blas_thread_shutdown_()
    return bool(libs)
