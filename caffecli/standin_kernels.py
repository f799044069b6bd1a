"""cupy.RawModule on the stand-in device: the CUDA C of kernels/cuda/ compiled as host C++.

The kernels are grid-stride loops (kernels/cuda/common.cuh), so one call with a grid and block
of one thread covers every element, in the order a single GPU thread would take them; a block
reduction's shared memory (per host thread: data-parallel ranks launch at once) and barriers
serve that one thread (a tree over one partial). So CI runs
the device kernels' own index arithmetic, and checks what a GPU would take on trust: each
argument's type against the kernel's C signature (a float passed where a double is declared,
a non-contiguous or host array, a read-only array written).
"""
import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading

import numpy

_PRELUDE = r"""
#include <algorithm>
#include <cmath>
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__ __restrict
#define __shared__ static thread_local
inline void __syncthreads() {}
struct caffecli_dim3 { unsigned int x, y, z; };
static const caffecli_dim3 threadIdx = {0, 0, 0}, blockIdx = {0, 0, 0};
static const caffecli_dim3 blockDim = {1, 1, 1}, gridDim = {1, 1, 1};
using std::min; using std::max; using std::pow; using std::exp; using std::log; using std::sqrt;
using std::fabs; using std::tanh;  // float overloads, as CUDA device code has them
"""
_C_TYPES = {  # C type -> (numpy dtype, ctypes type)
    "float": (numpy.float32, ctypes.c_float), "double": (numpy.float64, ctypes.c_double),
    "int": (numpy.int32, ctypes.c_int32), "unsigned int": (numpy.uint32, ctypes.c_uint32),
    "long long": (numpy.int64, ctypes.c_int64),
    "unsigned long long": (numpy.uint64, ctypes.c_uint64),
    "unsigned char": (numpy.uint8, ctypes.c_uint8)}
_KERNEL = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)')
_TYPEDEF = re.compile(r"typedef\s+([\w ]+?)\s+(\w+)\s*;")
_lock = threading.Lock()
_libraries = {}   # source digest -> loaded library


def compiler():
    """The host C++ compiler the stand-in builds kernels with, or None."""
    return shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")


class Param:
    """One kernel parameter: its C type, whether it is a pointer, and whether it is const."""

    def __init__(self, text, typedefs):
        words = text.replace("*", " * ").split()
        self.name = words[-1]
        self.pointer = "*" in words
        self.const = "const" in words
        base = " ".join(w for w in words[:-1] if w not in ("const", "*", "__restrict__"))
        self.ctype = typedefs.get(base, base)
        if self.ctype not in _C_TYPES:
            raise TypeError("stand-in kernels take no parameter of type %r" % base)
        self.dtype, self.scalar = _C_TYPES[self.ctype]

    def convert(self, kernel, value):
        """The ctypes value of ``value`` (a device array's numpy memory, or a numpy scalar) for
        this parameter; refuses what a GPU would misread."""
        what = "kernel %s, parameter %s (%s%s)" % (kernel, self.name, self.ctype,
                                                     " *" if self.pointer else "")
        if self.pointer:
            array = value
            if not isinstance(array, numpy.ndarray):
                raise TypeError("%s: a device array is needed, got %r" % (what, value))
            if array.dtype != self.dtype:
                raise TypeError("%s: got an array of %s" % (what, array.dtype))
            if not array.flags.c_contiguous:
                raise ValueError("%s: the array is not C-contiguous" % what)
            if not self.const and not array.flags.writeable:
                raise ValueError("%s: the array is read-only" % what)
            return ctypes.c_void_p(array.ctypes.data)
        if not isinstance(value, numpy.generic) or value.dtype != self.dtype:
            raise TypeError("%s: pass a numpy %s scalar, got %r (cupy passes a Python number "
                            "as the type it guesses)" % (what, numpy.dtype(self.dtype), value))
        return self.scalar(value.item())


class Function:
    """A kernel of a stand-in RawModule, called as cupy calls one: (grid, block, args)."""

    def __init__(self, module, name, params):
        self.module, self.name, self.params = module, name, params
        self.fn = getattr(module.library, name)
        self.fn.restype = None

    def __call__(self, grid, block, args, shared_mem=0, stream=None):
        for dims in (grid, block):
            if not (isinstance(dims, tuple) and dims and all(int(d) > 0 for d in dims)):
                raise ValueError("kernel %s: grid and block are tuples of positive sizes, got "
                                 "%r" % (self.name, dims))
        if len(args) != len(self.params):
            raise TypeError("kernel %s takes %d arguments, got %d"
                            % (self.name, len(self.params), len(args)))
        self.module.launch(self._run, args)

    def _run(self, *args):
        """The kernel on numpy arrays (the device arrays unwrapped: a step a graph records)."""
        self.fn(*[p.convert(self.name, a) for p, a in zip(self.params, args)])


class RawModule:
    """cupy.RawModule(code=...): every ``extern "C" __global__`` function of ``code``;
    ``launch(run, args)`` runs a kernel as a device operation (the stand-in module's hook)."""

    launch = None

    def __init__(self, code, options=(), name_expressions=None, **_):
        typedefs = {alias: target for target, alias in _TYPEDEF.findall(code)}
        self.signatures = {name: [Param(p, typedefs) for p in params.split(",") if p.strip()]
                           for name, params in _KERNEL.findall(code)}
        self.library = _load(_PRELUDE + code)

    def get_function(self, name):
        if name not in self.signatures:
            raise AttributeError("no kernel %s in this module (it has %s)"
                                 % (name, ", ".join(sorted(self.signatures))))
        return Function(self, name, self.signatures[name])


def _load(source):
    """The shared library of ``source``, built once per source (kept on disk between runs)."""
    digest = hashlib.sha256(source.encode()).hexdigest()[:24]
    with _lock:
        if digest not in _libraries:
            cxx = compiler()
            if cxx is None:
                raise RuntimeError("the stand-in device needs a C++ compiler (c++ or g++) for "
                                   "device kernels")
            cache = _cache_folder()
            path = os.path.join(cache, digest + ".so")
            if not os.path.exists(path):
                _build(cxx, source, cache, path)
            _libraries[digest] = ctypes.CDLL(path)
        return _libraries[digest]


def _cache_folder():
    """Where built kernels are kept: the user's cache folder, else a temporary one."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    for folder in (os.path.join(home, "caffecli", "standin-kernels"),
                   os.path.join(tempfile.gettempdir(), "caffecli-standin-kernels-%d"
                                % os.getuid())):
        try:
            os.makedirs(folder, exist_ok=True)
            if os.access(folder, os.W_OK):
                return folder
        except OSError:
            pass
    return tempfile.mkdtemp(prefix="caffecli-standin-kernels-")


def _build(cxx, source, cache, path):
    """Compile ``source`` into ``path`` (written whole: built beside it, then renamed)."""
    with tempfile.TemporaryDirectory(dir=cache) as work:
        src, lib = os.path.join(work, "kernels.cpp"), os.path.join(work, "kernels.so")
        with open(src, "w") as f:
            f.write(source)
        run = subprocess.run([cxx, "-O2", "-shared", "-fPIC", "-std=c++14", "-o", lib, src],
                             capture_output=True, text=True)
        if run.returncode:
            raise RuntimeError("the stand-in could not compile a device kernel:\n"
                               + run.stderr[-4000:])
        os.replace(lib, path)
