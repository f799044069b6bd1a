"""AbsVal's two passes on the host as compiled loops (kernels/jit.py), split across the kernel
threads: |x|, and the gradient sign(x) * dy with Caffe's sign, (0 < x) - (x < 0), which is 0
for NaN (numpy's sign gives NaN) and +0 for either zero. layers/abs_val.py keeps the array
code as the reference and for device arrays."""
from . import jit


def _abs(x, y):
    for i in range(x.size):
        y[i] = abs(x[i])


def _abs_backward(x, dy, zero, one, dx):
    for i in range(x.size):
        v = x[i]
        dx[i] = ((one if v > zero else zero) - (one if v < zero else zero)) * dy[i]


def forward(x, y):
    """y = |x| (host arrays of one shape)."""
    jit.over_parts(jit.kernel(_abs), x, y)


def backward(x, dy, dx):
    """dx = Caffe's sign of x times dy (host arrays of one shape; dx may be dy)."""
    t = x.dtype.type
    jit.over_parts(jit.kernel(_abs_backward), x, dy, t(0), t(1), dx)
