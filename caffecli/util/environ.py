"""Environment reads for the hot paths, which ask a few times a layer (CAFFECLI_JIT,
OMP_NUM_THREADS) and follow changes made while the process runs (``os.environ[...] = ``).

``os.environ.get`` costs 1-1.6 us a call: the key is encoded each time and a missing one raises
KeyError inside. CPython's ``os.environ`` keeps its current values in a dict of encoded keys,
updated by every change made through it; reading that dict costs 0.08 us. Where it is not there
(another Python), ``os.environ.get`` is used.
"""
import os

_values = getattr(os.environ, "_data", None)
_encode = getattr(os.environ, "encodekey", None)
_decode = getattr(os.environ, "decodevalue", None)
_keys = {}


def _get(name, default=None):
    """os.environ.get(name, default), the same value at a fraction of its cost."""
    key = _keys.get(name)
    if key is None:
        key = _keys[name] = _encode(name)
    raw = _values.get(key)
    return default if raw is None else _decode(raw)


# decided once: CPython's mapping where it has one, else os.environ's own reader
get = _get if None not in (_values, _encode, _decode) else os.environ.get
