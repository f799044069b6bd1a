"""caffecli's CUDNN engines (engines.py) on NVIDIA's cuDNN frontend (nvidia-cudnn-frontend, the
``[gpu]`` extra): Convolution and Deconvolution as cuDNN's conv fprop, dgrad and wgrad (Caffe's
cudnn_conv_layer and cudnn_deconv_layer), and, where a prototxt names ``engine: CUDNN``, ReLU,
Sigmoid and TanH as pointwise graphs. Each graph is built once per shape, runs on cupy's
pointers, current stream and memory pool, and leaves out FP32 plans that round inputs to TF32,
so the numbers are FP32's as Caffe computes them.
"""
import threading

import cudnn
import numpy

from .. import engines

_KINDS = {"float32": cudnn.data_type.FLOAT, "float64": cudnn.data_type.DOUBLE}
_STRICT_FP32 = [getattr(cudnn.numerical_note, n) for n in
                ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "REDUCED_PRECISION_REDUCTION")
                if hasattr(cudnn.numerical_note, n)]
WORKSPACE_LIMIT = 256 << 20  # bytes: plans needing more are left out (each plan keeps its own)
_local = threading.local()   # .handles: device id -> [handle, the stream it is bound to]


def _handle(xp):
    """This thread's cuDNN handle on the current device, bound to cupy's current stream (a
    captured graph's stream while it captures)."""
    handles = _local.__dict__.setdefault("handles", {})
    device = xp.cuda.Device().id
    entry = handles.get(device)
    if entry is None:
        entry = handles[device] = [cudnn.create_handle(), None]
    stream = xp.cuda.get_current_stream().ptr
    if entry[1] != stream:
        cudnn.set_stream(handle=entry[0], stream=stream)
        entry[1] = stream
    return entry[0]


