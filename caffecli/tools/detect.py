"""detect: classify windows of images with a deploy net (Caffe's python/detect.py, R-CNN style).

INPUT_FILE is a .csv with a header naming filename, ymin, xmin, ymax, xmax (``--crop_mode
list``) or a .txt of image filenames (``--crop_mode selective_search``, which needs the external
selective_search_ijcv_with_python module). Results go to a .csv (filename, the window and one
column per class) or an .h5 (datasets filename, window, prediction; pycaffe wrote a pandas
DataFrame there, which would need pandas and PyTables).
"""
import csv
import time

import click
import h5py
import numpy

from ..errors import CaffeError
from ..pycaffe.detector import Detector
from ._common import GflagsCommand
from .classify import int_list, model_options, set_mode

COORD_COLS = ["ymin", "xmin", "ymax", "xmax"]


def read_windows(input_file):
    """[(filename, [window, ...])] from a csv with a filename,ymin,xmin,ymax,xmax header, images
    in first-seen order."""
    grouped = {}
    with open(input_file, newline="") as f:
        reader = csv.DictReader(f, skipinitialspace=True)
        missing = set(["filename"] + COORD_COLS) - set(reader.fieldnames or [])
        if missing:
            raise CaffeError("%s: the header lacks %s (needs filename, %s)"
                             % (input_file, ", ".join(sorted(missing)), ", ".join(COORD_COLS)))
        for row in reader:
            window = numpy.array([int(float(row[c])) for c in COORD_COLS])
            grouped.setdefault(row["filename"], []).append(window)
    return list(grouped.items())


def write_detections(output_file, detections):
    """Detections as csv (one row per window, classN columns) or h5 (three datasets)."""
    names = [d["filename"] for d in detections]
    windows = numpy.array([d["window"] for d in detections], dtype=numpy.int64).reshape(-1, 4)
    predictions = numpy.array([d["prediction"] for d in detections], dtype=numpy.float32)
    if output_file.lower().endswith("csv"):
        with open(output_file, "w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["filename"] + COORD_COLS
                            + ["class%d" % i for i in range(predictions.shape[1])])
            for name, window, prediction in zip(names, windows, predictions):
                writer.writerow([name] + window.tolist() + prediction.tolist())
        return
    with h5py.File(output_file, "w") as f:
        f["filename"] = numpy.array(names, dtype=h5py.string_dtype())
        f["window"] = windows
        f["prediction"] = predictions


@click.command("detect", cls=GflagsCommand,
               help="Windowed detection: classify the windows listed in INPUT_FILE (.csv) or "
                    "proposed by selective search (.txt of images); write OUTPUT_FILE (.csv or "
                    ".h5).")
@click.argument("input_file")
@click.argument("output_file")
@model_options
@click.option("--crop_mode", default="selective_search", show_default=True,
              type=click.Choice(["list", "selective_search"]),
              help="How to generate windows for detection.")
@click.option("--context_pad", type=int, default=16, show_default=True,
              help="Amount of surrounding context to collect in input window.")
def detect(input_file, output_file, model_def, pretrained_model, gpu, mean_file, input_scale,
           raw_scale, channel_swap, crop_mode, context_pad):
    mean = None
    if mean_file:
        mean = numpy.load(mean_file)
        if mean.shape[1:] != (1, 1):
            mean = mean.mean(1).mean(1)
    set_mode(gpu)
    detector = Detector(model_def, pretrained_model, mean=mean, input_scale=input_scale,
                        raw_scale=raw_scale, channel_swap=int_list(channel_swap),
                        context_pad=context_pad)
    start = time.time()
    click.echo("Loading input...")
    lower = input_file.lower()
    if crop_mode == "list":
        if not lower.endswith("csv"):
            raise CaffeError("%s: crop_mode list needs a .csv of filename and window "
                             "columns" % input_file)
        detections = detector.detect_windows(read_windows(input_file))
    elif lower.endswith("txt"):
        with open(input_file) as f:
            detections = detector.detect_selective_search([line.strip() for line in f
                                                           if line.strip()])
    else:
        raise CaffeError("%s: unknown input file type: not in txt or csv." % input_file)
    click.echo("Processed {} windows in {:.3f} s.".format(len(detections), time.time() - start))
    start = time.time()
    write_detections(output_file, detections)
    click.echo("Saved to {} in {:.3f} s.".format(output_file, time.time() - start))
