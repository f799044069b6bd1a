"""Caffe's companion tools as click commands; the caffecli group adds ``TOOL_COMMANDS``.

Each module (``caffecli.tools.convert_imageset``, ...) holds the command and a ``run()``
function for use from Python."""
from . import (compute_image_mean, convert_cifar_data, convert_imageset, convert_mnist_data,
               extract_features)

TOOL_COMMANDS = [convert_imageset.convert_imageset, compute_image_mean.compute_image_mean,
                 convert_cifar_data.convert_cifar_data, convert_mnist_data.convert_mnist_data,
                 extract_features.extract_features]
