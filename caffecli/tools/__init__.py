"""Caffe's companion tools as click commands; the caffecli group adds ``TOOL_COMMANDS``.

Each module (``caffecli.tools.convert_imageset``, ...) holds the command and a ``run()``
function for use from Python. The data tools are Caffe's C++ tools; draw_net, classify, detect,
parse_log and plot_log are its Python scripts."""
from . import (classify, compute_image_mean, convert_cifar_data, convert_imageset,
               convert_mnist_data, detect, draw_net, extract_features, parse_log, plot_log,
               upgrade_proto)

TOOL_COMMANDS = [convert_imageset.convert_imageset, compute_image_mean.compute_image_mean,
                 convert_cifar_data.convert_cifar_data, convert_mnist_data.convert_mnist_data,
                 extract_features.extract_features, upgrade_proto.upgrade_net_proto_text,
                 upgrade_proto.upgrade_net_proto_binary, upgrade_proto.upgrade_solver_proto_text,
                 draw_net.draw_net, classify.classify, detect.detect,
                 parse_log.parse_log_command, plot_log.plot_log]
