"""Caffe's hdf5.cpp "Datatype class" lines: each class (float, integer) is said once per
process, the first time a dataset of that class is read (its LOG_FIRST_N)."""
from .. import glog

_said = set()


def note_dataset_class(kind):
    """Say the class of a dataset of numpy dtype kind ``kind`` ("f", "i", "u"), once each."""
    name = "H5T_FLOAT" if kind == "f" else "H5T_INTEGER"
    if name not in _said:
        _said.add(name)
        glog.info("hdf5.float" if kind == "f" else "hdf5.integer", "Datatype class: " + name)


def forget():
    """Say each class again (a test's fresh process)."""
    _said.clear()
