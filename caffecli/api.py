"""The pycaffe-compatible Python surface (filled in by the API module's owner)."""
from . import backend as _backend
from .rng import set_random_seed  # noqa: F401

set_mode_cpu = _backend.set_mode_cpu
set_mode_gpu = _backend.set_mode_gpu
set_device = _backend.set_device

__all__ = ["set_mode_cpu", "set_mode_gpu", "set_device", "set_random_seed"]
