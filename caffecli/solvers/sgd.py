"""SGD with momentum and Nesterov's accelerated gradient (Caffe's sgd_solver.cpp and
nesterov_solver.cpp).

SGDSolver also holds what every Caffe solver shares: the history blobs, gradient clipping,
iter_size normalization, L1/L2 regularization and the order of ApplyUpdate.
"""
import numpy

from .. import backend, context, glog
from ..blob import Blob
from ..errors import CaffeError
from ..kernels import device, jit, solver_jit
from ..kernels.blas_steps import fused
from .base import Solver, register_solver
from .lr_policy import learning_rate

f32 = numpy.float32


@register_solver("SGD")
class SGDSolver(Solver):
    """Stochastic gradient descent with momentum: h = lr*g + m*h; w -= h."""

    history_sets = 1   # how many history blobs per learnable parameter (AdaDelta/Adam: 2)
    update_kernel = "sgd_update"   # kernels/cuda/solvers.cu: this solver's fused device update

    def __init__(self, param, dtype=numpy.float32):
        super().__init__(param, dtype)
        self.check_params()
        self.pre_solve()

    def check_params(self):
        """Solver-specific parameter checks (Caffe's constructor_sanity_check)."""

    def pre_solve(self):
        params = self.net.learnable_params
        self.history = [Blob(p.shape, dtype=p.dtype)   # new memory reads as zeros
                        for _ in range(self.history_sets) for p in params]

    # ---- ApplyUpdate (on the mode's side, as Caffe's *_solver.cu kernels) ----------------
    def param_at(self, param_id):
        """Learnable parameter ``param_id`` as seen from the mode's side."""
        return self.net.learnable_params[param_id].at(context.mode())

    def history_at(self, index):
        """History blob ``index``'s data on the mode's side."""
        return self.history[index].at(context.mode()).data

    def get_learning_rate(self):
        rate, self.current_step = learning_rate(self.param, self.iter, self.current_step,
                                                log=self.root)
        return rate

    def apply_update(self):
        rate = self.announce_rate()
        self.clip_gradients()
        self.update_params(self.iteration_scalars(rate))
        self.iter += 1

    def announce_rate(self):
        """This iteration's rate (a step policy advances here), logged at display iterations."""
        rate = self.get_learning_rate()
        if self.param.display and self.iter % self.param.display == 0:
            self._info("sgd_solver.iteration_lr", "Iteration %d, lr = %s"
                       % (self.iter, glog.fmt(rate)))
        return rate

    def iteration_scalars(self, rate):
        """The host values this iteration's update reads: host floats, or in a captured CUDA
        graph device scalars refilled before each launch (solvers/graphed.py)."""
        return {"rate": f32(rate)}

    def update_params(self, scalars):
        """Normalize, regularize and compute every parameter's update, then apply them."""
        self.scalars = scalars
        if self.fused_update(scalars):
            return
        for param_id in range(len(self.net.learnable_params)):
            self.normalize(param_id)
            self.regularize(param_id)
            self.compute_update_value(param_id, scalars["rate"])
        self.net.update()

    def kernel_constants(self):
        """The hyper-parameters the update kernel takes last, as Caffe's floats."""
        return (f32(self.param.momentum),)

    def fused_update(self, scalars):
        """Each parameter's whole update (normalize, regularize, update value, apply) as one
        kernel: on the device kernels/cuda/solvers.cu, on the host kernels/solver_jit.py;
        False where the array code must run (kernels off or not for these arrays, or a
        subclass with update steps of its own)."""
        params = self.net.learnable_params
        if not (params and self._kernel_matches()):
            return False
        if not context.is_gpu():
            return self._host_update(scalars)
        xp = backend.device_module()
        if not device.usable(xp, params[0].at(context.GPU, False, False).data):
            return False
        rates = [self._device_scalar(xp, name, value) for name, value in scalars.items()]
        norm = f32(1) / f32(max(self.param.iter_size, 1))
        n = len(params)
        for param_id in range(n):
            p = self.param_at(param_id)
            decay, reg = self._decay(param_id)
            histories = self._histories(param_id)
            device.launch(xp, "solvers", self.update_kernel, p.data.size, p.data.dtype, p.data,
                          p.diff, *histories, *rates, f32(self.net.params_lr[param_id]), norm,
                          numpy.int32(reg), decay, *self.kernel_constants())
        return True

    def _histories(self, param_id):
        """The parameter's history arrays, one per history set (Adam's m and v, ...)."""
        n = len(self.net.learnable_params)
        return [self.history_at(param_id + k * n) for k in range(self.history_sets)]

    def _decay(self, param_id):
        """(local weight decay, regularization: 0 none, 1 L1, 2 L2)."""
        decay = f32(self.param.weight_decay) * f32(self.net.params_weight_decay[param_id])
        reg = {"L1": 1, "L2": 2}.get(self.param.regularization_type) if decay else 0
        if reg is None:
            raise CaffeError("Unknown regularization type: " + self.param.regularization_type)
        return decay, reg

    def _host_update(self, scalars):
        """The host's compiled update, parameter by parameter, where every array is a host
        array it takes; False (nothing done) otherwise."""
        flat = []
        for param_id in range(len(self.net.learnable_params)):
            p = self.param_at(param_id)
            flat.append([a.reshape(-1) for a in [p.data, p.diff] + self._histories(param_id)])
        if not (jit.usable(*(a for arrays in flat for a in arrays))
                and all(a.dtype == arrays[0].dtype for arrays in flat for a in arrays)):
            return False
        norm = f32(1) / f32(max(self.param.iter_size, 1))
        for param_id, (w, g, *histories) in enumerate(flat):
            decay, reg = self._decay(param_id)
            lr = self.local_rate(param_id, scalars["rate"])
            if "correction" in scalars:
                lr = lr * scalars["correction"]
            solver_jit.update(self.update_kernel, w, g, histories, lr, norm, reg, decay,
                              self.kernel_constants())
        return True

    def _kernel_matches(self):
        """Whether the update kernel computes this class's update (a subclass may override a
        step and keep its parent's kernel)."""
        cls = type(self)
        owner = next(c for c in cls.__mro__ if "update_kernel" in c.__dict__)
        return all(getattr(cls, step) is getattr(owner, step)
                   for step in ("normalize", "regularize", "compute_update_value",
                                "kernel_constants"))

    def _device_scalar(self, xp, name, value):
        """``value`` as a 0-d float32 device array: a captured graph's own, or one kept per
        name and filled (a kernel, no copy) each iteration."""
        if backend.is_device_array(value):
            return value
        kept = self.__dict__.setdefault("_kernel_scalars", {})
        if not isinstance(kept.get(name), xp.ndarray):
            kept[name] = xp.zeros((), numpy.float32)
        kept[name].fill(value)
        return kept[name]

    def clip_gradients(self):
        clip = f32(self.param.clip_gradients)
        if clip < 0:
            return
        params = self.net.learnable_params
        sumsq = f32(0)
        for p in params:
            sumsq += f32(p.sumsq_diff())
        l2norm = f32(numpy.sqrt(sumsq))
        if l2norm > clip:
            scale = clip / l2norm
            self._info("sgd_solver.gradient_clipping",
                       "Gradient clipping: scaling down gradients (L2 norm "
                       "%s > %s) by scale factor %s"
                       % (glog.fmt(l2norm), glog.fmt(clip), glog.fmt(scale)))
            for param_id in range(len(params)):
                self.param_at(param_id).diff[...] *= scale

    def normalize(self, param_id):
        if self.param.iter_size == 1:
            return
        self.param_at(param_id).diff[...] *= f32(1) / f32(self.param.iter_size)

    def regularize(self, param_id):
        p = self.param_at(param_id)
        local_decay = f32(self.param.weight_decay) * f32(self.net.params_weight_decay[param_id])
        if not local_decay:
            return
        kind = self.param.regularization_type
        xp = backend.array_module(p.data)
        if kind == "L2":     # Caffe's axpy: one rounding
            p.diff[...] = fused(local_decay, p.data, p.diff)
        elif kind == "L1":
            p.diff[...] = fused(local_decay, xp.sign(p.data), p.diff)
        else:
            raise CaffeError("Unknown regularization type: " + kind)

    def local_rate(self, param_id, rate):
        rate = rate if backend.is_device_array(rate) else f32(rate)
        return rate * f32(self.net.params_lr[param_id])

    def compute_update_value(self, param_id, rate):
        p = self.param_at(param_id)
        h = self.history_at(param_id)
        momentum = f32(self.param.momentum)
        h[...] = fused(self.local_rate(param_id, rate), p.diff, momentum * h)   # Caffe's axpby
        p.diff[...] = h

    # ---- state for snapshots -----------------------------------------------------------
    def history_blobs(self):
        return self.history

    def restore_history(self, arrays):
        if len(arrays) != len(self.history):
            raise CaffeError("Incorrect length of history blobs (the solver state has %d, "
                             "this %s solver needs %d)."
                             % (len(arrays), self.type, len(self.history)))
        for blob, arr in zip(self.history, arrays):
            arr = numpy.asarray(arr)
            if arr.size != blob.count:
                raise CaffeError("solver state history blob of shape %s does not fit a "
                                 "parameter of shape %s" % (arr.shape, blob.shape_string()))
            blob.data[...] = arr.astype(blob.dtype, copy=False).reshape(blob.shape)


@register_solver("Nesterov")
class NesterovSolver(SGDSolver):
    """Nesterov momentum: h' = lr*g + m*h; step (1+m)*h' - m*h."""

    update_kernel = "nesterov_update"

    def compute_update_value(self, param_id, rate):
        p = self.param_at(param_id)
        h = self.history_at(param_id)
        momentum = f32(self.param.momentum)
        previous = h.copy()
        h[...] = fused(self.local_rate(param_id, rate), p.diff, momentum * h)
        p.diff[...] = fused(f32(1) + momentum, h, -momentum * previous)

