"""A stand-in for NVIDIA's cuDNN frontend (the ``cudnn`` module of nvidia-cudnn-frontend) on the
stand-in device: the part of its classic graph API caffecli's CUDNN engines use, computed with
numpy on memory found by its address, as cuDNN finds device memory by pointer.

It is as strict as the frontend where a mistake would go unnoticed on numbers alone: operands
are bound by integer pointers, every non-virtual tensor must be bound, dgrad and wgrad outputs
need their dims set, a filter's channels must divide the image's, an output's dims must be what
the convolution gives. It records what the engines asked for (``log``), can decline graphs
(``decline``) as cuDNN declines a configuration, and runs each execute as one stand-in device
operation, so a CUDA graph capture records it.
"""
import ctypes
import enum
import types

import numpy
from numpy.lib.stride_tricks import as_strided

from caffecli import standin

data_type = enum.Enum("data_type", "FLOAT DOUBLE HALF NOT_SET")
numerical_note = enum.Enum("numerical_note", "TENSOR_CORE DOWN_CONVERT_INPUTS "
                           "REDUCED_PRECISION_REDUCTION FFT NONDETERMINISTIC WINOGRAD")
heur_mode = enum.Enum("heur_mode", "A B FALLBACK")
_DTYPES = {data_type.FLOAT: numpy.float32, data_type.DOUBLE: numpy.float64}
log = []                 # (what, details) of every call an engine made
decline = [None]         # decline[0](op name, {operand: dims}) -> a reason, or None


class cudnnGraphNotSupportedError(RuntimeError):  # noqa: N801 - the frontend's name
    pass


def reset():
    log.clear()
    decline[0] = None


def create_handle():
    log.append(("create_handle", None))
    return types.SimpleNamespace(stream=None)


def set_stream(handle, stream):
    handle.stream = stream
    log.append(("set_stream", stream))


class Tensor:
    def __init__(self, name, dim=None, stride=None, data_type=None, virtual=False):
        self.name, self.dim, self.stride = name, dim, stride
        self.data_type, self.virtual = data_type, virtual

    def set_output(self, value):
        self.virtual = not value
        return self

    def set_dim(self, dim):
        self.dim = list(dim)
        return self

    def set_stride(self, stride):
        self.stride = list(stride)
        return self

    def set_data_type(self, kind):
        self.data_type = kind
        return self


def _memory(pointer, dims, strides, dtype):
    """The numpy view of ``dims``/``strides`` (elements) at address ``pointer``."""
    if type(pointer) is not int:
        raise TypeError("a device pointer must be an int, not %r" % type(pointer))
    itemsize = numpy.dtype(dtype).itemsize
    extent = (sum((d - 1) * s for d, s in zip(dims, strides)) + 1) * itemsize
    flat = numpy.frombuffer((ctypes.c_char * extent).from_address(pointer), dtype=dtype)
    return as_strided(flat, dims, [s * itemsize for s in strides], writeable=True)


def _conv_out(image, kernel, pad, stride, dilation):
    return [(i + 2 * p - ((k - 1) * d + 1)) // s + 1
            for i, k, p, s, d in zip(image, kernel, pad, stride, dilation)]


def _windows(x, kernel, pad, stride, dilation, grid):
    """(n, c, *grid, *kernel) windows of x (n, c, h, w) padded with zeros (float64)."""
    xp = numpy.pad(x.astype(numpy.float64), [(0, 0), (0, 0)] + [(p, p) for p in pad])
    sn, sc, sh, sw = xp.strides
    return as_strided(xp, x.shape[:2] + tuple(grid) + tuple(kernel),
                      (sn, sc, sh * stride[0], sw * stride[1], sh * dilation[0],
                       sw * dilation[1]), writeable=False)


def _by_group(a, axis, groups):
    return numpy.split(a, groups, axis=axis)


def _fprop(image, weight, pad, stride, dilation):
    g = image.shape[1] // weight.shape[1]
    grid = _conv_out(image.shape[2:], weight.shape[2:], pad, stride, dilation)
    win = _windows(image, weight.shape[2:], pad, stride, dilation, grid)
    return numpy.concatenate([numpy.einsum("nchwrs,kcrs->nkhw", wi, wk.astype(numpy.float64))
                              for wi, wk in zip(_by_group(win, 1, g), _by_group(weight, 0, g))],
                             axis=1)


def _dgrad(loss, weight, pad, stride, dilation, image_dims):
    g = image_dims[1] // weight.shape[1]
    n, c, h, w = image_dims
    kh, kw = weight.shape[2:]
    padded = numpy.zeros((n, c, h + 2 * pad[0], w + 2 * pad[1]))
    oh, ow = loss.shape[2:]
    for r in range(kh):
        for s in range(kw):
            rows = slice(r * dilation[0], r * dilation[0] + stride[0] * (oh - 1) + 1, stride[0])
            cols = slice(s * dilation[1], s * dilation[1] + stride[1] * (ow - 1) + 1, stride[1])
            part = [numpy.einsum("nkhw,kc->nchw", dy.astype(numpy.float64), wk[:, :, r, s])
                    for dy, wk in zip(_by_group(loss, 1, g), _by_group(weight, 0, g))]
            padded[:, :, rows, cols] += numpy.concatenate(part, axis=1)
    return padded[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + w]


def _wgrad(image, loss, pad, stride, dilation, filter_dims):
    g = image.shape[1] // filter_dims[1]
    win = _windows(image, filter_dims[2:], pad, stride, dilation, loss.shape[2:])
    return numpy.concatenate([numpy.einsum("nchwrs,nkhw->kcrs", wi, dy.astype(numpy.float64))
                              for wi, dy in zip(_by_group(win, 1, g), _by_group(loss, 1, g))])


