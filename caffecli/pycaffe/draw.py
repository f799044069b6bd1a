"""caffe.draw: a NetParameter as a graphviz graph (pycaffe's draw.py: same nodes, labels, colours).

Layers are records labelled with name, type and kernel/stride/pad (and learning-rate multipliers
with ``display_lrm``), coloured by type; in-place layers are green; blobs are grey octagons
(a top nothing reads stays a plain ellipse, as in pycaffe). Edges out of Data, Convolution and
InnerProduct layers carry the batch size or num_output. The graph is built with pydot (the
``[draw]`` extra) and laid out by Graphviz's ``dot`` when it is on PATH, else by graphviz-pure
(the pip-installed build the extra brings; it writes no PDF, so a PDF is then its PNG wrapped
by Pillow). The extension ``.raw`` writes the DOT source without laying it out.
"""
import io
import os
import shutil
import subprocess
import sysconfig

from PIL import Image

from ..errors import CaffeError
from ..proto import caffe_pb2
from ..util.optional import MissingExtra, require

LAYER_STYLE_DEFAULT = {"shape": "record", "fillcolor": "#6495ED", "style": "filled"}
NEURON_LAYER_STYLE = {"shape": "record", "fillcolor": "#90EE90", "style": "filled"}
BLOB_STYLE = {"shape": "octagon", "fillcolor": "#E0E0E0", "style": "filled"}
_TYPE_COLORS = {"Convolution": "#FF5050", "Deconvolution": "#FF5050", "Pooling": "#FF9900",
                "InnerProduct": "#CC33FF"}
_LEARNING_TYPES = ("Convolution", "Deconvolution", "InnerProduct")
_PROGRAMS = ("dot", "graphviz-pure")


def get_pooling_types_dict():
    """Pooling method number -> name (0 -> 'MAX', ...)."""
    values = caffe_pb2.PoolingParameter.PoolMethod.DESCRIPTOR.values_by_name
    return {v.number: name for name, v in values.items()}


def get_edge_label(layer):
    """The label of the edges out of ``layer``: 'Batch N' for Data, num_output for
    Convolution/Deconvolution/InnerProduct, an empty label otherwise."""
    if layer.type == "Data":
        return "Batch " + str(layer.data_param.batch_size)
    if layer.type in ("Convolution", "Deconvolution"):
        return str(layer.convolution_param.num_output)
    if layer.type == "InnerProduct":
        return str(layer.inner_product_param.num_output)
    return '""'


def get_layer_lr_mult(layer):
    """(weight, bias) learning-rate multipliers of a Convolution/Deconvolution/InnerProduct
    layer; 1.0 for those its ``param`` list does not give."""
    if layer.type not in _LEARNING_TYPES:
        raise ValueError("%s layers do not have a learning rate multiplier" % layer.type)
    if len(layer.param) > 2:
        raise ValueError("Could not parse the learning rate multiplier")
    mults = [p.lr_mult for p in layer.param] + [1.0, 1.0]
    return tuple(mults[:2])


def get_layer_label(layer, rankdir, display_lrm=False):
    """The node label of ``layer`` (DOT-quoted): name, (type), spatial parameters and, with
    ``display_lrm``, the learning-rate multipliers; words stacked for LR/RL layouts."""
    separator = " " if rankdir in ("TB", "BT") else r"\n"
    if layer.type == "Pooling":
        kind = "(%s %s)" % (layer.type, get_pooling_types_dict()[layer.pooling_param.pool])
    else:
        kind = "(%s)" % layer.type
    parts = [layer.name, kind]
    if layer.type == "Pooling":
        p = layer.pooling_param
        parts.append(_spatial(separator, p.kernel_size, p.stride, p.pad))
    elif layer.type in ("Convolution", "Deconvolution"):
        p = layer.convolution_param
        parts.append(_spatial(separator, _first(p.kernel_size, 1), _first(p.stride, 1),
                              _first(p.pad, 0)))
    if display_lrm and layer.type in _LEARNING_TYPES:
        lrm0, lrm1 = get_layer_lr_mult(layer)
        if lrm0 or lrm1:
            parts.append("lr mult: %.1f, %.1f" % (lrm0, lrm1))
    return '"%s"' % separator.join(parts)


def _first(values, default):
    return values[0] if len(values) else default


def _spatial(separator, kernel, stride, pad):
    return separator.join(["kernel size: %d" % kernel, "stride: %d" % stride, "pad: %d" % pad])


def choose_color_by_layertype(layertype):
    """Fill colour of a layer node: red convolutions, orange pooling, purple inner products,
    blue otherwise."""
    return _TYPE_COLORS.get(layertype, LAYER_STYLE_DEFAULT["fillcolor"])


