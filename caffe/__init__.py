"""``import caffe``: caffecli's pycaffe facade under pycaffe's own name.

Everything caffecli.pycaffe exports (Net, the solvers, Layer, set_mode_*, ...), plus pycaffe's
modules: caffe.io, caffe.proto.caffe_pb2, caffe.net_spec (caffe.layers, caffe.params, NetSpec,
to_proto), caffe.draw, caffe.coord_map, caffe.classifier (Classifier), caffe.detector (Detector),
and caffe.pycaffe (the facade itself, as BVLC's pycaffe.py holds Net and the solvers).
The submodules are caffecli's own module objects, registered under ``caffe.*`` so that
``import caffe.draw`` and ``from caffe.proto import caffe_pb2`` work. A real pycaffe that comes
earlier on sys.path (PYTHONPATH) is imported instead of this package.
"""
import sys as _sys

from caffecli import __version__  # noqa: F401
from caffecli import proto, pycaffe
from caffecli.pycaffe import *  # noqa: F401,F403
from caffecli.pycaffe import classifier, coord_map, detector, draw, io, net_spec
from caffecli.pycaffe.classifier import Classifier  # noqa: F401
from caffecli.pycaffe.detector import Detector  # noqa: F401
from caffecli.pycaffe.net_spec import layers, params, NetSpec, to_proto  # noqa: F401
from caffecli.proto import caffe_pb2 as _caffe_pb2

for _name, _module in {"proto": proto, "proto.caffe_pb2": _caffe_pb2, "pycaffe": pycaffe,
                       "io": io, "net_spec": net_spec, "draw": draw, "coord_map": coord_map,
                       "classifier": classifier, "detector": detector}.items():
    _sys.modules.setdefault(__name__ + "." + _name, _module)
