"""Fused chains, run on the host as one compiled pass each way instead of one per layer: a
BatchNorm with global statistics (or with the batch's, on channels of BATCH_MIN_CHANNEL_VALUES
values or more: two loops over each channel's rows each way), the Scale after it and an optional
ReLU, all computing in place on one blob (ResNet's conv -> bn -> scale -> relu;
kernels/channel_jit.py), an Eltwise SUM of two blobs with the ReLU in place on its top
(ResNet's shortcut sum; kernels/relu_jit.py), and a Convolution with the ReLU in place on its
top (forward only).

Each layer still runs its driver's steps (side, views, reshape) and keeps the state its own pass
would leave (BatchNorm's std, Scale's copy of its input), so fused and layer-by-layer passes
mix freely; the values are the layers' own bit for bit (the Scale's sums in Caffe's order
either way). The net runs a chain only where the whole chain is in its range, with no
debug_info and no callbacks (which see each layer), on the host with compiled kernels; anything
else runs the layers one by one.
"""
import numpy

from . import context
from .kernels import channel_jit, jit, relu_jit
from .kernels.threads import for_parts
from .proto import caffe_pb2


# Values a channel (items x spatial) from which a chain on the batch's statistics runs fused.
# ResNet-50's chains in the pass, fused over the layers, forward / backward (2-core EPYC Zen 5):
# at batch 8, 25088 and 6272 values a channel 0.51-0.66x / 0.58-0.82x, 1568 0.62-0.90x /
# 0.77-0.87x; at batch 2, 6272 0.65-0.70x / 0.98-1.07x, 1568 0.79-1.10x / 0.81-0.91x; but 392
# values 0.82-1.41x / 0.84-1.07x and 98 0.99-1.43x / 0.97-1.25x (1.4x on 2048 channels of 7x7).
BATCH_MIN_CHANNEL_VALUES = 1024
# Values a thread's part of a chain's forward at least (about 0.2 ns a value on global
# statistics, 0.5 on the batch's); its backward takes the Scale's sums (channel_jit.SUMS_MIN_PART).
# With the elementwise passes' 1M every chain under 2M values ran on one thread: in the pass
# (2-core EPYC, alternating), MobileNet's at batch 4 backward 20.9 -> 13.1 ms, forward 6.0 -> 5.6
# ms, ResNet-50's at batch 1 backward 7.9 -> 6.6 ms, forward level; on the batch's statistics at
# batch 4 backward 55.2 -> 43.0 ms, forward 36.6 -> 33.9 ms.
CHAIN_FORWARD_MIN_PART = 1 << 17


def _slope(relu, dtype):
    return dtype.type(relu.layer_param.relu_param.negative_slope)


def _run_forward(records, prepared):
    """The records' forward computations, one by one, on their prepared views."""
    for rec, views in zip(records, prepared):
        rec.layer.run_forward(*views)


def _run_backward(records, prepared):
    """The records' backward computations, last first, on their prepared views."""
    for rec, views in zip(reversed(records), prepared):
        rec.layer.run_backward(*views, rec.bottom_need_backward)


