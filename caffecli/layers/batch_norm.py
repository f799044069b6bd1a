"""BatchNorm: per-channel normalization with running statistics, Caffe's arithmetic
(batch_norm_layer); on the host compiled passes, one each way with global statistics
(kernels/channel_jit.py), two each way with the batch's (kernels/batch_norm_jit.py, the same
bits as the numpy code here)."""
import numpy

from ..blob import Blob
from ..kernels import batch_norm_jit, caffe_gemv, channel_jit, device, jit
from ..kernels.blas_steps import fused
from ..kernels.threads import for_parts
from ..layer import NeuronLayer
from ..proto import caffe_pb2
from ..registry import register_layer


@register_layer("BatchNorm")
class BatchNormLayer(NeuronLayer):
    """Per-channel normalization over (num, spatial) with running mean/variance blobs.

    blobs: [mean sum, variance sum, scale factor]; the stored statistics are divided by the
    scale factor (a running normalizer), which the forward pass in TRAIN keeps up to date.
    """

    skip_init_line = "batch_norm.skipping_init"

    def setup(self, bottom, top):
        p = self.layer_param.batch_norm_param
        self.moving_average_fraction = p.moving_average_fraction
        self.use_global_stats = self.phase == caffe_pb2.TEST
        if p.HasField("use_global_stats"):
            self.use_global_stats = p.use_global_stats
        self.channels = 1 if bottom[0].num_axes == 1 else bottom[0].shape_at(1)
        self.eps = p.eps
        if not self.blobs:
            dt = bottom[0].dtype
            self.blobs = [Blob((self.channels,), dt), Blob((self.channels,), dt), Blob((1,), dt)]
            for b in self.blobs:
                b.data[...] = 0
        if len(self.blobs) != 3:
            raise self.error("needs 3 blobs (mean, variance, scale factor), got %d"
                             % len(self.blobs))
        # The statistics are not learned: Caffe pins their lr_mult to 0.
        for i in range(len(self.blobs)):
            if len(self.layer_param.param) == i:
                self.layer_param.param.add().lr_mult = 0.0
            elif self.layer_param.param[i].lr_mult != 0:
                raise self.error("Cannot configure batch normalization statistics as layer "
                                 "parameters (param %d has lr_mult %g, must be 0)"
                                 % (i, self.layer_param.param[i].lr_mult))

    def reshape(self, bottom, top):
        if bottom[0].num_axes < 2 or bottom[0].shape[1] != self.channels:
            raise self.error("bottom %s must have %d channels along axis 1"
                             % (bottom[0].shape_string(), self.channels))
        top[0].reshape_like(bottom[0])

    def _view(self, a, bottom):
        """(num, channels, spatial) view of a bottom-shaped array."""
        b = bottom[0]
        return a.reshape(b.shape[0], self.channels, b.count(2))

    def _channel_sum(self, a, b=None, scale=1.0):
        """Per-channel sum of a (or of a * b) over spatial, times scale, then summed over num
        (Caffe's two gemvs): on the host in OpenBLAS's order (kernels/caffe_gemv.py, which
        batch_norm_jit's kernels follow), on a device by its own reductions."""
        values = a if b is None else a * b
        if self.xp is numpy:
            return caffe_gemv.channel_totals(values, scale)
        per_item = values.sum(axis=2)
        if scale != 1.0:
            per_item *= a.dtype.type(scale)
        return per_item.sum(axis=0)

    def _centered_moments(self, x):
        """The batch's mean per channel, x - mean (in the x_norm scratch) and the biased
        variance per channel."""
        n = x.shape[0] * x.shape[2]  # values per channel
        if not n:
            raise self.error("no values per channel to normalize (%d items of %d values each)"
                             % (x.shape[0], x.shape[2]))
        mean = self._channel_sum(x, scale=1.0 / n)
        x_norm = self.x_norm = self.scratch("x_norm", x.shape, x.dtype)
        self.xp.subtract(x, mean.reshape(1, -1, 1), out=x_norm)
        return mean, x_norm, self._channel_sum(x_norm, x_norm, 1.0 / n)

    def _correction(self, bottom, dtype=numpy.float64):
        """Caffe's unbiasing factor m / (m - 1) of the running variance, divided in ``dtype``
        (Caffe's Dtype(m) / (m - 1))."""
        m = bottom[0].count() // self.channels
        return dtype(m) / dtype(m - 1) if m > 1 else dtype(1)

    def forward(self, bottom, top):
        x = self._view(bottom[0].data, bottom)
        if not self.use_global_stats:
            y = self._view(top[0].data, bottom)
            compiled = jit.usable(x, y) and x.size > 0
            if compiled:
                x_norm = self.x_norm = self.scratch("x_norm", x.shape, x.dtype)
                mean, var = batch_norm_jit.moments(x, x_norm)
            else:
                mean, x_norm, var = self._centered_moments(x)
            self.update_running(mean, var, bottom)
            self.std = self.xp.sqrt(var + self.eps).reshape(1, -1, 1)
            if compiled:
                batch_norm_jit.normalize(x_norm, self.std.reshape(-1), y)
                return
            x_norm /= self.std
            y[...] = x_norm
            return
        mean, std = self.global_moments(x.dtype)
        self.std = std.reshape(1, -1, 1)
        # the top holds x - mean, then divided by the std (the backward needs only the std)
        x_norm = self.x_norm = self._view(top[0].data, bottom)
        if jit.usable(x, x_norm, mean, std):
            in_place = top[0] is bottom[0]
            for_parts(self.xp, lambda c0, c1: channel_jit.normalize(
                x, mean, std, c0, c1, None if in_place else x_norm), self.channels, x.size,
                jit.PASS_MIN_PART)
            return
        self.xp.subtract(x, mean.reshape(1, -1, 1), out=x_norm)
        x_norm /= self.std

    def update_running(self, mean, var, bottom):
        """The running sums take the batch's mean and (unbiased) variance, and the scale factor
        its count, as Caffe's moving average adds them."""
        maf = self.moving_average_fraction
        self.weights[2].data[...] = self.weights[2].data * maf + 1
        self.weights[0].data[...] = mean + self.weights[0].data * maf
        self.weights[1].data[...] = fused(self._correction(bottom, var.dtype.type), var,
                                          self.weights[1].data * maf)   # Caffe's axpby

    def global_moments(self, dtype):
        """The stored mean and sqrt(variance + eps) per channel, which global statistics
        normalize by: the sums times 1 / the scale factor (0 for 0), rounded from double as
        Caffe's host Dtype, computed where the blobs are (no host read, so a CUDA graph can
        hold it)."""
        s = self.weights[2].data.reshape(-1)[:1].astype(numpy.float64)
        given = s != 0
        factor = self.xp.where(given, 1.0 / self.xp.where(given, s, 1.0), 0.0).astype(dtype)
        return (self.weights[0].data * factor,
                self.xp.sqrt(self.weights[1].data * factor + self.eps))

    def forward_gpu(self, bottom, top):
        """With global statistics one device kernel; with the batch's, the reductions as
        array code, then one kernel updates the running sums and the std per channel and one
        divides (kernels/cuda/batch_norm.cu)."""
        x, xp = self._view(bottom[0].data, bottom), self.xp
        sums = [w.data for w in self.weights]
        if not device.usable(xp, x) or any(a.dtype != x.dtype for a in sums):
            return self.forward(bottom, top)       # (statistics read from a float32 file)
        y, dt = self._view(top[0].data, bottom), x.dtype.type
        _, channels, spatial = x.shape
        std = self.scratch("std", (channels,), x.dtype)
        self.std = std.reshape(1, -1, 1)
        if self.use_global_stats:
            self.x_norm = y
            device.launch(xp, "batch_norm", "batch_norm_global_forward", x.size, x.dtype, x,
                          *sums, *device.ints(channels, spatial), dt(self.eps), y, std)
            return
        mean, x_norm, var = self._centered_moments(x)
        device.launch(xp, "batch_norm", "batch_norm_running_stats", channels, x.dtype, mean,
                      var, dt(self.moving_average_fraction), dt(self._correction(bottom)),
                      dt(self.eps), *sums, std)
        device.launch(xp, "batch_norm", "batch_norm_normalize", x.size, x.dtype, x_norm, std,
                      *device.ints(channels, spatial), x_norm, y)

    def backward(self, top, propagate_down, bottom):
        # Caffe's Backward_cpu writes the bottom diff whatever propagate_down says (called at
        # all, the layer is one the net marked as needing backward)
        xp = self.xp
        dy = self._view(top[0].diff, bottom)
        if self.use_global_stats:
            dx = self._view(bottom[0].diff, bottom)
            std = self.std.reshape(-1)
            if jit.usable(dy, dx, std):
                in_place = top[0] is bottom[0]
                for_parts(xp, lambda c0, c1: channel_jit.divide(
                    dy, std, c0, c1, None if in_place else dx), self.channels, dy.size,
                    jit.PASS_MIN_PART)
            else:
                xp.divide(dy, self.std, out=dx)
            return
        y = self.x_norm
        dx = self._view(bottom[0].diff, bottom)
        if jit.usable(y, dy, dx, self.std):
            batch_norm_jit.backward(y, dy, self.std.reshape(-1), dx)
            return
        n = y.shape[0] * y.shape[2]
        # dx = (dy - mean(dy) - mean(dy * y) * y) / sqrt(var + eps), means per channel, in
        # Caffe's order: (y * sum(dy y) + sum(dy)) * (-1/n) + dy, then / std
        dot = self._channel_sum(y, dy).reshape(1, -1, 1)
        total = self._channel_sum(dy).reshape(1, -1, 1)
        g = self.scratch("grad", y.shape, y.dtype)
        xp.multiply(y, dot, out=g)
        g += total
        g *= y.dtype.type(-1.0 / n)
        g += dy
        xp.divide(g, self.std, out=dx)
