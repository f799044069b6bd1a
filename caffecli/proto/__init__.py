"""Caffe's protobuf messages (caffe_pb2, generated from ../caffe.proto); their file I/O is in
proto.io, the upgrades of old formats in proto.upgrade*."""
from . import caffe_pb2  # noqa: F401
