"""caffe_pb2.py is generated from caffe.proto and must not drift from it."""
import os
import subprocess
import sys
import tempfile

import pytest
from google.protobuf import descriptor_pb2

from caffecli.proto import caffe_pb2

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def compile_proto():
    """caffe.proto as a FileDescriptorProto, compiled by grpc_tools' bundled protoc."""
    pytest.importorskip("grpc_tools", reason="grpcio-tools (a test dependency) is missing")
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "caffe.desc")
        subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-I" + ROOT,
                        "--descriptor_set_out=" + out, os.path.join(ROOT, "caffe.proto")],
                       check=True)
        fds = descriptor_pb2.FileDescriptorSet()
        with open(out, "rb") as f:
            fds.ParseFromString(f.read())
    return _strip_json_names(fds.file[0])


def _strip_json_names(fdp):
    """Drop what protoc versions print differently: json_name, and the spelling of float
    defaults ("1e-08" vs "9.99999994e-09" for the same float32)."""
    import numpy

    def strip(msg):
        for f in msg.field:
            f.ClearField("json_name")
            if f.type in (f.TYPE_FLOAT, f.TYPE_DOUBLE) and f.HasField("default_value") \
                    and f.default_value not in ("inf", "-inf", "nan"):
                dt = numpy.float32 if f.type == f.TYPE_FLOAT else numpy.float64
                f.default_value = repr(float(dt(f.default_value)))
        for m in msg.nested_type:
            strip(m)
    for m in fdp.message_type:
        strip(m)
    return fdp


def test_bindings_match_caffe_proto():
    fresh = compile_proto()
    bound = descriptor_pb2.FileDescriptorProto()
    caffe_pb2.DESCRIPTOR.CopyToProto(bound)
    _strip_json_names(bound)
    assert fresh.name == bound.name
    fresh_msgs = {m.name: m for m in fresh.message_type}
    bound_msgs = {m.name: m for m in bound.message_type}
    assert sorted(fresh_msgs) == sorted(bound_msgs), "regenerate with `make proto`"
    for name, m in fresh_msgs.items():
        assert m == bound_msgs[name], "message %s drifted: regenerate with `make proto`" % name
    assert list(fresh.enum_type) == list(bound.enum_type)


def test_bvlc_field_numbers():
    """A few numbers real files depend on (BVLC caffe.proto)."""
    f = caffe_pb2.LayerParameter.DESCRIPTOR.fields_by_name
    assert f["convolution_param"].number == 106
    assert f["blobs"].number == 7
    assert f["python_param"].number == 130
    assert caffe_pb2.NetParameter.DESCRIPTOR.fields_by_name["layers"].number == 2
    assert caffe_pb2.SolverParameter.DESCRIPTOR.fields_by_name["type"].number == 40
    assert caffe_pb2.BlobProto.DESCRIPTOR.fields_by_name["double_data"].number == 8
    assert len(caffe_pb2.DESCRIPTOR.message_types_by_name) == 63


def test_defaults():
    p = caffe_pb2.SolverParameter()
    assert p.lr_policy == "" and p.momentum == 0 and p.snapshot_format == p.BINARYPROTO
    assert caffe_pb2.PoolingParameter().pool == caffe_pb2.PoolingParameter.MAX
    assert caffe_pb2.LRNParameter().local_size == 5
    assert caffe_pb2.ConvolutionParameter().bias_term is True
