"""classify: class probabilities for images with a deploy net (Caffe's python/classify.py).

INPUT_FILE is an image, a folder of images (``--ext``) or a .npy array of images; the N x classes
probabilities go to OUTPUT_FILE with numpy.save. Same options and defaults as classify.py; its
default model and mean paths are read relative to the current folder (a Caffe checkout's root).
"""
import glob
import os
import time

import click
import numpy

from ..errors import CaffeError
from ..pycaffe import set_mode_cpu, set_mode_gpu
from ..pycaffe.classifier import Classifier
from ..pycaffe.io import load_image
from ._common import GflagsCommand

DEFAULT_MODEL = "models/bvlc_reference_caffenet/deploy.prototxt"
DEFAULT_WEIGHTS = "models/bvlc_reference_caffenet/bvlc_reference_caffenet.caffemodel"
DEFAULT_MEAN = "python/caffe/imagenet/ilsvrc_2012_mean.npy"


def model_options(f):
    """--model_def, --pretrained_model, --gpu and the preprocessing options classify.py and
    detect.py share."""
    options = [
        click.option("--model_def", default=DEFAULT_MODEL, show_default=True,
                     help="Model definition file."),
        click.option("--pretrained_model", default=DEFAULT_WEIGHTS, show_default=True,
                     help="Trained model weights file."),
        click.option("--gpu", is_flag=True, help="Switch for gpu computation."),
        click.option("--mean_file", default=DEFAULT_MEAN, show_default=True,
                     help="Data set image mean (numpy array). Set to '' for no mean "
                          "subtraction."),
        click.option("--input_scale", type=float, default=None,
                     help="Multiply input features by this scale to finish preprocessing."),
        click.option("--raw_scale", type=float, default=255.0, show_default=True,
                     help="Multiply raw input by this scale before preprocessing."),
        click.option("--channel_swap", default="2,1,0", show_default=True,
                     help="Order to permute input channels. The default converts RGB -> BGR "
                          "since BGR is the Caffe default by way of OpenCV."),
    ]
    for option in reversed(options):
        f = option(f)
    return f


def set_mode(gpu):
    """GPU or CPU mode, announced as classify.py does."""
    if gpu:
        set_mode_gpu()
        click.echo("GPU mode")
    else:
        set_mode_cpu()
        click.echo("CPU mode")


def int_list(text):
    """'2,1,0' -> [2, 1, 0]; '' -> None."""
    return [int(s) for s in text.split(",")] if text else None


def load_inputs(input_file, ext):
    """Images from a .npy file, a folder (files ending in .EXT, sorted) or one image file."""
    input_file = os.path.expanduser(input_file)
    if input_file.endswith("npy"):
        click.echo("Loading file: %s" % input_file)
        return numpy.load(input_file)
    if os.path.isdir(input_file):
        click.echo("Loading folder: %s" % input_file)
        files = sorted(glob.glob(input_file + "/*." + ext))
        if not files:
            raise CaffeError("%s: no *.%s images in this folder (see --ext)" % (input_file, ext))
        return [load_image(f) for f in files]
    click.echo("Loading file: %s" % input_file)
    return [load_image(input_file)]


@click.command("classify", cls=GflagsCommand,
               help="Classify images (an image, a folder or a .npy) with a deploy net; saves the "
                    "probabilities to OUTPUT_FILE (.npy).")
@click.argument("input_file")
@click.argument("output_file")
@model_options
@click.option("--center_only", is_flag=True,
              help="Switch for prediction from center crop alone instead of averaging "
                   "predictions across crops (default).")
@click.option("--images_dim", default="256,256", show_default=True,
              help="Canonical 'height,width' dimensions of input images.")
@click.option("--ext", default="jpg", show_default=True,
              help="Image file extension to take as input when a directory is given as the "
                   "input file.")
def classify(input_file, output_file, model_def, pretrained_model, gpu, mean_file, input_scale,
             raw_scale, channel_swap, center_only, images_dim, ext):
    mean = numpy.load(mean_file) if mean_file else None
    set_mode(gpu)
    classifier = Classifier(model_def, pretrained_model, image_dims=int_list(images_dim),
                            mean=mean, input_scale=input_scale, raw_scale=raw_scale,
                            channel_swap=int_list(channel_swap))
    inputs = load_inputs(input_file, ext)
    click.echo("Classifying %d inputs." % len(inputs))
    start = time.time()
    predictions = classifier.predict(inputs, not center_only)
    click.echo("Done in %.2f s." % (time.time() - start))
    click.echo("Saving results into %s" % output_file)
    numpy.save(output_file, predictions)
