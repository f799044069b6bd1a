"""plot_log: charts of Caffe training logs (Caffe's tools/extra/plot_training_log.py), through
matplotlib (the ``[plot]`` extra).

The chart types and their numbers are plot_training_log.py's: test accuracy, test loss, train
learning rate and train loss, each against iterations and against seconds. ``--chart N`` draws
one of them (several logs share its axes, one line each); without it all eight are drawn in a
grid, where a chart the logs have no numbers for (no test net, say) says so instead. The
numbers come from parse_log: test accuracy and loss are the test outputs whose names contain
'accuracy' and 'loss', train loss the train output named like 'loss'.
"""
import os

import click

from ..errors import CaffeError
from ..util.optional import require
from ._common import GflagsCommand
from .parse_log import parse_log

# (y field, x field) in plot_training_log.py's order: fields sorted, x = Iters or Seconds
CHART_TYPES = [(y, x) for y in ("Test accuracy", "Test loss", "Train learning rate",
                                "Train loss") for x in ("Iters", "Seconds")]
_X_COLUMNS = {"Iters": "NumIters", "Seconds": "Seconds"}
_MARKERS = ("o", "s", "^", "D", "v", "*", "x", "+")


def chart_description(chart_type):
    """'Test accuracy  vs. Iters' and the like, as plot_training_log.py titles its charts."""
    y_field, x_field = CHART_TYPES[chart_type]
    return "%s  vs. %s" % (y_field, x_field)


def _y_column(rows, y_field, log):
    """The column of ``rows`` that holds ``y_field`` ('Test accuracy' -> a name with
    'accuracy')."""
    if y_field == "Train learning rate":
        return "LearningRate"
    word = y_field.split()[-1]
    names = [k for k in (rows[0] if rows else {}) if k not in ("NumIters", "Seconds",
                                                                  "LearningRate")]
    matching = [n for n in names if word in n]
    if not matching:
        raise CaffeError("%s: no %s column to plot (%s outputs: %s)"
                         % (log, y_field.lower(), y_field.split()[0].lower(),
                            ", ".join(names) or "none"))
    return matching[0]


def chart_data(tables, chart_type, log):
    """(x values, y values) of ``chart_type`` from parse_log's (train, test) ``tables``."""
    y_field, x_field = CHART_TYPES[chart_type]
    rows = tables[0] if y_field.startswith("Train") else tables[1]
    column = _y_column(rows, y_field, log)
    rows = [r for r in rows if column in r]
    return [r[_X_COLUMNS[x_field]] for r in rows], [r[column] for r in rows]


def _label(log):
    name = os.path.basename(log)
    return name[:-len(".log")] if name.endswith(".log") else name


def _draw_chart(axes, chart_type, logs, tables):
    y_field, x_field = CHART_TYPES[chart_type]
    for i, (log, table) in enumerate(zip(logs, tables)):
        x, y = chart_data(table, chart_type, log)
        axes.plot(x, y, label=_label(log), marker=_MARKERS[i % len(_MARKERS)], linewidth=0.75,
                  markersize=3)
    lower = "accuracy" in y_field
    axes.legend(loc="lower right" if lower else "upper right", ncol=1, fontsize="small")
    axes.set_title(chart_description(chart_type), fontsize="medium")
    axes.set_xlabel(x_field)
    axes.set_ylabel(y_field)


def plot_logs(logs, output, chart=None):
    """Draw ``chart`` (a plot_training_log.py chart number; None: all eight in a grid) for the
    training ``logs`` into image file ``output`` (its extension names the format)."""
    figure_module = require("matplotlib.figure", "plot", "plotting logs")
    if chart is not None and not 0 <= chart < len(CHART_TYPES):
        raise CaffeError("chart type %d is not one of 0-%d" % (chart, len(CHART_TYPES) - 1))
    tables = [parse_log(log) for log in logs]
    charts = range(len(CHART_TYPES)) if chart is None else [chart]
    rows, cols = (4, 2) if chart is None else (1, 1)
    figure = figure_module.Figure(figsize=(5.0 * cols, 3.4 * rows), dpi=80,
                                  layout="constrained")
    for index, chart_type in enumerate(charts):
        axes = figure.add_subplot(rows, cols, index + 1)
        try:
            _draw_chart(axes, chart_type, logs, tables)
        except CaffeError as exc:
            if chart is not None:
                raise
            axes.set_axis_off()  # in the grid, a chart the logs have no numbers for says so
            axes.text(0.5, 0.5, str(exc), ha="center", va="center", wrap=True)
    figure.savefig(output)


def _chart_help():
    return "; ".join("%d: %s" % (i, chart_description(i)) for i in range(len(CHART_TYPES)))


@click.command("plot_log", cls=GflagsCommand,
               help="Plot Caffe training logs: LOG... OUT.png.  Chart types: " + _chart_help())
@click.argument("paths", nargs=-1, required=True, metavar="LOG... OUT.png")
@click.option("--chart", type=int, default=None,
              help="Chart type number (default: all eight in a grid).")
def plot_log(paths, chart):
    if len(paths) < 2:
        raise click.UsageError("give at least one log and the output image")
    plot_logs(list(paths[:-1]), paths[-1], chart)
