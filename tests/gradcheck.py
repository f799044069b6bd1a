"""Numerical gradient check for one layer (Caffe's GradientChecker rule), shared by all tests.

|computed - estimated| <= threshold * max(|computed|, |estimated|, 1), central differences
with ``stepsize``; the objective is sum(top_data * random weights) over all tops.
"""
import numpy

from caffecli.blob import Blob
from caffecli.proto import caffe_pb2
from caffecli.proto.io import parse_text
from caffecli.registry import create_layer


def make_layer(prototxt, phase=caffe_pb2.TRAIN):
    """A layer from its LayerParameter text (``type: "ReLU" ...``)."""
    p = parse_text(prototxt, caffe_pb2.LayerParameter())
    if not p.name:
        p.name = "under_test"
    p.phase = phase
    return create_layer(p)


def blobs_from(arrays, dtype):
    out = []
    for a in arrays:
        b = Blob(numpy.shape(a), dtype=dtype)
        b.data[...] = numpy.asarray(a, dtype=dtype)
        out.append(b)
    return out


def check_gradient(layer_or_text, bottoms, n_tops=1, stepsize=1e-2, threshold=1e-3,
                   dtype=numpy.float64, check_bottoms=None, check_params=True, kink=None,
                   kink_range=-1.0, seed=1701, phase=caffe_pb2.TRAIN):
    """Compare backward() with finite differences for every bottom (and parameter) element.

    ``bottoms``: list of arrays. ``check_bottoms``: indices to check (default all).
    ``kink``/``kink_range``: skip elements whose input lies within kink_range of kink.
    Returns the number of elements checked (the caller can assert it is > 0).
    """
    layer = make_layer(layer_or_text, phase) if isinstance(layer_or_text, str) else layer_or_text
    bottom = blobs_from(bottoms, dtype)
    top = [Blob(dtype=dtype) for _ in range(n_tops)]
    layer.SetUp(bottom, top)
    for b in layer.blobs:  # parameters in the check's dtype
        if b.dtype != numpy.dtype(dtype):
            nb = Blob(b.shape, dtype=dtype)
            nb.data[...] = b.data.astype(dtype)
            b.__dict__.update(nb.__dict__)
    r = numpy.random.RandomState(seed)

    def objective():
        layer.Forward(bottom, top)
        return sum(float((t.data * w).sum()) for t, w in zip(top, weights))

    layer.Forward(bottom, top)
    weights = [r.uniform(-1, 1, size=t.shape) if t.count() else numpy.zeros(t.shape) for t in top]
    if check_bottoms is None:
        check_bottoms = list(range(len(bottom)))
    targets = [(bottom[i], "bottom %d" % i) for i in check_bottoms]
    if check_params:
        targets += [(b, "param %d" % j) for j, b in enumerate(layer.blobs)]
    # analytic gradients
    for t, w in zip(top, weights):
        t.diff[...] = w
    for b in bottom:
        b.diff[...] = 0
    for b in layer.blobs:
        b.diff[...] = 0
    layer.Backward(top, [i in check_bottoms for i in range(len(bottom))], bottom)
    computed = [b.diff.copy() for b, _ in targets]
    checked = 0
    for (blob, what), comp in zip(targets, computed):
        for k in range(blob.count()):
            x0 = float(blob.data.reshape(-1)[k])
            if kink is not None and abs(x0 - kink) <= kink_range:
                continue
            # each write goes through blob.data, so the device sees it (mutable_cpu_data)
            blob.data.reshape(-1)[k] = x0 + stepsize
            pos = objective()
            blob.data.reshape(-1)[k] = x0 - stepsize
            neg = objective()
            blob.data.reshape(-1)[k] = x0
            est = (pos - neg) / (2.0 * stepsize)
            c = float(comp.reshape(-1)[k])
            scale = max(abs(c), abs(est), 1.0)
            assert abs(c - est) <= threshold * scale, (
                "%s element %d: computed %.6g, estimated %.6g" % (what, k, c, est))
            checked += 1
    return checked