_POINTWISE = {
    "relu": lambda x, slope=None: numpy.where(x > 0, x, x * (slope or 0)),
    "relu_backward": lambda dy, x, slope=None: numpy.where(x > 0, dy, dy * (slope or 0)),
    "sigmoid": lambda x: 1 / (1 + numpy.exp(-x)),
    "tanh": numpy.tanh,
    "mul": numpy.multiply,
    "sub": numpy.subtract,
}


class pygraph:  # noqa: N801 - the frontend's name
    """The classic graph API: declare, validate ... build_plans, execute."""

    def __init__(self, io_data_type=None, intermediate_data_type=None, compute_data_type=None,
                 handle=None, name="graph"):
        self.kind, self.handle = io_data_type, handle
        self.tensors, self.nodes, self.stage = [], [], "declared"

    def tensor(self, name, dim, stride, data_type):
        t = Tensor(name, list(dim), list(stride), data_type)
        self.tensors.append(t)
        return t

    def _node(self, op, inputs, params):
        out = Tensor("%s.out" % op, virtual=True, data_type=self.kind)
        self.tensors.append(out)
        self.nodes.append((op, inputs, params, out))
        return out

    def conv_fprop(self, image, weight, padding, stride, dilation, compute_data_type=None):
        return self._node("conv_fprop", [image, weight], (padding, stride, dilation))

    def conv_dgrad(self, loss, filter, padding, stride, dilation, compute_data_type=None):
        return self._node("conv_dgrad", [loss, filter], (padding, stride, dilation))

    def conv_wgrad(self, image, loss, padding, stride, dilation, compute_data_type=None):
        return self._node("conv_wgrad", [image, loss], (padding, stride, dilation))

    def relu(self, input, negative_slope=None):
        return self._node("relu", [input], (negative_slope,))

    def relu_backward(self, loss, input, negative_slope=None):
        return self._node("relu_backward", [loss, input], (negative_slope,))

    def sigmoid(self, input):
        return self._node("sigmoid", [input], ())

    def tanh(self, input):
        return self._node("tanh", [input], ())

    def mul(self, a, b):
        return self._node("mul", [a, b], ())

    def sub(self, a, b):
        return self._node("sub", [a, b], ())

    # ---- building --------------------------------------------------------------------
    def validate(self):
        for op, inputs, params, out in self.nodes:
            if not op.startswith("conv_"):
                out.dim = out.dim or inputs[0].dim
                out.stride = out.stride or inputs[0].stride
                continue
            if out.dim is None and op != "conv_fprop":
                raise cudnnGraphNotSupportedError("%s output dims are not set" % op)
            a, b = inputs
            image, weight, loss = {"conv_fprop": (a.dim, b.dim, out.dim),
                                   "conv_dgrad": (out.dim, b.dim, a.dim),
                                   "conv_wgrad": (a.dim, out.dim, b.dim)}[op]
            if image[1] % weight[1]:
                raise cudnnGraphNotSupportedError("filter channels %d do not divide image "
                                                  "channels %d" % (weight[1], image[1]))
            want = image[:1] + weight[:1] + _conv_out(image[2:], weight[2:], *params)
            if loss is not None and list(loss) != want:
                raise cudnnGraphNotSupportedError("%s: dims %s, the convolution gives %s"
                                                  % (op, loss, want))
            out.dim = out.dim or want
        self.stage = "validated"

    def build_operation_graph(self):
        assert self.stage == "validated", "build_operation_graph before validate"
        reason = decline[0] and decline[0](self.nodes[0][0], {
            t.name: t.dim for t in self.tensors if not t.virtual})
        if reason:
            raise cudnnGraphNotSupportedError(reason)
        self.stage = "built"

    def create_execution_plans(self, modes):
        assert self.stage == "built"
        self.modes, self.deselected = list(modes), []

    def deselect_numeric_notes(self, notes):
        self.deselected = list(notes)

    def deselect_workspace_greater_than(self, limit):
        self.workspace_limit = limit

    def check_support(self):
        pass

    def build_plans(self):
        self.stage = "planned"
        log.append(("build", ([n[0] for n in self.nodes], self.deselected,
                              {t.name: t.dim for t in self.tensors if not t.virtual})))

    def get_workspace_size(self):
        assert self.workspace_limit >= 256
        return 256

    # ---- running -----------------------------------------------------------------------
    def execute(self, bound, workspace, handle=None):
        assert self.stage == "planned", "execute before build_plans"
        if type(workspace) is not int:
            raise TypeError("workspace must be a pointer")
        wanted = {t for t in self.tensors if not t.virtual}
        if set(bound) != wanted:
            raise RuntimeError("execute binds %s, the graph has %s"
                               % (sorted(t.name for t in bound), sorted(t.name for t in wanted)))
        dtype = _DTYPES[self.kind]
        views = {t: standin.ndarray(_memory(p, t.dim, t.stride, dtype)) for t, p in bound.items()}
        order = list(views)
        log.append(("execute", [n[0] for n in self.nodes]))
        standin._call(self._compute, [order, [views[t] for t in order]], {})

    def _compute(self, order, arrays):
        values = dict(zip(order, arrays))
        for op, inputs, params, out in self.nodes:
            args = [values[t] for t in inputs]
            if op == "conv_fprop":
                result = _fprop(*args, *params)
            elif op == "conv_dgrad":
                result = _dgrad(*args, *params, out.dim)
            elif op == "conv_wgrad":
                result = _wgrad(*args, *params, out.dim)
            else:
                result = _POINTWISE[op](*args, *[p for p in params if p is not None])
            if out in values:
                values[out][...] = result
            else:
                values[out] = numpy.asarray(result, dtype=_DTYPES[self.kind])
