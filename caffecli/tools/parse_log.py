"""parse_log: a Caffe training log as two CSV tables, LOG.train and LOG.test (Caffe's
tools/extra/parse_log.py with extract_seconds.py).

Rows are keyed by iteration: NumIters, Seconds (since the 'Solving' line), LearningRate and one
column per net output. As in Caffe's script: parsing starts at the first 'Iteration' line, a row
is written once it has as many columns as the first row, the first row takes the second row's
learning rate, and classic glog dates (I1122, no year) take the year of the log file's ctime,
moving to the next year when the month goes down. Beyond it: glog 0.6 dates (I20261122) carry
their own year, lines that are not glog lines are skipped, a log without a 'Solving' line is a
one-line error.
"""
import collections
import csv
import datetime
import os
import re

import click

from ..errors import CaffeError
from ._common import GflagsCommand

_ITERATION = re.compile(r"Iteration (\d+)")
_TRAIN_OUTPUT = re.compile(r"Train net output #(\d+): (\S+) = ([\.\deE+-]+)")
_TEST_OUTPUT = re.compile(r"Test net output #(\d+): (\S+) = ([\.\deE+-]+)")
_LEARNING_RATE = re.compile(r"lr = ([-+]?[0-9]*\.?[0-9]+([eE]?[-+]?[0-9]+)?)")
_GLOG_STAMP = re.compile(r"^[IWEF](\d{4})?(\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)\s")


def extract_datetime_from_line(line, year):
    """The time stamp of a glog line; ``year`` is used when the line has none (I1122 form).
    ValueError for lines without a stamp."""
    m = _GLOG_STAMP.match(line.strip() + " ")
    if not m:
        raise ValueError("not a glog line: %r" % line[:40])
    own_year, month, day, hour, minute, second, micro = m.groups()
    return datetime.datetime(int(own_year) if own_year else year, int(month), int(day),
                             int(hour), int(minute), int(second), int(micro))


def get_log_created_year(path):
    """The year of the log file's ctime (classic glog dates carry no year)."""
    return datetime.datetime.fromtimestamp(os.path.getctime(path)).year


def _rows_add(regex, line, iteration, seconds, learning_rate, state):
    """Fold one line into a table (``state`` holds 'rows' and the row being filled, 'row')."""
    rows, row = state["rows"], state["row"]
    match = regex.search(line)
    if match:
        if not row or row["NumIters"] != iteration:
            if row:
                rows.append(row)
            row = collections.OrderedDict([("NumIters", iteration), ("Seconds", seconds),
                                           ("LearningRate", learning_rate)])
        row[match.group(2)] = float(match.group(3))
    if row and rows and len(row) == len(rows[0]):
        rows.append(row)
        row = None
    state["row"] = row


def parse_log(path_to_log):
    """(train rows, test rows) of the log at ``path_to_log``, each row an OrderedDict."""
    year = get_log_created_year(path_to_log)
    train = {"rows": [], "row": None}
    test = {"rows": [], "row": None}
    with open(path_to_log, errors="replace") as f:
        start = None
        for line in f:
            if "Solving" in line:
                start = extract_datetime_from_line(line, year)
                break
        if start is None:
            raise CaffeError("%s: no 'Solving' line; is it the log of caffe train?"
                             % path_to_log)
        last, iteration, learning_rate = start, -1, float("nan")
        for line in f:
            match = _ITERATION.search(line)
            if match:
                iteration = float(match.group(1))
            if iteration == -1:
                continue
            try:
                when = extract_datetime_from_line(line, year)
            except ValueError:
                continue
            if when.month < last.month:
                year += 1
                when = extract_datetime_from_line(line, year)
            last = when
            seconds = (when - start).total_seconds()
            match = _LEARNING_RATE.search(line)
            if match:
                learning_rate = float(match.group(1))
            _rows_add(_TRAIN_OUTPUT, line, iteration, seconds, learning_rate, train)
            _rows_add(_TEST_OUTPUT, line, iteration, seconds, learning_rate, test)
    for rows in (train["rows"], test["rows"]):
        if len(rows) > 1:
            rows[0]["LearningRate"] = rows[1]["LearningRate"]
    return train["rows"], test["rows"]


def write_csv(output_filename, dict_list, delimiter=",", verbose=False):
    """Write rows as CSV (Excel dialect, header from the first row); nothing when empty."""
    if not dict_list:
        if verbose:
            click.echo("Not writing %s; no lines to write" % output_filename)
        return
    with open(output_filename, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(dict_list[0].keys()), dialect=csv.excel,
                                delimiter=delimiter)
        writer.writeheader()
        writer.writerows(dict_list)
    if verbose:
        click.echo("Wrote %s" % output_filename)


def save_csv_files(logfile_path, output_dir, train_dict_list, test_dict_list, delimiter=",",
                   verbose=False):
    """Write OUTPUT_DIR/<log name>.train and .test."""
    base = os.path.join(output_dir, os.path.basename(logfile_path))
    write_csv(base + ".train", train_dict_list, delimiter, verbose)
    write_csv(base + ".test", test_dict_list, delimiter, verbose)


@click.command("parse_log", cls=GflagsCommand,
               help="Parse a Caffe training log into two CSV files containing training and "
                    "testing information (LOGFILE_PATH.train and .test in OUTPUT_DIR).")
@click.argument("logfile_path")
@click.argument("output_dir")
@click.option("--verbose", is_flag=True, help="Print some extra info (e.g., output filenames)")
@click.option("--delimiter", default=",", show_default=True,
              help="Column delimiter in output files")
def parse_log_command(logfile_path, output_dir, verbose, delimiter):
    if not os.path.isdir(output_dir):
        raise CaffeError("%s: no such directory (output directory)" % output_dir)
    train, test = parse_log(logfile_path)
    save_csv_files(logfile_path, output_dir, train, test, delimiter=delimiter, verbose=verbose)
