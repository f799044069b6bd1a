"""Layer: the contract every layer follows (Caffe's layer.hpp), built-in and Python alike.

A layer implements the hooks ``setup``, ``reshape``, ``forward`` and ``backward`` (pycaffe's
Python-layer methods, Caffe's LayerSetUp/Reshape/Forward_cpu/Backward_cpu) once, against the
array module ``self.xp`` it is handed. Net drives it through ``SetUp``/``Forward``/``Backward``,
which pick the side from the mode, hand the hooks the blobs as seen from that side (``.data`` is
that side's array) and ``self.weights``, the parameter blobs likewise. ``forward_gpu`` /
``backward_gpu`` may override the device path where a hand kernel pays; a layer without device
code (``device_code = False``, e.g. a Python layer) always runs on host copies.
"""
import math
import weakref

import numpy

from . import backend, context, engines, glog
from .blob import Blob
from .context import CPU, GPU
from .errors import CaffeError, as_raised
from .kernels import host_memory
from .proto import caffe_pb2

_UNRESOLVED = object()  # a layer's device engine before its first device call


def _empty_bottom(hook, args):
    """The first bottom with no values among a hook's arguments ((bottom, top) or, for
    backward, (top, propagate_down, bottom)), or None."""
    bottoms = args[2] if hook.__name__.startswith("backward") else args[0]
    return next((b for b in bottoms if b.count == 0), None)


class BlobVec(list):
    """A layer's parameter blobs (pycaffe's BlobVec), with ``add_blob(*shape)``. It holds its
    layer weakly, so a dropped net frees its layers at once (a data layer's database and
    prefetch thread with them), as Caffe's ~Net does, not at the next cyclic collection."""

    def __init__(self, blobs=(), owner=None):
        super().__init__(blobs)
        self._owner = weakref.ref(owner) if owner is not None else None

    @property
    def owner(self):
        return self._owner() if self._owner is not None else None

    def add_blob(self, *shape, **kwargs):
        if kwargs:
            raise TypeError("BlobVec.add_blob takes no kwargs")
        if len(shape) == 1 and not isinstance(shape[0], (int, numpy.integer)):
            shape = tuple(shape[0])
        dtype = self.owner.net_dtype if self.owner is not None else numpy.float32
        self.append(Blob(tuple(int(d) for d in shape), dtype=dtype))


def _shapes(bottom, top):
    """The blob views a reshape saw and their shapes (views are kept per blob, so the same
    view is the same blob)."""
    return tuple((v, v.shape) for v in bottom) + (None,) + tuple((v, v.shape) for v in top)


