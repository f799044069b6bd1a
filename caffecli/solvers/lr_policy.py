"""Learning-rate policies (Caffe's SGDSolver::GetLearningRate), computed in float32 as Caffe does.

fixed, step, exp, inv, multistep, poly and sigmoid; the rate is rounded to float like Caffe's
``Dtype rate`` so logs and updates match the C++ numbers.
"""
import math

import numpy

from .. import glog
from ..errors import CaffeError
from ..util.cmath import c_pow

f32 = numpy.float32
POLICIES = ("fixed", "step", "exp", "inv", "multistep", "poly", "sigmoid")


def _check(cond, message):
    if not cond:
        raise CaffeError(message)


def learning_rate(param, iteration, current_step, log=True):
    """The rate for ``iteration`` and the (possibly advanced) step counter: (rate, current_step)."""
    with numpy.errstate(over="ignore", invalid="ignore"):
        return _learning_rate(param, iteration, current_step, log)


def _learning_rate(param, iteration, current_step, log):
    policy = param.lr_policy
    base_lr = f32(param.base_lr)
    gamma = f32(param.gamma)
    if policy == "fixed":
        return base_lr, current_step
    if policy == "step":
        _check(param.stepsize > 0, "lr_policy step needs stepsize > 0 (got %d)" % param.stepsize)
        current_step = iteration // param.stepsize
        _check(gamma >= 0, "lr_policy step needs gamma >= 0 (got %s)" % glog.fmt(gamma))
        return f32(float(base_lr) * c_pow(gamma, current_step)), current_step
    if policy == "exp":
        _check(gamma >= 0, "lr_policy exp needs gamma >= 0 (got %s)" % glog.fmt(gamma))
        return f32(float(base_lr) * c_pow(gamma, iteration)), current_step
    if policy == "inv":
        _check(gamma >= 0, "lr_policy inv needs gamma >= 0 (got %s)" % glog.fmt(gamma))
        base = f32(1) + gamma * f32(iteration)
        return base_lr * f32(c_pow(base, -f32(param.power))), current_step
    if policy == "multistep":
        if current_step < len(param.stepvalue) and iteration >= param.stepvalue[current_step]:
            current_step += 1
            if log:
                glog.info("sgd_solver.multistep_status", "MultiStep Status: Iteration %d, step = %d"
                          % (iteration, current_step))
        _check(gamma >= 0, "lr_policy multistep needs gamma >= 0 (got %s)" % glog.fmt(gamma))
        return f32(float(base_lr) * c_pow(gamma, current_step)), current_step
    if policy == "poly":
        _check(param.max_iter > 0, "lr_policy poly needs max_iter > 0")
        frac = f32(1) - f32(iteration) / f32(param.max_iter)
        return base_lr * f32(c_pow(frac, f32(param.power))), current_step
    if policy == "sigmoid":
        _check(gamma >= 0, "lr_policy sigmoid needs gamma >= 0 (got %s)" % glog.fmt(gamma))
        _check(param.stepsize > 0,
               "lr_policy sigmoid needs stepsize > 0 (got %d)" % param.stepsize)
        arg = -gamma * (f32(iteration) - f32(param.stepsize))
        try:
            e = f32(math.exp(float(arg)))
        except OverflowError:
            e = f32("inf")
        return base_lr * (f32(1) / (f32(1) + e)), current_step
    raise CaffeError("Unknown learning rate policy: %s (known policies: %s)"
                     % (policy, ", ".join(POLICIES)))
