"""Caffe's protobuf messages (caffe_pb2, generated from ../caffe.proto) and their file I/O."""
from . import caffe_pb2  # noqa: F401
from .io import (read_text, read_binary, read_net_param, read_solver_param,  # noqa: F401
                 read_blob_proto, write_binary, write_text, net_to_text)
