"""``caffecli test``: score a trained model over N batches (caffe.cpp's test()).

Every element of every output blob is printed per batch and averaged; like Caffe, the sums are
kept in float32 and an output's mean is shown with its loss weight when it has one.
"""
import numpy

from .. import glog
from ..errors import CaffeError
from ..net import Net, TEST
from .devices import parse_gpus, use_single_device


def run_test(model, weights, iterations=50, gpu="", level=0, stages=("",), phase=TEST):
    """Score ``model`` with ``weights``; return (mean loss, {output name: [means]})."""
    if not model:
        raise CaffeError("Need a model definition to score (--model).")
    if not weights:
        raise CaffeError("Need model weights to score (--weights).")
    use_single_device(parse_gpus(gpu), "test")
    net = Net(model, phase, level=level, stages=list(stages))
    net.forward_only = True   # scored, never trained: its passes may be a CUDA graph
    net.copy_trained_layers_from(weights)
    glog.info("caffe.running_iterations", "Running for %d iterations." % iterations)
    f32 = numpy.float32
    scores, score_output = [], []
    loss = f32(0)
    for i in range(iterations):
        loss = f32(loss + f32(net.forward_pass()))
        idx = 0
        for j, (name, blob) in enumerate(zip(net.output_names, net.output_blobs)):
            values = numpy.asarray(blob.cpu_data(), dtype=f32).reshape(-1)
            for score in values:
                if i == 0:
                    scores.append(f32(score))
                    score_output.append(j)
                else:
                    scores[idx] = f32(scores[idx] + score)
                idx += 1
                glog.info("caffe.batch", "Batch %d, %s = %s" % (i, name, glog.fmt(score)))
    with numpy.errstate(divide="ignore", invalid="ignore"):
        loss = f32(loss / f32(iterations))
    glog.info("caffe.loss", "Loss: " + glog.fmt(loss))
    means = {}
    for score, j in zip(scores, score_output):
        name = net.output_names[j]
        weight = f32(net.blob_loss_weights[net.output_ids[j]])
        with numpy.errstate(divide="ignore", invalid="ignore"):
            mean = f32(score / f32(iterations))
        extra = ""
        if weight:
            extra = " (* %s = %s loss)" % (glog.fmt(weight), glog.fmt(f32(weight * mean)))
        glog.info("caffe.test_output", "%s = %s%s" % (name, glog.fmt(mean), extra))
        means.setdefault(name, []).append(float(mean))
    return float(loss), means
