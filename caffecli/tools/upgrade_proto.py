"""upgrade_net_proto_text, upgrade_net_proto_binary, upgrade_solver_proto_text: Caffe's tools that
rewrite old-format nets (V0/V1 layers, input fields, old transformation and BatchNorm params)
and solvers (the solver_type enum) in the current format, with Caffe's log lines.

Text output is written as C++ Caffe writes it (floats as '1', not '1.0'). Unlike Caffe, a file
that does not parse is a one-line error with exit status 1 (Caffe exits 2).
"""
import click

from .. import glog
from ..proto import caffe_pb2
from ..proto.io import net_to_text, read_binary, read_text, write_binary, write_bytes_atomic
from ..proto.upgrade import net_needs_upgrade, upgrade_net_as_needed, upgrade_solver_as_needed
from ._common import GflagsCommand


def _upgrade(tool, message, needs_upgrade, upgrade, path):
    """Upgrade ``message`` read from ``path`` in place, logging as Caffe's ``tool`` does."""
    if needs_upgrade(message):
        upgrade(message, path)
    else:
        glog.error(tool + ".already_latest", "File already in latest proto format: " + path)
    return message


def upgrade_net_text(input_file, output_file):
    """Upgrade a net prototxt; returns the upgraded NetParameter."""
    net = read_text(input_file, caffe_pb2.NetParameter(), "net prototxt")
    _upgrade("upgrade_net_proto_text", net, net_needs_upgrade, upgrade_net_as_needed, input_file)
    write_bytes_atomic(output_file, net_to_text(net).encode("utf-8"))
    glog.info("upgrade_net_proto_text.wrote",
              "Wrote upgraded NetParameter text proto to " + output_file)
    return net


def upgrade_net_binary(input_file, output_file):
    """Upgrade a binary net (e.g. a .caffemodel); returns the upgraded NetParameter."""
    net = read_binary(input_file, caffe_pb2.NetParameter(), "binary NetParameter")
    _upgrade("upgrade_net_proto_binary", net, net_needs_upgrade, upgrade_net_as_needed,
             input_file)
    write_binary(output_file, net)
    glog.info("upgrade_net_proto_binary.wrote",
              "Wrote upgraded NetParameter binary proto to " + output_file)
    return net


def upgrade_solver_text(input_file, output_file):
    """Upgrade a solver prototxt; returns the upgraded SolverParameter."""
    solver = read_text(input_file, caffe_pb2.SolverParameter(), "solver prototxt")
    _upgrade("upgrade_solver_proto_text", solver, lambda s: s.HasField("solver_type"),
             upgrade_solver_as_needed, input_file)
    write_bytes_atomic(output_file, net_to_text(solver).encode("utf-8"))
    glog.info("upgrade_solver_proto_text.wrote",
              "Wrote upgraded SolverParameter text proto to " + output_file)
    return solver


def _command(name, usage, run):
    @click.command(name, cls=GflagsCommand, help="Usage: %s %s" % (name, usage))
    @click.argument("input_file")
    @click.argument("output_file")
    def command(input_file, output_file):
        run(input_file, output_file)
    return command


upgrade_net_proto_text = _command("upgrade_net_proto_text",
                                  "v0_net_proto_file_in net_proto_file_out", upgrade_net_text)
upgrade_net_proto_binary = _command("upgrade_net_proto_binary",
                                    "v0_net_proto_file_in net_proto_file_out",
                                    upgrade_net_binary)
upgrade_solver_proto_text = _command("upgrade_solver_proto_text",
                                     "old_solver_proto_file_in solver_proto_file_out",
                                     upgrade_solver_text)
