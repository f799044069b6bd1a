"""The random generator of each solver (Caffe's per-thread Caffe::rng_stream), seedable and
snapshottable.

Fillers, Dropout masks, shuffles and random crops all draw from here, so ``random_seed`` in
the solver reproduces a run and the state can be saved beside a snapshot for exact resume. Each
data-parallel rank (see parallel.py) has its own generator, as each Caffe solver thread has;
threads outside any rank (prefetchers, user code) share rank 0's.
"""
import numpy

from . import parallel

_generators = {0: numpy.random.default_rng()}


def set_random_seed(seed):
    _generators[parallel.solver_rank()] = numpy.random.default_rng(
        int(seed) & 0xFFFFFFFFFFFFFFFF)


def rng():
    """This rank's numpy Generator (a fresh unseeded one the first time a rank asks)."""
    rank = parallel.solver_rank()
    gen = _generators.get(rank)
    if gen is None:
        gen = _generators[rank] = numpy.random.default_rng()
    return gen


def get_state():
    return rng().bit_generator.state


def set_state(state):
    rng().bit_generator.state = state