class NormChain:
    """BatchNorm -> Scale (-> ReLU) records of one in-place blob, run as one kernel each way."""

    def __init__(self, records):
        self.records = records
        self.norm, self.scale = records[0].layer, records[1].layer
        self.relu = records[2].layer if len(records) > 2 else None

    def __len__(self):
        return len(self.records)

    def _slope(self, dtype):
        return None if self.relu is None else _slope(self.relu, dtype)

    def forward(self):
        """Run the chain's forward; False (nothing done) on the device."""
        if context.is_gpu():
            return False
        prepared = [rec.layer.prepare_forward(rec.bottoms, rec.tops) for rec in self.records]
        norm, scale = self.norm, self.scale
        y = norm._view(prepared[0][2][0].data, self.records[0].bottoms)
        mean, std = norm.global_moments(y.dtype) if norm.use_global_stats else (None, None)
        s = scale.weights[0].data.reshape(-1)
        bias = scale.weights[scale.bias_param_id].data.reshape(-1) \
            if scale.bias_layer is not None else None
        if not norm.use_global_stats:
            if self._batch_fuses(y) and jit.usable(y, s, *([] if bias is None else [bias])):
                self._forward_batch(y, s, bias, prepared[0][1])
            else:
                _run_forward(self.records, prepared)
            return True
        if not (mean is not None and scale.dims == y.shape
                and jit.usable(y, mean, std, s, *([] if bias is None else [bias]))):
            _run_forward(self.records, prepared)
            return True
        norm.std, norm.x_norm = std.reshape(1, -1, 1), y
        keep = scale.bottom_copy = scale.scratch("bottom_copy", y.shape, y.dtype)
        slope = self._slope(y.dtype)
        for_parts(numpy, lambda c0, c1: channel_jit.chain_forward(
            y, mean, std, s, bias, slope, c0, c1, keep), y.shape[1], y.size,
            CHAIN_FORWARD_MIN_PART)
        return True

    def _batch_fuses(self, y):
        """Whether a chain on the batch's statistics runs fused on y (items, channels, inner):
        BATCH_MIN_CHANNEL_VALUES values a channel or more, the Scale's axes BatchNorm's."""
        return (y.shape[0] * y.shape[2] >= BATCH_MIN_CHANNEL_VALUES and y.size
                and self.scale.dims == y.shape)

    def _forward_batch(self, y, s, bias, bottoms):
        """The forward where the BatchNorm normalizes by the batch's statistics: one kernel a
        channel (chain_forward_batch), then the running sums; BatchNorm's normalized output is
        the Scale's kept input (the same values)."""
        norm, scale = self.norm, self.scale
        x_norm = norm.x_norm = norm.scratch("x_norm", y.shape, y.dtype)
        mean, var, std = (numpy.empty(y.shape[1], y.dtype) for _ in range(3))
        slope = self._slope(y.dtype)
        for_parts(numpy, lambda c0, c1: channel_jit.chain_forward_batch(
            y, x_norm, norm.eps, s, bias, slope, c0, c1, mean, var, std), y.shape[1], 2 * y.size,
            CHAIN_FORWARD_MIN_PART)
        norm.update_running(mean, var, bottoms)
        norm.std = std.reshape(1, -1, 1)
        scale.bottom_copy = x_norm

    def backward(self):
        """Run the chain's backward (every gradient: each record needs it); False (nothing
        done) on the device or where one of them does not."""
        if context.is_gpu() or not all(rec.need_backward and rec.bottom_need_backward == [True]
                                       for rec in self.records):
            return False
        prepared = [rec.layer.prepare_backward(rec.tops, rec.bottoms)
                    for rec in reversed(self.records)]
        norm, scale = self.norm, self.scale
        d = norm._view(prepared[-1][2][0].diff, self.records[0].bottoms)
        y = norm._view(prepared[-1][2][0].data, self.records[0].bottoms)
        keep, std = getattr(scale, "bottom_copy", None), norm.std.reshape(-1)
        s = scale.weights[0].data.reshape(-1)
        if not (all(scale.param_propagate_down) and keep is not None and keep.shape == d.shape
                and (norm.use_global_stats or self._batch_fuses(d))
                and jit.usable(d, y, keep, s, std)):
            _run_backward(self.records, prepared)
            return True
        slope = self._slope(d.dtype)
        bias_diff = (None if scale.bias_layer is None
                     else scale.weights[scale.bias_param_id].diff.reshape(-1))
        scale_diff = scale.weights[0].diff.reshape(-1)

        backward = (channel_jit.chain_backward if norm.use_global_stats
                    else channel_jit.chain_backward_batch)

        def part(c0, c1):
            backward(d, y, keep, s, std, slope, c0, c1, bias_diff, scale_diff)
        for_parts(numpy, part, d.shape[1], d.size, channel_jit.SUMS_MIN_PART)
        return True


class _PairChain:
    """Two records run as one: their forward steps before the computation, on the host."""

    def __init__(self, records):
        self.records = records

    def __len__(self):
        return 2

    def _prepare_forward(self):
        """Each record's prepare_forward (side, views, reshape, engine); None on the device,
        where the layers run one by one."""
        if context.is_gpu():
            return None
        return [rec.layer.prepare_forward(rec.bottoms, rec.tops) for rec in self.records]


