"""Modules imported on first use: h5py and tqdm cost ~0.1-0.2 s each, which every CLI start
and ``caffecli --help`` would pay for nets and runs that never touch them."""
import importlib


class LazyModule:
    """Stands for module ``name`` and imports it when an attribute is first read."""

    def __init__(self, name):
        self._name = name
        self._module = None

    def __getattr__(self, attr):
        if self._module is None:
            self._module = importlib.import_module(self._name)
        return getattr(self._module, attr)

    def __repr__(self):
        return "<lazy module %r>" % self._name


h5py = LazyModule("h5py")
tqdm = LazyModule("tqdm")