class Layer:
    """Base of all layers (pycaffe's ``caffe.Layer``): Net calls SetUp once, then Forward and
    Backward every iteration."""

    type = None
    exact_num_bottom_blobs = -1
    min_bottom_blobs = -1
    max_bottom_blobs = -1
    exact_num_top_blobs = -1
    min_top_blobs = -1
    max_top_blobs = -1
    equal_num_bottom_top_blobs = False
    auto_top_blobs = False
    is_loss = False      # loss layers default their first top's loss_weight to 1
    device_code = True   # the hooks can compute on device arrays
    hands_blobs = False  # the hooks get the Blobs themselves (pycaffe's Python layers)
    skip_init_line = None  # the glog line a layer with learned blobs says when it has them
    net_log = False      # its net logs its construction (inner nets a layer builds log too)
    # parameter blobs whose whole gradient the backward writes where a solver's clear is
    # pending (Blob.claim_cleared_diff): those the solver may clear lazily on the host
    claims_cleared_diffs = ()
    # set by the net: a later layer writes in place into storage a bottom shares, so the
    # bottom's data at backward time is not what the forward pass read
    bottom_rewritten = False
    # the reshape hook's work follows from the bottoms' and tops' shapes alone (and the
    # layer's parameters): a Reshape that finds the blobs and shapes its last one left skips
    # it and calls ``reshape_again`` (Forward reshapes every pass, as Caffe's does)
    reshape_by_shapes = False

    def tops_alias_bottom(self, bottom_count, top_count):
        """Whether the tops share the bottom's data storage (Split, Reshape, Flatten, a Concat
        or Slice of one): writes into either reach the other."""
        return False

    def __init__(self, param):
        self.layer_param = param
        self.phase = param.phase
        self.net_dtype = numpy.float32
        self.blobs = [Blob().from_proto(b) for b in param.blobs]
        self.param_propagate_down = [True] * len(self.blobs)
        self.loss_weights = []
        self.side, self.xp, self.weights = CPU, numpy, []
        self._device_engine = _UNRESOLVED

    @property
    def name(self):
        return self.layer_param.name

    @property
    def blobs(self):
        """The parameter blobs; their ``data``/``diff`` are host arrays (pycaffe's layer.blobs)."""
        return self._blobs

    @blobs.setter
    def blobs(self, value):
        self._blobs = BlobVec(value, self)

    # ---- hooks (override these) ----------------------------------------------------------
    def setup(self, bottom, top):
        """One-time set-up from layer_param (create parameter blobs here)."""

    def reshape(self, bottom, top):
        """Shape the tops (and buffers) for the bottoms' current shapes."""
        raise NotImplementedError("%s has no method reshape(bottom, top)" % type(self).__name__)

    def forward(self, bottom, top):
        raise NotImplementedError("%s has no method forward(bottom, top)" % type(self).__name__)

    def backward(self, top, propagate_down, bottom):
        """Default: nothing to propagate (layers with no backward)."""

    def forward_gpu(self, bottom, top):
        """The device path; by default the written-once ``forward`` on device arrays."""
        self.forward(bottom, top)

    def backward_gpu(self, top, propagate_down, bottom):
        self.backward(top, propagate_down, bottom)

    def capture_feeds(self, xp):
        """Called before a CUDA graph captures this layer: the callables that refill, before
        each replay, the device values the layer would read from the host every pass (Dropout's
        key). Most layers read none."""
        return []

    def allow_force_backward(self, bottom_index):
        return True

    def has_given_blobs(self, bottom):
        """Whether set-up finds its parameter blobs already there (from the prototxt's
        ``blobs`` or the caller), so Caffe's LayerSetUp skips their fillers and says so."""
        return bool(self.blobs)

    def scratch(self, name, shape, dtype):
        """An array of ``shape`` on this call's side, kept between calls under ``name`` (GEMM
        operands, pooling winners): hot paths allocate nothing once shapes settle."""
        buffers = self.__dict__.setdefault("_scratch", {})
        buf, size = buffers.get(name), math.prod(shape)
        if (buf is None or buf.size < size or buf.dtype != dtype
                or not isinstance(buf, self.xp.ndarray)):
            buf = buffers[name] = host_memory.buffer(self.xp, size, dtype)
        return buf[:size].reshape(shape)

    def explain_nonfinite_loss(self):
        """Called when this layer's loss comes back NaN or infinite: raise if bad input (not
        the numbers) is why. Label-reading losses check labels they deferred on the device."""
        check = getattr(self, "label_check", None)
        if check is not None:
            labels, bad, num_labels = check() if callable(check) else check
            if bool(bad.any()):
                v = int(labels[bad].reshape(-1)[0])
                raise self.error("label value %d out of range [0, %d)" % (v, num_labels))

    def engine_name(self):
        """The engine this layer runs with on the device: "CAFFE" or "CUDNN" (engines.py).
        (A method, not an attribute: Python layers may use ``self.engine`` for their own.)"""
        return engines.CAFFE if self.device_engine() is None else engines.CUDNN

    def device_engine(self):
        """The CUDNN engine object that runs this layer on the device, or None (CAFFE); chosen
        on first use, so a net built in CPU mode chooses when it first runs on the device."""
        if getattr(self, "_device_engine", _UNRESOLVED) is _UNRESOLVED:
            self._device_engine = engines.device_engine(
                self, len(self.layer_param.top)) if self.device_code else None
        return self._device_engine

    # ---- drivers (Caffe's Layer::SetUp / Forward / Backward) ----------------------------
    def _enter(self):
        """Pick the side this call runs on and hand the hooks its array module and weights
        (parameters are read and written where the layer runs)."""
        side = GPU if self.device_code and context.is_gpu() else CPU
        self.side = side
        self.xp = backend.device_module() if side == GPU else numpy
        self.weights = [b.at(side) for b in self._blobs]
        return side

    def _forward_views(self, side, bottom, top):
        """Forward reads the bottoms' data and writes the tops' (an in-place blob is written)."""
        if self.hands_blobs:
            return bottom, top
        written = {id(t) for t in top}
        return ([b.at(side, id(b) in written, False) for b in bottom],
                [t.at(side, True, False) for t in top])

    def _backward_views(self, side, top, bottom):
        """Backward reads the tops' data and diff and writes the bottoms' diff."""
        if self.hands_blobs:
            return top, bottom
        written = {id(b) for b in bottom}
        return ([t.at(side, False, id(t) in written) for t in top],
                [b.at(side, False, True) for b in bottom])

    def _guarded(self, hook, *args):
        """Call a hook; a Python layer's own exception becomes a CaffeError naming the layer
        (and of the exception's own type where it can be), as does an error of a helper that
        does not know the layer (a filler, an axis check) and a built-in layer's failure on a
        bottom with no values (Caffe's crash there); any other is a bug and stays raw."""
        try:
            return hook(*args)
        except CaffeError as exc:
            if str(exc).startswith("Layer "):
                raise
            raise self.error(str(exc)) from exc
        except Exception as exc:    # still an exc's type too, as pycaffe re-raises it
            if self.device_code:
                empty = _empty_bottom(hook, args)
                if empty is None:
                    raise           # a bug of caffecli's
                # where Caffe divides by the zero count or reads memory it never had
                raise self.error("cannot %s a bottom with no values (shape %s): %s: %s" % (
                    hook.__name__, empty.shape_string(), type(exc).__name__, exc)) from exc
            if isinstance(exc, NotImplementedError):
                raise self.error(str(exc)) from exc
            raise self.error("%s.%s raised %s: %s" % (type(self).__name__, hook.__name__,
                                                      type(exc).__name__, exc), exc) from exc

    def SetUp(self, bottom, top):  # noqa: N802 - Caffe's name; setup() is the hook
        """CheckBlobCounts -> LayerSetUp -> Reshape -> SetLossWeights."""
        self.check_blob_counts(bottom, top)
        if self.is_loss and len(self.layer_param.loss_weight) == 0:
            self.layer_param.loss_weight.append(1.0)
        side = self._enter()
        if self.skip_init_line and self.has_given_blobs(bottom):
            glog.info(self.skip_init_line, "Skipping parameter initialization")
        b, t = (bottom, top) if self.hands_blobs else \
            ([x.at(side) for x in bottom], [x.at(side) for x in top])
        self._guarded(self.setup, b, t)
        self.weights = [x.at(side) for x in self._blobs]
        self._reshape_hook(*self._forward_views(side, bottom, top))
        self.set_loss_weights(top)
        while len(self.param_propagate_down) < len(self._blobs):
            self.param_propagate_down.append(True)

    def reshape_again(self):
        """Called in place of ``reshape`` where ``reshape_by_shapes`` skipped it: what must
        still happen at every Reshape (a layer's caches of the last forward dropped)."""

    def _reshape_hook(self, b, t):
        """The reshape hook, or ``reshape_again`` where ``reshape_by_shapes`` lets it skip."""
        if not self.reshape_by_shapes:
            self._guarded(self.reshape, b, t)
        elif _shapes(b, t) == self.__dict__.get("_reshaped"):
            self.reshape_again()
        else:
            self._reshaped = None
            self._guarded(self.reshape, b, t)
            self._reshaped = _shapes(b, t)

    def _reshape(self, side, b, t):
        self._reshape_hook(b, t)
        engine = self.device_engine() if side == GPU else None
        if engine is not None:
            try:
                engine.reshape(b, t)
            except engines.Unsupported as exc:    # this shape is CAFFE's from now on
                engines.fall_back(self, exc)
                engine = self._device_engine = None
        return engine

    def Reshape(self, bottom, top):  # noqa: N802
        side = self._enter()
        self._reshape(side, *self._forward_views(side, bottom, top))

    def Forward(self, bottom, top):  # noqa: N802
        """Reshape, compute the tops, and return the weighted loss of the loss tops."""
        return self.checked_loss([float(v) for v in self.forward_terms(bottom, top)])

    def forward_terms(self, bottom, top):
        """Reshape and compute the tops; the weighted loss of each loss top, not yet read (a
        device scalar on the GPU), so a captured forward leaves it on the device."""
        side, b, t, engine = self.prepare_forward(bottom, top)
        self.run_forward(side, b, t, engine)
        terms = []
        for i, blob in enumerate(top):
            if self.loss(i):
                view = blob.at(side, False, False)
                terms.append((view.data * view.diff).sum())
        return terms

    def prepare_forward(self, bottom, top):
        """Forward's steps before its computation: the side, the views the hook gets, the
        reshape, and the device engine that computes it (None: the hook)."""
        side = self._enter()
        b, t = self._forward_views(side, bottom, top)
        return side, b, t, self._reshape(side, b, t)

    def run_forward(self, side, b, t, engine):
        """Forward's computation on prepared views (prepare_forward)."""
        if engine is not None:
            engine.forward(b, t)
        else:
            self._guarded(self.forward_gpu if side == GPU else self.forward, b, t)

    def checked_loss(self, terms):
        """The sum of this layer's read loss terms, after explaining a NaN or infinity."""
        loss = 0.0
        for v in terms:
            loss += v
        if not math.isfinite(loss):
            self.explain_nonfinite_loss()
        return loss

    def Backward(self, top, propagate_down, bottom):  # noqa: N802
        self.run_backward(*self.prepare_backward(top, bottom), propagate_down)

    def prepare_backward(self, top, bottom):
        """Backward's steps before its computation: the side and the views the hook gets."""
        side = self._enter()
        return (side,) + self._backward_views(side, top, bottom)

    def run_backward(self, side, t, b, propagate_down):
        """Backward's computation on prepared views (prepare_backward)."""
        propagate_down = [bool(p) for p in propagate_down]
        engine = self.device_engine() if side == GPU else None
        if engine is not None:
            engine.backward(t, propagate_down, b)
        else:
            self._guarded(self.backward_gpu if side == GPU else self.backward, t,
                          propagate_down, b)

    # ---- loss weights, counts, errors ----------------------------------------------------
    def loss(self, top_index):
        return self.loss_weights[top_index] if top_index < len(self.loss_weights) else 0.0

    def set_loss_weights(self, top):
        """Loss weights per top; a weighted top's diff holds its weight (Caffe's SetLossWeights)."""
        weights = list(self.layer_param.loss_weight)
        if weights:
            if len(weights) != len(top):
                raise CaffeError("Layer %s (%s): loss_weight must be unspecified or specified "
                                 "once per top blob (%d weights, %d tops)"
                                 % (self.name, self.type, len(weights), len(top)))
            self.loss_weights = [float(w) for w in weights]
            for t, w in zip(top, self.loss_weights):
                if w:
                    t.diff[...] = w
        else:
            self.loss_weights = [0.0] * len(top)

    def set_param_propagate_down(self, index, value):
        while len(self.param_propagate_down) <= index:
            self.param_propagate_down.append(True)
        self.param_propagate_down[index] = bool(value)

    def check_blob_counts(self, bottom, top):
        nb, nt = len(bottom), len(top)
        rules = (("bottom input", nb, "exactly", self.exact_num_bottom_blobs, nb.__ne__),
                 ("bottom input", nb, "at least", self.min_bottom_blobs, nb.__lt__),
                 ("bottom input", nb, "at most", self.max_bottom_blobs, nb.__gt__),
                 ("top output", nt, "exactly", self.exact_num_top_blobs, nt.__ne__),
                 ("top output", nt, "at least", self.min_top_blobs, nt.__lt__),
                 ("top output", nt, "at most", self.max_top_blobs, nt.__gt__))
        for what, n, rule, limit, broken in rules:
            if limit >= 0 and broken(limit):
                raise CaffeError("Layer %s (%s) takes %s %d %s blob(s) as %s, got %d"
                                 % (self.name, self.type, rule, limit, what.split()[0], what, n))
        if self.equal_num_bottom_top_blobs and nb != nt:
            raise CaffeError("Layer %s (%s) needs as many tops as bottoms, got %d bottoms "
                             "and %d tops" % (self.name, self.type, nb, nt))

    def error(self, message, cause=None):
        """A CaffeError prefixed with this layer's name and type; of ``cause``'s type too
        where it can be (errors.as_raised)."""
        message = "Layer %s (%s): %s" % (self.name, self.type, message)
        return CaffeError(message) if cause is None else as_raised(cause, message)

    def to_proto(self, write_diff=False):
        """This layer's LayerParameter with its current parameter blobs."""
        p = caffe_pb2.LayerParameter()
        p.CopyFrom(self.layer_param)
        del p.blobs[:]
        for b in self._blobs:
            b.to_proto(p.blobs.add(), write_diff=write_diff)
        return p


class NeuronLayer(Layer):
    """One bottom, one top of the same shape (elementwise layers; in-place allowed)."""

    exact_num_bottom_blobs = 1
    exact_num_top_blobs = 1

    def reshape(self, bottom, top):
        top[0].reshape_like(bottom[0])


class LossLayer(Layer):
    """Two bottoms (predictions, labels/targets), one scalar top weighted 1 by default."""

    exact_num_bottom_blobs = 2
    exact_num_top_blobs = 1
    is_loss = True
    auto_top_blobs = True   # a loss layer named with no top gets an anonymous one (Caffe's)

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1

    def reshape(self, bottom, top):
        if not (bottom[0].num_axes and bottom[1].num_axes):   # Caffe's shape(0) CHECK fails
            raise self.error("a loss layer's bottoms need a first (batch) axis, got a %d-axis "
                             "and a %d-axis blob" % (bottom[0].num_axes, bottom[1].num_axes))
        if bottom[0].shape_at(0) != bottom[1].shape_at(0):
            raise self.error("The data and label should have the same first dimension "
                             "(%s vs %s)" % (bottom[0].shape_string(), bottom[1].shape_string()))
        top[0].reshape(())
