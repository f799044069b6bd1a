"""Caffe's companion tools as click commands; the caffecli group adds ``TOOL_COMMANDS``."""
from .compute_image_mean import compute_image_mean
from .convert_cifar_data import convert_cifar_data
from .convert_imageset import convert_imageset
from .convert_mnist_data import convert_mnist_data
from .extract_features import extract_features

TOOL_COMMANDS = [convert_imageset, compute_image_mean, convert_cifar_data, convert_mnist_data,
                 extract_features]
