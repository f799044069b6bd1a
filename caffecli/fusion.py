"""Fused in-place chains: a BatchNorm with global statistics, the Scale after it and an optional
ReLU, all computing in place on one blob (ResNet's conv -> bn -> scale -> relu), run on the host
as one compiled pass each way instead of three (kernels/channel_jit.py).

Each layer still runs its driver's steps (side, views, reshape) and keeps the state its own pass
would leave (BatchNorm's std, Scale's copy of its input), so fused and layer-by-layer passes
mix freely; the values are the layers' own bit for bit, except the Scale's float64 channel sums,
taken in another order. The net runs a chain only where the whole chain is in its range, with no
debug_info and no callbacks (which see each layer), on the host with compiled kernels; anything
else runs the layers one by one.
"""
import numpy

from . import context
from .kernels import channel_jit, jit
from .kernels.threads import for_parts


class NormChain:
    """BatchNorm -> Scale (-> ReLU) records of one in-place blob, run as one pass each way."""

    def __init__(self, records):
        self.records = records
        self.norm, self.scale = records[0].layer, records[1].layer
        self.relu = records[2].layer if len(records) > 2 else None

    def __len__(self):
        return len(self.records)

    def _slope(self, dtype):
        if self.relu is None:
            return None
        return dtype.type(self.relu.layer_param.relu_param.negative_slope)

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
        if not (mean is not None and scale.dims == y.shape
                and jit.usable(y, mean, std, s, *([] if bias is None else [bias]))):
            for layer, views in zip((r.layer for r in self.records), prepared):
                layer.run_forward(*views)
            return True
        norm.std, norm.x_norm = std.reshape(1, -1, 1), y
        keep = scale.bottom_copy = scale.scratch("bottom_copy", y.shape, y.dtype)
        slope = self._slope(y.dtype)
        for_parts(numpy, lambda c0, c1: channel_jit.chain_forward(
            y, mean, std, s, bias, slope, c0, c1, keep), y.shape[1], y.size, jit.PASS_MIN_PART)
        return True

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
        if not (norm.use_global_stats and all(scale.param_propagate_down)
                and keep is not None and keep.shape == d.shape and jit.usable(d, y, keep, s, std)):
            for layer, views in zip((r.layer for r in reversed(self.records)), prepared):
                layer.run_backward(*views, [True])
            return True
        sums = scale.scratch("sums", (2, d.shape[1]), numpy.float64)
        slope = self._slope(d.dtype)
        for_parts(numpy, lambda c0, c1: channel_jit.chain_backward(
            d, y, keep, s, std, slope, c0, c1, sums), d.shape[1], d.size, jit.PASS_MIN_PART)
        if scale.bias_layer is not None:
            scale.weights[scale.bias_param_id].diff.reshape(-1)[...] += sums[0]
        scale._store_scale_sums(scale.weights[0], sums[1], learned=True)
        return True


def _in_place_on(rec, blob, kind):
    """Whether ``rec`` is a layer of type ``kind`` computing in place on ``blob`` alone, with
    no loss weight on it."""
    return (rec.layer.type == kind and len(rec.bottoms) == 1 and len(rec.tops) == 1
            and rec.bottoms[0] is blob and rec.tops[0] is blob and not rec.layer.loss(0))


def find_chains(records):
    """{index of a chain's first record: NormChain} for ``records`` (a net's, in order)."""
    chains, i = {}, 0
    while i + 1 < len(records):
        rec = records[i]
        blob = rec.tops[0] if rec.tops else None
        if (_in_place_on(rec, blob, "BatchNorm") and rec.layer.use_global_stats
                and _in_place_on(records[i + 1], blob, "Scale")):
            n = 3 if i + 2 < len(records) and _in_place_on(records[i + 2], blob, "ReLU") else 2
            chains[i] = NormChain(records[i:i + n])
            i += n
        else:
            i += 1
    return chains