def contiguous(shape):
    """(dims, element strides) of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for d in reversed(shape):
        strides.insert(0, step)
        step *= int(d)
    return [int(d) for d in shape], strides


class Plan:
    """One cuDNN graph built for fixed shapes. ``make(graph, kind)`` declares it and returns
    its operand tensors, inputs then output; ``run`` takes their arrays in that order and
    executes ``repeat`` times, moving each operand by its ``offsets`` (bytes) every time.
    ``strict`` leaves out FP32 plans with tensor-core or down-converting notes (convolutions);
    pointwise graphs have no products to round, and with that filter cuDNN 9.19 on an H200
    left no plan for them, so they keep every plan."""

    def __init__(self, xp, dtype, make, repeat=1, offsets=None, strict=True):
        kind = _KINDS.get(numpy.dtype(dtype).name)
        if kind is None:
            raise engines.Unsupported("caffecli's cuDNN engines take float32 and float64, "
                                      "not %s" % numpy.dtype(dtype).name)
        try:
            graph = cudnn.pygraph(io_data_type=kind, intermediate_data_type=kind,
                                  compute_data_type=kind, handle=_handle(xp))
            self.tensors = make(graph, kind)
            graph.validate()
            graph.build_operation_graph()
            graph.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
            if strict and kind == cudnn.data_type.FLOAT:
                graph.deselect_numeric_notes(_STRICT_FP32)
            graph.deselect_workspace_greater_than(WORKSPACE_LIMIT)
            graph.check_support()
            graph.build_plans()
            size = int(graph.get_workspace_size())
        except Exception as exc:   # the frontend's errors have no common base class
            first = (str(exc).strip().splitlines() or [""])[0]
            raise engines.Unsupported("%s: %s" % (type(exc).__name__, first)) from exc
        self.graph, self.xp, self.repeat = graph, xp, repeat
        self.offsets = offsets or [0] * len(self.tensors)
        self.workspace = xp.empty(max(size, 1), dtype=numpy.uint8)

    def run(self, *arrays):
        handle = _handle(self.xp)
        pointers = [a.data.ptr for a in arrays]
        for i in range(self.repeat):
            self.graph.execute({t: p + i * o for t, p, o in
                                zip(self.tensors, pointers, self.offsets)},
                               self.workspace.data.ptr, handle=handle)


# ---- convolution ------------------------------------------------------------------------
# cuDNN's names: the image (N, Ci, *spatial) convolved by the filter (Co, Ci/g, *kernel) gives
# the loss side (N, Co, *grid). fprop: (image, filter) -> loss; dgrad: (loss, filter) ->
# image; wgrad: (image, loss) -> filter. Convolution's bottom is the image, Deconvolution's
# bottom the loss side.
_CONV_OPS = {"fprop": ("image", "filter", "loss"), "dgrad": ("loss", "filter", "image"),
             "wgrad": ("image", "loss", "filter")}


def _declare(op, dims, strides, geometry):
    """``make`` for Plan: the graph of one convolution op on operands of these dims/strides."""
    pad, stride, dilation = geometry

    def make(graph, kind):
        a, b, out = _CONV_OPS[op]
        ta, tb = (graph.tensor(name=n, dim=dims[n], stride=strides[n], data_type=kind)
                  for n in (a, b))
        call = dict(padding=pad, stride=stride, dilation=dilation, compute_data_type=kind)
        if op == "fprop":
            result = graph.conv_fprop(image=ta, weight=tb, **call)
        elif op == "dgrad":
            result = graph.conv_dgrad(loss=ta, filter=tb, **call)
        else:
            result = graph.conv_wgrad(image=ta, loss=tb, **call)
        result.set_output(True).set_dim(dims[out]).set_stride(strides[out]).set_data_type(kind)
        return [ta, tb, result]
    return make


class ConvPlans:
    """The three convolution ops of one layer at one shape, each built on first use: one
    grouped graph, or where cuDNN declines that, one group's graph run per group."""

    def __init__(self, xp, dtype, num, image, loss, kernel, group, geometry):
        self.xp, self.dtype, self.group, self.geometry = xp, numpy.dtype(dtype), group, geometry
        ci, co = image[0], loss[0]
        self.shapes = {"image": (num,) + tuple(image), "loss": (num,) + tuple(loss),
                       "filter": (co, ci // group) + tuple(kernel)}
        self.ops, self.backward_declined = {}, False

    def get(self, op):
        """The plan of ``op``; raises engines.Unsupported (every time) where none builds."""
        plan = self.ops.get(op)
        if plan is None:
            try:
                plan = self._build(op)
            except engines.Unsupported as exc:
                plan = exc
            self.ops[op] = plan
        if isinstance(plan, engines.Unsupported):
            raise plan
        return plan

    def _build(self, op):
        full = {n: contiguous(s) for n, s in self.shapes.items()}
        dims = {n: d for n, (d, _) in full.items()}
        strides = {n: s for n, (_, s) in full.items()}
        try:
            return Plan(self.xp, self.dtype, _declare(op, dims, strides, self.geometry))
        except engines.Unsupported:
            if self.group == 1:
                raise
        g = self.group     # per group: channel slices of the image and loss, whole strides
        one = {n: list(d) for n, d in dims.items()}
        one["image"][1] //= g
        one["loss"][1] //= g
        one["filter"][0] //= g
        one_strides = dict(strides, filter=contiguous(one["filter"])[1])
        size = self.dtype.itemsize
        step = {"image": one["image"][1] * strides["image"][1] * size,
                "loss": one["loss"][1] * strides["loss"][1] * size,
                "filter": int(numpy.prod(one["filter"])) * size}
        return Plan(self.xp, self.dtype, _declare(op, one, one_strides, self.geometry),
                    repeat=g, offsets=[step[n] for n in _CONV_OPS[op]])


@engines.register("Convolution")
@engines.register("Deconvolution")
class ConvolutionEngine:
    """Caffe's CuDNNConvolutionLayer (and deconvolution, the same ops with the sides swapped):
    the bias added and its gradient summed as the CAFFE engine does; the weight gradient
    computed apart and added, since Caffe accumulates it."""

    def __init__(self, layer):
        self.layer = layer
        self.plans = engines.PlanCache(self._plans)

    def _plans(self, key):
        layer = self.layer
        image, loss = (layer.out_shape, layer.in_shape) if layer.reverse else \
            (layer.in_shape, layer.out_shape)
        return ConvPlans(layer.xp, key[-1], layer.num, [layer.conv_in] + list(image),
                         [layer.conv_out] + list(loss), layer.kernel, layer.group,
                         (list(layer.pad), list(layer.stride), list(layer.dilation)))

    def reshape(self, bottom, top):
        layer = self.layer
        if layer.num_spatial != 2:
            raise engines.Unsupported("Caffe's cuDNN convolution takes 2 spatial axes, not %d"
                                      % layer.num_spatial)
        self.current = self.plans.get((layer.num, tuple(layer.in_shape),
                                       tuple(layer.out_shape), bottom[0].data.dtype.str))
        self.current.get("dgrad" if layer.reverse else "fprop")

    def forward(self, bottom, top):
        layer, plans = self.layer, self.current
        w = layer.weights[0].data
        for b, t in zip(bottom, top):
            plans.get("dgrad" if layer.reverse else "fprop").run(b.data, w, t.data)
            if layer.bias_term:
                y = t.data.reshape(layer.num, layer.num_output, -1)
                y += layer.weights[1].data.reshape(1, -1, 1)

    def backward(self, top, propagate_down, bottom):
        layer, plans = self.layer, self.current
        need_w = layer.param_propagate_down[0]
        try:
            wgrad = plans.get("wgrad") if need_w else None
            dgrad = plans.get("fprop" if layer.reverse else "dgrad") if any(propagate_down) \
                else None
        except engines.Unsupported as exc:   # the forward stays on cuDNN
            if not plans.backward_declined:
                plans.backward_declined = True
                engines.fall_back(layer, exc)
            return layer.backward_gpu(top, propagate_down, bottom)
        w = layer.weights[0]
        for t, b, down in zip(top, bottom, propagate_down):
            layer._bias_grad(t.diff.reshape(layer.num, layer.num_output, -1))
            if wgrad is not None:
                dw = layer.scratch("_cudnn_dw", w.diff.shape, w.diff.dtype)
                if layer.reverse:
                    wgrad.run(t.diff, b.data, dw)
                else:
                    wgrad.run(b.data, t.diff, dw)
                w.diff[...] += dw
            if down:
                dgrad.run(t.diff, w.data, b.diff)


# ---- pointwise (by name only: caffecli's own one-pass kernels run these under DEFAULT) ---
def _layouts(shape):
    """(dims, strides) declaring a contiguous array of ``shape`` to a pointwise-only graph, in
    the order tried: cuDNN 9.19 on an H200 plans a flat 3-D (1, 1, count) tensor and a 4-D one
    with channels-last strides, not (1, count, 1, 1) nor NCHW. Every operand is declared alike,
    and each layout covers the memory once, so any maps every element to itself."""
    count = int(numpy.prod(shape))
    yield [1, 1, count], [count, count, 1]
    if len(shape) == 4:
        n, c, h, w = (int(d) for d in shape)
        yield [n, c, h, w], [c * h * w, 1, w * c, c]


def _elementwise(layout, kind_of_graph):
    """``make`` for Plan: ``kind_of_graph(graph, tensor)`` on operands of ``layout``."""
    dims, strides = layout

    def make(graph, kind):
        def tensor(name):
            return graph.tensor(name=name, dim=dims, stride=strides, data_type=kind)
        operands = kind_of_graph(graph, tensor)
        operands[-1].set_output(True).set_dim(dims).set_stride(strides).set_data_type(kind)
        return operands
    return make


class PointwiseEngine:
    """Caffe's CuDNNReLU/Sigmoid/TanH layers: forward (bottom data) -> top data, backward from
    what Caffe's cuDNN layers read, which in-place layers still hold."""

    by_default = False

    def __init__(self, layer):
        self.layer = layer
        self.plans = engines.PlanCache(self._build)

    def _build(self, key):
        direction, shape, dtype = key
        failure = None
        for layout in _layouts(shape):
            try:
                return Plan(self.layer.xp, dtype,
                            _elementwise(layout, getattr(self, "declare_" + direction)),
                            strict=False)
            except engines.Unsupported as exc:
                failure = failure or exc
        raise failure

    def reshape(self, bottom, top):
        x = bottom[0].data
        self.key = (tuple(x.shape), x.dtype.str)
        self.plans.get(("forward",) + self.key)

    def forward(self, bottom, top):
        self.plans.get(("forward",) + self.key).run(bottom[0].data, top[0].data)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[0]:
            self.plans.get(("backward",) + self.key).run(
                top[0].diff, self.backward_reads(top, bottom), bottom[0].diff)


@engines.register("ReLU")
class ReLUEngine(PointwiseEngine):
    """max(x, 0) + negative_slope * min(x, 0); the gradient tests the bottom's sign (an
    in-place top has the same)."""

    def slope(self):
        return float(self.layer.layer_param.relu_param.negative_slope)

    def declare_forward(self, graph, tensor):
        x = tensor("x")
        return [x, graph.relu(input=x, negative_slope=self.slope() or None)]

    def declare_backward(self, graph, tensor):
        dy, x = tensor("dy"), tensor("x")
        return [dy, x, graph.relu_backward(loss=dy, input=x, negative_slope=self.slope() or None)]

    @staticmethod
    def backward_reads(top, bottom):
        return bottom[0].data


class _FromTop(PointwiseEngine):
    """Sigmoid and TanH: the gradient is a polynomial in the top data (dy, y -> dx)."""

    @staticmethod
    def backward_reads(top, bottom):
        return top[0].data


@engines.register("Sigmoid")
class SigmoidEngine(_FromTop):
    def declare_forward(self, graph, tensor):
        x = tensor("x")
        return [x, graph.sigmoid(input=x)]

    def declare_backward(self, graph, tensor):   # dx = dy y - dy y y
        dy, y = tensor("dy"), tensor("y")
        dyy = graph.mul(a=dy, b=y)
        return [dy, y, graph.sub(a=dyy, b=graph.mul(a=dyy, b=y))]


@engines.register("TanH")
class TanHEngine(_FromTop):
    def declare_forward(self, graph, tensor):
        x = tensor("x")
        return [x, graph.tanh(input=x)]

    def declare_backward(self, graph, tensor):   # dx = dy - dy y y
        dy, y = tensor("dy"), tensor("y")
        return [dy, y, graph.sub(a=dy, b=graph.mul(a=graph.mul(a=dy, b=y), b=y))]
