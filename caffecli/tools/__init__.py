"""Caffe's companion tools as click commands, which ``caffecli <tool> ...`` runs.

Each module (``caffecli.tools.convert_imageset``, ...) holds the command and a ``run()``
function for use from Python. The data tools are Caffe's C++ tools; draw_net, classify, detect,
parse_log and plot_log are its Python scripts. A tool's module is imported only when it runs,
so the usage and the other commands start without them."""
import importlib

# tool name -> (module, click command in it, the line caffecli's usage shows)
TOOLS = {
    "convert_imageset": ("convert_imageset", "convert_imageset",
                         "convert a list of images to an lmdb/leveldb of Datum"),
    "compute_image_mean": ("compute_image_mean", "compute_image_mean",
                           "compute the mean image of an lmdb/leveldb as a binaryproto"),
    "convert_cifar_data": ("convert_cifar_data", "convert_cifar_data",
                           "convert the CIFAR-10 binary batches to lmdb/leveldb"),
    "convert_mnist_data": ("convert_mnist_data", "convert_mnist_data",
                           "convert the MNIST idx files to lmdb/leveldb"),
    "convert_mnist_siamese_data": ("convert_mnist_siamese_data", "convert_mnist_siamese_data",
                                   "pair MNIST digits at random for a siamese net"),
    "extract_features": ("extract_features", "extract_features",
                         "write a trained net's blobs for a dataset to lmdb/leveldb"),
    "upgrade_net_proto_text": ("upgrade_proto", "upgrade_net_proto_text",
                               "upgrade an old net prototxt to the current format"),
    "upgrade_net_proto_binary": ("upgrade_proto", "upgrade_net_proto_binary",
                                 "upgrade an old binary net (.caffemodel) to the current format"),
    "upgrade_solver_proto_text": ("upgrade_proto", "upgrade_solver_proto_text",
                                  "upgrade an old solver prototxt to the current format"),
    "draw_net": ("draw_net", "draw_net", "draw a net's graph (python/draw_net.py)"),
    "classify": ("classify", "classify", "classify images (python/classify.py)"),
    "detect": ("detect", "detect", "classify windows of images (python/detect.py)"),
    "parse_log": ("parse_log", "parse_log_command",
                  "training log to train/test CSV files (tools/extra/parse_log.py)"),
    "plot_log": ("plot_log", "plot_log", "plot a training log (tools/extra/plot_training_log.py)"),
}


def tool_command(name):
    """The click command of tool ``name`` (its module imported now)."""
    module, attribute, _ = TOOLS[name]
    return getattr(importlib.import_module("." + module, __name__), attribute)
