"""The LSTM cell (kernels/lstm.py) as compiled loops (kernels/jit.py): a time step's gate
activations, cell and hidden state in one pass over its (N, H) cells, and its gradients in
another, where numpy took about twenty passes over small arrays, each a call of a few
microseconds (bench_layers' LSTM, 16 steps of 16 x 256 cells).

Every value is rounded where lstm.py's numpy code rounds it: the activations are the C
library's (libm.py's expressions, stored to the data's type), the products and sums are the
data's type's one at a time, in the same order, with no fused multiply-adds. So the values
are that code's, and Caffe's, bit for bit. Rows of cells split across the threads.
"""
from .jit import prange
from .libm import lstm_sigmoid_of, lstm_tanh_of
from .threads import for_native

MIN_PART = 1 << 11   # cells a thread's part of the forward at least: five library calls a cell,
                     # about 15 ns (2-core EPYC, 16 x 256 cells: one thread 60 us, two 50)
BACKWARD_MIN_PART = 1 << 16  # and of the backward, about 1.5 ns a cell: 16 x 256 cells took 5.7
                             # us on one thread, 20-36 us handed to two; 64 x 1024 38 and 50 us


def _forward(gates, c_prev, cont, zero, n0, n1, acts, tanh_c, c, h):
    """For rows n0..n1: acts (N, 4H) = the activations i, f, o, g (f times cont, exactly 0
    where cont is 0), c = f c_prev + i g, tanh_c = tanh(c), h = o tanh_c."""
    width = c_prev.shape[1]
    for n in range(n0, n1):
        k = cont[n]
        a, x = acts[n], gates[n]
        for j in range(width):
            a[j] = lstm_sigmoid_of(x[j])
            a[width + j] = lstm_sigmoid_of(x[width + j])
            a[2 * width + j] = lstm_sigmoid_of(x[2 * width + j])
            a[3 * width + j] = lstm_tanh_of(x[3 * width + j])
            a[width + j] = zero if k == zero else k * a[width + j]
            c[n, j] = a[width + j] * c_prev[n, j] + a[j] * a[3 * width + j]
            tanh_c[n, j] = lstm_tanh_of(c[n, j])
            h[n, j] = a[2 * width + j] * tanh_c[n, j]


def _backward(acts, tanh_c, c_prev, c_diff, h_diff, one, n0, n1, dgates, dc_prev):
    """For rows n0..n1: dgates (N, 4H) and dc_prev from the diffs of c and h, each product in
    lstm_unit_layer.cpp's order (dc_prev may be c_diff: each cell reads its own first)."""
    width = c_prev.shape[1]
    for n in range(n0, n1):
        a, d = acts[n], dgates[n]
        for j in range(width):
            i, f, o, g = a[j], a[width + j], a[2 * width + j], a[3 * width + j]
            t, dh = tanh_c[n, j], h_diff[n, j]
            term = dh * o
            term = term * (one - t * t)
            term = term + c_diff[n, j]
            d[j] = term * g * i * (one - i)
            d[width + j] = term * c_prev[n, j] * f * (one - f)
            d[2 * width + j] = dh * t * o * (one - o)
            d[3 * width + j] = term * i * (one - g * g)
            dc_prev[n, j] = term * f


def _forward_parts(bounds, gates, c_prev, cont, zero, acts, tanh_c, c, h):
    for p in prange(bounds.size - 1):
        _forward(gates, c_prev, cont, zero, bounds[p], bounds[p + 1], acts, tanh_c, c, h)


def _backward_parts(bounds, acts, tanh_c, c_prev, c_diff, h_diff, one, dgates, dc_prev):
    for p in prange(bounds.size - 1):
        _backward(acts, tanh_c, c_prev, c_diff, h_diff, one, bounds[p], bounds[p + 1], dgates,
                  dc_prev)


def forward(gates, c_prev, cont, acts, tanh_c, c, h):
    """The cell's forward into acts (N, 4H), tanh_c, c and h (N, H), C-ordered host arrays of
    one float dtype; cont (N,)."""
    n, width = c_prev.shape
    for_native(_forward_parts, n, n * width, gates, c_prev, cont, c.dtype.type(0), acts, tanh_c,
               c, h, min_part=MIN_PART)


def backward(acts, tanh_c, c_prev, c_diff, h_diff, dgates, dc_prev):
    """The cell's backward into dgates (N, 4H) and dc_prev (N, H) (which may be c_diff)."""
    n, width = c_prev.shape
    for_native(_backward_parts, n, n * width, acts, tanh_c, c_prev, c_diff, h_diff,
               c_prev.dtype.type(1), dgates, dc_prev, min_part=BACKWARD_MIN_PART)
