"""draw_net: draw a net prototxt as a graph image (Caffe's python/draw_net.py).

The format follows the output's extension: png, svg, pdf, dot (laid out) or raw (the DOT source).
Needs the ``[draw]`` extra (pydot, and graphviz-pure where Graphviz's dot is not installed).
"""
import click

from ..errors import CaffeError
from ..proto import caffe_pb2
from ..proto.io import read_text
from ..pycaffe import draw
from ._common import GflagsCommand

_PHASES = {"TRAIN": caffe_pb2.TRAIN, "TEST": caffe_pb2.TEST, "ALL": None}


@click.command("draw_net", cls=GflagsCommand, help="Draw a graph of the net architecture.")
@click.argument("input_net_proto_file")
@click.argument("output_image_file")
@click.option("--rankdir", default="LR", show_default=True,
              help="One of TB (top-bottom, i.e., vertical), RL (right-left, i.e., horizontal), "
                   "or another valid dot option; see "
                   "http://www.graphviz.org/doc/info/attrs.html#k:rankdir")
@click.option("--phase", default="ALL", show_default=True,
              help="Which network phase to draw: can be TRAIN, TEST, or ALL.  If ALL, then all "
                   "layers are drawn regardless of phase.")
@click.option("--display_lrm", is_flag=True,
              help="Use this flag to visualize the learning rate multiplier, when non-zero, for "
                   "the learning layers (Convolution, Deconvolution, InnerProduct).")
def draw_net(input_net_proto_file, output_image_file, rankdir, phase, display_lrm):
    if phase not in _PHASES:
        raise CaffeError("Unknown phase: %s (TRAIN, TEST or ALL)" % phase)
    net = read_text(input_net_proto_file, caffe_pb2.NetParameter(), "net prototxt")
    click.echo("Drawing net to %s" % output_image_file)
    draw.draw_net_to_file(net, output_image_file, rankdir, _PHASES[phase], display_lrm)
