"""col2im of a stride-1 2-D convolution as compiled loops (kernels/jit.py): each window row is
added straight into the image gradient, with no padded buffer to clear, fill and copy out.

numpy's col2im adds one strided view per kernel offset, and on small maps its inner loops are a
row of a few values (LeNet conv2: 8), so most of its time goes to loop overhead: 4.7 ms against
2.0 ms compiled for LeNet conv2, 15 against 11 ms for CaffeNet conv2 (2 cores). Each value
receives its adds in kernel-offset order, starting from zero, as in numpy's col2im and Caffe's,
so the result is the same bits. Strided layers keep numpy's phase-split col2im (faster there),
and so does im2col, whose numpy copies run as fast as compiled ones or faster.
"""
from .jit import kernel


def _col2im(col, dh, dw, ph, pw, c0, c1, n0, n1, x):
    """x[n, c] (n0 <= n < n1, c0 <= c < c1) = the sum of col (C, kh, kw, N, oh, ow)'s windows."""
    kh, kw, oh, ow = col.shape[1], col.shape[2], col.shape[4], col.shape[5]
    h, w = x.shape[2], x.shape[3]
    for c in range(c0, c1):
        for n in range(n0, n1):
            for iy in range(h):
                for ix in range(w):
                    x[n, c, iy, ix] = 0
        for ki in range(kh):
            for kj in range(kw):
                shift = kj * dw - pw   # input column of output column 0
                lo = min(max(-shift, 0), ow)
                hi = max(min(w - shift, ow), lo)
                for n in range(n0, n1):
                    for oy in range(oh):
                        iy = oy + ki * dh - ph
                        if 0 <= iy < h:
                            for ox in range(lo, hi):
                                x[n, c, iy, ox + shift] += col[c, ki, kj, n, oy, ox]


def col2im(col, dilation, pad, channels, images, out):
    """out (N, C, H, W)[images, channels] = col2im of col (C, kh, kw, N, oh, ow), stride 1;
    ``channels`` and ``images`` are (start, stop) ranges (a thread's part)."""
    kernel(_col2im)(col, dilation[0], dilation[1], pad[0], pad[1], *channels, *images, out)
