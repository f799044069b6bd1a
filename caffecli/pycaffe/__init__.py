"""The pycaffe facade: what ``import caffe`` (and ``import caffecli as caffe``) gives."""
