"""``caffecli time``: benchmark forward and backward, layer by layer (caffe.cpp's time()).

Like Caffe, the net is run as built (inputs hold whatever the fillers or zeros left there), every
layer's backward is called in the timed loop, and times are wall clock at the resolution of
Caffe's timer (GPU work is synchronized before each reading).
"""
import time as _clock

import numpy

from .. import context, glog
from ..errors import CaffeError
from ..net import Net, TRAIN
from .devices import parse_gpus, synchronize, use_single_device


def _us(seconds):
    """Seconds to whole microseconds, as Caffe's CPU timer counts them (MicroSeconds)."""
    return float(int(seconds * 1e6))


def _ms(seconds):
    """Seconds as Caffe's Timer::MilliSeconds gives them: whole milliseconds on the CPU
    (boost's total_milliseconds), fractions from the GPU's events."""
    return seconds * 1e3 if context.is_gpu() else float(int(seconds * 1e3))


def run_time(model, iterations=50, gpu="", phase=TRAIN, level=0, stages=("",)):
    """Time ``model``; return {"forward": ms, "backward": ms, "forward_backward": ms} averages."""
    if not model:
        raise CaffeError("Need a model definition to time (--model).")
    use_single_device(parse_gpus(gpu), "time")
    net = Net(model, phase, level=level, stages=list(stages))
    glog.info("caffe.performing_forward", "Performing Forward")
    initial_loss = net.forward_pass()
    glog.info("caffe.initial_loss", "Initial loss: " + glog.fmt(numpy.float32(initial_loss)))
    glog.info("caffe.performing_backward", "Performing Backward")
    net.backward_pass()
    records = net.records
    glog.info("caffe.benchmark_begins", "*** Benchmark begins ***")
    glog.info("caffe.testing_for_iterations", "Testing for %d iterations." % iterations)
    synchronize()
    clock = _clock.perf_counter
    total_start = clock()
    forward_us = [0.0] * len(records)
    backward_us = [0.0] * len(records)
    forward_time = backward_time = 0.0
    for j in range(iterations):
        iter_start = fwd_start = clock()
        for i, rec in enumerate(records):
            t = clock()
            rec.layer.Forward(rec.bottoms, rec.tops)
            synchronize()
            forward_us[i] += _us(clock() - t)
        forward_time += _us(clock() - fwd_start)
        bwd_start = clock()
        for i in range(len(records) - 1, -1, -1):
            t = clock()
            rec = records[i]
            rec.layer.Backward(rec.tops, rec.bottom_need_backward, rec.bottoms)
            synchronize()
            backward_us[i] += _us(clock() - t)
        backward_time += _us(clock() - bwd_start)
        glog.info("caffe.iteration_time", "Iteration: %d forward-backward time: %s ms."
                  % (j + 1, glog.fmt(_ms(clock() - iter_start))))
    glog.info("caffe.average_time_per_layer", "Average time per layer: ")
    n = iterations or float("nan")  # Caffe divides by zero too
    for i, rec in enumerate(records):
        name = rec.name
        glog.info("caffe.layer_forward_ms", "%10s\tforward: %s ms."
                  % (name, glog.fmt(forward_us[i] / 1000 / n)))
        glog.info("caffe.layer_backward_ms", "%10s\tbackward: %s ms."
                  % (name, glog.fmt(backward_us[i] / 1000 / n)))
    total_ms = _ms(clock() - total_start)
    result = {"forward": forward_time / 1000 / n, "backward": backward_time / 1000 / n,
              "forward_backward": total_ms / n}
    glog.info("caffe.average_forward", "Average Forward pass: %s ms." % glog.fmt(result["forward"]))
    glog.info("caffe.average_backward",
              "Average Backward pass: %s ms." % glog.fmt(result["backward"]))
    glog.info("caffe.average_forward_backward", "Average Forward-Backward: %s ms."
              % glog.fmt(result["forward_backward"]))
    glog.info("caffe.total_time_ms", "Total Time: %s ms." % glog.fmt(total_ms))
    glog.info("caffe.benchmark_ends", "*** Benchmark ends ***")
    return result
