"""The process-wide random generator (Caffe's Caffe::rng_stream), seedable and snapshottable.

Fillers, Dropout masks, shuffles and random crops all draw from here, so ``random_seed`` in
the solver reproduces a run and the state can be saved beside a snapshot for exact resume.
"""
import numpy

_state = {"rng": numpy.random.default_rng()}


def set_random_seed(seed):
    _state["rng"] = numpy.random.default_rng(int(seed) & 0xFFFFFFFFFFFFFFFF)


def rng():
    """The shared numpy Generator."""
    return _state["rng"]


def get_state():
    return _state["rng"].bit_generator.state


def set_state(state):
    _state["rng"].bit_generator.state = state
