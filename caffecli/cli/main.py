"""The ``caffecli`` command group: Caffe's brew commands plus the data tools.

``caffecli train -solver s.prototxt`` and ``caffecli train --solver=s.prototxt`` both work
(gflags spellings are normalized before click parses). Errors print one line and exit 1;
``--debug`` shows the traceback instead.
"""
import os
import sys

import click

from .. import __version__, glog
from ..errors import CaffeError
from ..net import TEST, TRAIN
from . import errors, gflags


class CaffeGroup(click.Group):
    """A click group that accepts gflags spellings and turns failures into one line."""

    def parse_args(self, ctx, args):
        names = self.list_commands(ctx)
        value_flags = set()
        for name in names:
            for p in self.get_command(ctx, name).params:
                if isinstance(p, click.Option) and not p.is_flag:
                    value_flags.update(o.lstrip("-") for o in p.opts)
        return super().parse_args(ctx, gflags.normalize(args, names, value_flags))

    def invoke(self, ctx):
        debug = bool(ctx.params.get("debug")) or bool(os.environ.get("CAFFECLI_DEBUG"))
        return errors.run_guarded(lambda: super(CaffeGroup, self).invoke(ctx), debug)


def _phase(value, default):
    if not value:
        return default
    if value not in ("TRAIN", "TEST"):
        raise CaffeError('phase must be "TRAIN" or "TEST" (got "%s")' % value)
    return TRAIN if value == "TRAIN" else TEST


def _gpu_option(f):
    return click.option("--gpu", default="", metavar="IDS",
                        help="Run on GPU device ids separated by ',' (or 'all').")(f)


def _state_options(f):
    f = click.option("--stage", multiple=True, metavar="NAMES",
                     help="Net stages, separated by ',' or repeated.")(f)
    return click.option("--level", default=0, type=int, help="Net level.")(f)


@click.group(cls=CaffeGroup, context_settings={"help_option_names": ["--help", "-h"]})
@click.option("--debug", is_flag=True, help="Show Python tracebacks instead of one-line errors.")
@click.version_option(version=__version__, prog_name="caffecli")
def cli(debug):
    """Caffe's command-line brew: train, test, time, device_query, and data tools."""
    level = os.environ.get("GLOG_minloglevel")
    if level and level.isdigit():
        glog.set_min_level(int(level))


@cli.command()
@click.option("--solver", default="", help="The solver definition prototxt.")
@click.option("--weights", default="", help="Pretrained weights to finetune from, ','-separated.")
@click.option("--snapshot", default="", help="A .solverstate to resume training from.")
@_gpu_option
@_state_options
@click.option("--sigint_effect", "--sigint-effect", default="stop",
              help="On SIGINT: stop, snapshot or none.")
@click.option("--sighup_effect", "--sighup-effect", default="snapshot",
              help="On SIGHUP: stop, snapshot or none.")
@click.option("--iterations", type=int, default=50, hidden=True,
              help="Accepted and ignored, as by caffe train (max_iter comes from the solver).")
def train(solver, weights, snapshot, gpu, level, stage, sigint_effect, sighup_effect,
          iterations):
    """Train or finetune a model."""
    from .train import run_train
    run_train(solver, weights=weights, snapshot=snapshot, gpu=gpu, level=level,
              stages=gflags.split_list(stage), sigint_effect=sigint_effect,
              sighup_effect=sighup_effect)


@cli.command()
@click.option("--model", default="", help="The model definition prototxt.")
@click.option("--weights", default="", help="The trained weights (.caffemodel or .h5).")
@click.option("--iterations", default=50, type=int, help="Number of batches to score.")
@_gpu_option
@click.option("--phase", default="", help="TRAIN or TEST (default TEST).")
@_state_options
def test(model, weights, iterations, gpu, phase, level, stage):
    """Score a model."""
    from .test import run_test
    run_test(model, weights, iterations=iterations, gpu=gpu, level=level,
             stages=gflags.split_list(stage), phase=_phase(phase, TEST))


@cli.command(name="time")
@click.option("--model", default="", help="The model definition prototxt.")
@click.option("--iterations", default=50, type=int, help="Number of timed iterations.")
@click.option("--phase", default="", help="TRAIN or TEST (default TRAIN).")
@_gpu_option
@_state_options
def time_(model, iterations, phase, gpu, level, stage):
    """Benchmark model execution time."""
    from .time import run_time
    run_time(model, iterations=iterations, gpu=gpu, phase=_phase(phase, TRAIN), level=level,
             stages=gflags.split_list(stage))


@cli.command(name="device_query")
@_gpu_option
def device_query(gpu):
    """Show GPU diagnostic information."""
    from .device_query import run_device_query
    run_device_query(gpu)


@cli.command()
def layers():
    """List every registered layer type, one per line."""
    from ..registry import layer_types
    for name in layer_types():
        click.echo(name)


def _add_tool_commands():
    try:
        from ..tools import TOOL_COMMANDS
    except ImportError:
        return
    for command in TOOL_COMMANDS:
        cli.add_command(command)


_add_tool_commands()


def main(argv=None):
    """Console-script entry point (``caffecli``); returns the exit status."""
    return cli.main(args=sys.argv[1:] if argv is None else list(argv), prog_name="caffecli")