def _in_phase(layer, phase):
    """Whether ``layer`` is drawn for ``phase`` (pycaffe's rule: include rules name phases, a
    rule without one counts as TRAIN; exclude rules remove)."""
    if phase is None:
        return True
    if layer.include and layer.exclude:
        raise ValueError("layer %s has both include and exclude specified." % layer.name)
    included = not layer.include or any(r.phase == phase for r in layer.include)
    return included and not any(r.phase == phase for r in layer.exclude)


def get_pydot_graph(caffe_net, rankdir, label_edges=True, phase=None, display_lrm=False):
    """A pydot.Dot of ``caffe_net`` (a NetParameter): layers of ``phase`` (None: all), blobs,
    and edges bottom -> layer -> top."""
    pydot = require("pydot", "draw", "drawing nets")
    graph = pydot.Dot(caffe_net.name or "Net", graph_type="digraph", rankdir=rankdir)
    nodes, edges = {}, []
    for layer in caffe_net.layer:
        if not _in_phase(layer, phase):
            continue
        node_name = "%s_%s" % (layer.name, layer.type)
        in_place = (len(layer.bottom) == 1 and len(layer.top) == 1
                    and layer.bottom[0] == layer.top[0])
        style = (NEURON_LAYER_STYLE if in_place else
                 dict(LAYER_STYLE_DEFAULT, fillcolor=choose_color_by_layertype(layer.type)))
        nodes[node_name] = pydot.Node(get_layer_label(layer, rankdir, display_lrm), **style)
        for bottom in layer.bottom:
            nodes[bottom + "_blob"] = pydot.Node(bottom, **BLOB_STYLE)
            edges.append((bottom + "_blob", node_name, '""'))
        label = get_edge_label(layer) if label_edges else '""'
        for top in layer.top:
            nodes[top + "_blob"] = pydot.Node(top)
            edges.append((node_name, top + "_blob", label))
    for node in nodes.values():
        graph.add_node(node)
    for src, dst, label in edges:
        graph.add_edge(pydot.Edge(nodes[src], nodes[dst], label=label))
    return graph


def graphviz_program():
    """(name, path) of the layout program: Graphviz's ``dot`` on PATH, else ``graphviz-pure``
    (on PATH or in this Python's scripts folder, where pip puts it in a virtual environment)."""
    for name in _PROGRAMS:
        found = shutil.which(name) or shutil.which(name, path=sysconfig.get_path("scripts"))
        if found:
            return name, found
    raise MissingExtra("drawing nets needs Graphviz's dot: pip install 'caffecli[draw]' (brings "
                       "graphviz-pure) or install Graphviz (apt-get install graphviz)")


def render(graph, ext):
    """``graph`` laid out and written in format ``ext`` (png, svg, pdf, dot, ...), as bytes;
    ``raw`` is the DOT source itself."""
    if ext == "raw":
        return graph.to_string().encode("utf-8")
    name, program = graphviz_program()
    if name == "graphviz-pure" and ext == "pdf":
        return _png_to_pdf(_create(graph, program, "png"))
    return _create(graph, program, ext)


def _create(graph, program, ext):
    """Run the layout program on the graph's DOT text (what pydot's create does), with its
    complaint as a one-line error."""
    done = subprocess.run([program, "-T" + ext], input=graph.to_string().encode("utf-8"),
                          capture_output=True)
    if done.returncode != 0:
        reason = " ".join(done.stderr.decode("utf-8", "replace").split()) or \
            "exit status %d" % done.returncode
        raise CaffeError("%s could not write %s: %s" % (os.path.basename(program), ext, reason))
    return done.stdout


def _png_to_pdf(png):
    out = io.BytesIO()
    with Image.open(io.BytesIO(png)) as im:
        im.convert("RGB").save(out, "PDF", resolution=96.0)
    return out.getvalue()


def draw_net(caffe_net, rankdir, ext="png", phase=None, display_lrm=False):
    """The drawing of ``caffe_net`` as bytes in format ``ext``; ``phase`` (caffe.TRAIN/TEST or
    None for all layers) picks the layers."""
    return render(get_pydot_graph(caffe_net, rankdir, phase=phase, display_lrm=display_lrm), ext)


def draw_net_to_file(caffe_net, filename, rankdir="LR", phase=None, display_lrm=False):
    """Draw ``caffe_net`` into ``filename``, in the format its extension names."""
    data = draw_net(caffe_net, rankdir, filename[filename.rfind(".") + 1:], phase, display_lrm)
    with open(filename, "wb") as fid:
        fid.write(data)