class SumChain(_PairChain):
    """Eltwise SUM (two bottoms, coefficients 1) -> ReLU in place on its top, as one pass each
    way: Eltwise keeps no state, and the ReLU's is its top, so the values are the layers' own
    bit for bit (the top's diff too)."""

    def forward(self):
        """Run the chain's forward; False (nothing done) on the device."""
        prepared = self._prepare_forward()
        if prepared is None:
            return False
        (_, bottoms, tops, _) = prepared[0]
        a, b, y = bottoms[0].data, bottoms[1].data, tops[0].data
        if not (a.shape == b.shape == y.shape and jit.usable(a, b, y)):
            _run_forward(self.records, prepared)
            return True
        a, b, y = a.reshape(-1), b.reshape(-1), y.reshape(-1)
        slope = _slope(self.records[1].layer, y.dtype)
        for_parts(numpy, lambda i0, i1: relu_jit.sum_forward(a[i0:i1], b[i0:i1], slope,
                                                             y[i0:i1]),
                  y.size, y.size, jit.PASS_MIN_PART)
        return True

    def backward(self):
        """Run the chain's backward where both layers send every gradient down; False (nothing
        done) on the device or where one does not."""
        eltwise, relu = self.records
        if context.is_gpu() or not (eltwise.need_backward and relu.need_backward
                                    and eltwise.bottom_need_backward == [True, True]
                                    and relu.bottom_need_backward == [True]):
            return False
        prepared = [rec.layer.prepare_backward(rec.tops, rec.bottoms)
                    for rec in reversed(self.records)]
        top, bottoms = prepared[0][1][0], prepared[1][2]
        y, d, da, db = top.data, top.diff, bottoms[0].diff, bottoms[1].diff
        if not (y.shape == d.shape == da.shape == db.shape and jit.usable(y, d, da, db)):
            _run_backward(self.records, prepared)
            return True
        y, d, da, db = y.reshape(-1), d.reshape(-1), da.reshape(-1), db.reshape(-1)
        slope = _slope(relu.layer, y.dtype)
        for_parts(numpy, lambda i0, i1: relu_jit.split_backward(
            y[i0:i1], slope, d[i0:i1], da[i0:i1], db[i0:i1]), y.size, y.size, jit.PASS_MIN_PART)
        return True


class ConvReLUChain(_PairChain):
    """Convolution -> ReLU in place on its top, forward only: the convolution's last pass over
    its top (the bias add, or a chunk's move into place) rectifies as it writes, the same
    expression as the ReLU's, so the same bits, one pass fewer. Backward runs layer by layer."""

    def forward(self):
        """Run the chain's forward; False (nothing done) on the device."""
        prepared = self._prepare_forward()
        if prepared is None:
            return False
        conv, relu = self.records[0].layer, self.records[1].layer
        (_, bottoms, tops, engine) = prepared[0]
        y = tops[0].data
        if engine is not None or prepared[1][3] is not None or not jit.usable(
                bottoms[0].data, y):
            _run_forward(self.records, prepared)
            return True
        conv.relu_after = _slope(relu, y.dtype)
        try:
            conv.run_forward(*prepared[0])
        finally:
            conv.relu_after = None
        return True

    def backward(self):
        return False


def _in_place_on(rec, blob, kind):
    """Whether ``rec`` is a layer of type ``kind`` computing in place on ``blob`` alone, with
    no loss weight on it."""
    return (rec.layer.type == kind and len(rec.bottoms) == 1 and len(rec.tops) == 1
            and rec.bottoms[0] is blob and rec.tops[0] is blob and not rec.layer.loss(0))


def _sums_two(rec):
    """Whether ``rec`` is an unweighted Eltwise SUM of two distinct blobs with coefficients 1
    into a third."""
    layer = rec.layer
    return (layer.type == "Eltwise" and layer.op == caffe_pb2.EltwiseParameter.SUM
            and len(rec.bottoms) == 2 and rec.bottoms[0] is not rec.bottoms[1]
            and len(rec.tops) == 1
            and all(rec.tops[0] is not b for b in rec.bottoms) and layer.coeffs == [1.0, 1.0]
            and not layer.loss(0))


def find_chains(records):
    """{index of a chain's first record: NormChain, SumChain or ConvReLUChain} for ``records``
    (a net's, in order)."""
    chains, i = {}, 0
    while i + 1 < len(records):
        rec = records[i]
        blob = rec.tops[0] if rec.tops else None
        if (_in_place_on(rec, blob, "BatchNorm")
                and _in_place_on(records[i + 1], blob, "Scale")):
            n = 3 if i + 2 < len(records) and _in_place_on(records[i + 2], blob, "ReLU") else 2
            chains[i] = NormChain(records[i:i + n])
            i += n
        elif _sums_two(rec) and _in_place_on(records[i + 1], blob, "ReLU"):
            chains[i] = SumChain(records[i:i + 2])
            i += 2
        elif (rec.layer.type == "Convolution" and len(rec.bottoms) == 1 and len(rec.tops) == 1
              and rec.bottoms[0] is not blob and not rec.layer.loss(0)
              and _in_place_on(records[i + 1], blob, "ReLU")):
            chains[i] = ConvReLUChain(records[i:i + 2])
            i += 2
        else:
            i += 1
    return chains
