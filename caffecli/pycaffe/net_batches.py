"""pycaffe's batched runs: ``forward_all`` and ``forward_backward_all`` feed arrays of any length
through the net in chunks of its batch size, as BVLC's pycaffe.py does.

The chunk size is the first blob's batch (pycaffe's rule); a last partial chunk is padded with
zeros and its padding dropped from what is returned. Two differences: forward_backward_all given
only input arrays (or only top diffs) runs, as pycaffe did on Python 2, where on Python 3 its
empty chunk generator raises "generator raised StopIteration"; and every returned value is an
array, where pycaffe leaves some as lists when there are more outputs than inputs.
"""
import itertools

import numpy


class BatchedRuns:
    """Mixed into the facade Net: needs ``blobs``, ``inputs``, ``outputs``, ``forward`` and
    ``backward`` with pycaffe's meanings."""

    def forward_all(self, blobs=None, **kwargs):
        """Forward every item of the input arrays; {blob name: array over all items} for the
        outputs and ``blobs``."""
        _require_arrays(kwargs, "forward_all")
        outs = {name: [] for name in set(self.outputs + list(blobs or []))}
        for batch in self._batch(kwargs):
            _collect(outs, self.forward(blobs=blobs, **batch))
        return _packed(outs, kwargs)

    def forward_backward_all(self, blobs=None, diffs=None, **kwargs):
        """Forward and backward every item: arrays named after inputs feed forward, arrays named
        after outputs are their top diffs. Returns ({blob: data}, {blob: diff}) over all items
        (outputs and ``blobs``; inputs and ``diffs``)."""
        _require_arrays(kwargs, "forward_backward_all")
        outs = {name: [] for name in set(self.outputs + list(blobs or []))}
        grads = {name: [] for name in set(self.inputs + list(diffs or []))}
        forward_batches = self._batch({k: kwargs[k] for k in self.inputs if k in kwargs})
        backward_batches = self._batch({k: kwargs[k] for k in self.outputs if k in kwargs})
        for fb, bb in itertools.zip_longest(forward_batches, backward_batches, fillvalue={}):
            _collect(outs, self.forward(blobs=blobs, **fb))
            _collect(grads, self.backward(diffs=diffs, **bb))
        return _packed(outs, kwargs), _packed(grads, kwargs)

    def _batch(self, arrays):
        """{name: chunk} dicts of the net's batch size; the last one zero-padded."""
        if not arrays:
            return
        arrays = {name: numpy.asarray(a) for name, a in arrays.items()}
        num = len(next(iter(arrays.values())))
        batch_size = next(iter(self.blobs.values())).shape[0]
        for start in range(0, num - num % batch_size, batch_size):
            yield {name: a[start:start + batch_size] for name, a in arrays.items()}
        remainder = num % batch_size
        if remainder:
            yield {name: numpy.concatenate([a[-remainder:], numpy.zeros(
                (batch_size - remainder,) + a.shape[1:], dtype=a.dtype)])
                for name, a in arrays.items()}


def _require_arrays(kwargs, what):
    if not kwargs:
        raise TypeError("%s needs arrays, as keyword arguments named after the net's input "
                        "(or output) blobs" % what)


def _collect(lists, results):
    for name, array in results.items():
        lists[name].extend(array.copy())


def _packed(lists, kwargs):
    """The collected rows as arrays, cut to the number of items given (the padding dropped)."""
    num = len(next(iter(kwargs.values())))
    return {name: numpy.asarray(rows)[:num] for name, rows in lists.items()}
