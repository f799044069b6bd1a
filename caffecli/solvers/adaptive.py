"""Adaptive solvers: AdaGrad, RMSProp, AdaDelta, Adam (Caffe's solvers/*_solver.cpp).

Each keeps Caffe's operation order and where ``delta`` enters, in the parameter's dtype, so
float32 results match the C++ ones. AdaDelta and Adam keep a second history set after the first.
"""
import numpy

from .. import backend
from ..errors import CaffeError
from ..kernels import libm
from ..kernels.blas_steps import fused
from .base import register_solver
from .sgd import SGDSolver

f32 = numpy.float32


@register_solver("AdaGrad")
class AdaGradSolver(SGDSolver):
    """h += g^2; w -= lr * g / (sqrt(h) + delta)."""

    update_kernel = "adagrad_update"

    def kernel_constants(self):
        return (f32(self.param.delta),)

    def check_params(self):
        if self.param.momentum != 0:
            raise CaffeError("Momentum cannot be used with AdaGrad (momentum: %g)."
                             % self.param.momentum)

    def compute_update_value(self, param_id, rate):
        g = self.param_at(param_id).diff
        h = self.history_at(param_id)
        h += g * g
        xp = backend.array_module(g)
        update = libm.pow_half(xp, h)   # Caffe's powx(h, 0.5): powf
        update += f32(self.param.delta)
        g[...] = self.local_rate(param_id, rate) * (g / update)


@register_solver("RMSProp")
class RMSPropSolver(SGDSolver):
    """h = decay*h + (1-decay)*g^2; w -= lr * g / (sqrt(h) + delta)."""

    update_kernel = "rmsprop_update"

    def kernel_constants(self):
        return f32(self.param.rms_decay), f32(self.param.delta)

    def check_params(self):
        if self.param.momentum != 0:
            raise CaffeError("Momentum cannot be used with RMSProp (momentum: %g)."
                             % self.param.momentum)
        if not 0 <= self.param.rms_decay < 1:
            raise CaffeError("rms_decay should lie between 0 and 1 (got %g)."
                             % self.param.rms_decay)

    def compute_update_value(self, param_id, rate):
        g = self.param_at(param_id).diff
        h = self.history_at(param_id)
        decay = f32(self.param.rms_decay)
        h[...] = fused(f32(1) - decay, g * g, decay * h)   # Caffe's axpby
        xp = backend.array_module(g)
        update = libm.pow_half(xp, h)
        update += f32(self.param.delta)
        g[...] = self.local_rate(param_id, rate) * (g / update)


@register_solver("AdaDelta")
class AdaDeltaSolver(SGDSolver):
    """Zeiler's AdaDelta with Caffe's momentum as the decay; history[N + i] holds the squared
    updates."""

    history_sets = 2
    update_kernel = "adadelta_update"

    def kernel_constants(self):
        return f32(self.param.momentum), f32(self.param.delta)

    def compute_update_value(self, param_id, rate):
        g = self.param_at(param_id).diff
        grad_hist = self.history_at(param_id)
        update_hist = self.history_at(len(self.net.learnable_params) + param_id)
        momentum = f32(self.param.momentum)
        delta = f32(self.param.delta)
        grad_hist[...] = fused(f32(1) - momentum, g * g, momentum * grad_hist)
        xp = backend.array_module(g)
        ratio = (update_hist + delta) / (grad_hist + delta)
        g *= libm.pow_half(xp, ratio)
        update_hist[...] = fused(f32(1) - momentum, g * g, momentum * update_hist)
        g *= self.local_rate(param_id, rate)


@register_solver("Adam")
class AdamSolver(SGDSolver):
    """Kingma & Ba's Adam: m, v moving averages (history[i], history[N + i]), bias correction
    with t = iter + 1, delta added after the square root."""

    history_sets = 2
    update_kernel = "adam_update"

    def kernel_constants(self):
        return f32(self.param.momentum), f32(self.param.momentum2), f32(self.param.delta)

    def iteration_scalars(self, rate):
        """The rate and this iteration's bias correction, with t = iter + 1."""
        beta1, beta2 = numpy.float64(f32(self.param.momentum)), \
            numpy.float64(f32(self.param.momentum2))
        t = self.iter + 1
        with numpy.errstate(divide="ignore", invalid="ignore"):
            correction = f32(numpy.sqrt(1.0 - beta2 ** t) / (1.0 - beta1 ** t))
        return dict(super().iteration_scalars(rate), correction=correction)

    def compute_update_value(self, param_id, rate):
        g = self.param_at(param_id).diff
        m = self.history_at(param_id)
        v = self.history_at(len(self.net.learnable_params) + param_id)
        beta1 = f32(self.param.momentum)
        beta2 = f32(self.param.momentum2)
        correction = self.scalars["correction"]
        m[...] = fused(f32(1) - beta1, g, beta1 * m)   # Caffe's axpby
        v[...] = fused(f32(1) - beta2, g * g, beta2 * v)
        xp = backend.array_module(g)
        denom = libm.pow_half(xp, v)
        denom += f32(self.param.delta)
        g[...] = (self.local_rate(param_id, rate) * correction) * (m / denom)

