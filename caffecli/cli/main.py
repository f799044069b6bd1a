"""The ``caffecli`` command: Caffe's brew commands (train, test, time, device_query) parsed as
Caffe's gflags parses them, plus ``layers`` and the data tools (click commands of their own).

No command prints Caffe's usage (commands and every flag with its default) and exits 0. Any
flag is accepted by any command; one a command does not use is ignored with a WARNING, as a
gflags program ignores flags it never reads. Usage errors and failures are one line, exit 1.
"""
import os
import sys
import warnings
from collections import namedtuple

import click

from .. import __version__, glog
from ..errors import CaffeError
from ..proto.caffe_pb2 import TEST, TRAIN
from ..tools import TOOLS, tool_command
from . import errors, gflags

PROG = "caffecli"
Command = namedtuple("Command", "run flags summary")
_GLOG_FLAGS = {"minloglevel": "min_level", "v": "verbose", "stderrthreshold": "stderr_threshold",
               "logtostderr": "logtostderr", "alsologtostderr": "alsologtostderr",
               "log_dir": "log_dir"}
_STATE = ("gpu", "level", "stage")


def _phase(value, default):
    if not value:
        return default
    if value not in ("TRAIN", "TEST"):
        raise CaffeError('phase must be "TRAIN" or "TEST" (got "%s")' % value)
    return TRAIN if value == "TRAIN" else TEST


def _iterations(flags, command):
    if flags["iterations"] < 1:
        raise gflags.UsageError("-iterations must be at least 1 for %s (got %d)"
                                % (command, flags["iterations"]))
    return flags["iterations"]


# Each command imports its module when it runs: the usage and the other commands start
# without the engine (numpy, the layers, the solvers).
def _train(flags, stages):
    from .train import run_train
    return run_train(flags["solver"], weights=flags["weights"], snapshot=flags["snapshot"],
                     gpu=flags["gpu"], level=flags["level"], stages=stages,
                     sigint_effect=flags["sigint_effect"], sighup_effect=flags["sighup_effect"])


def _test(flags, stages):
    from .test import run_test
    run_test(flags["model"], flags["weights"], iterations=_iterations(flags, "test"),
             gpu=flags["gpu"], level=flags["level"], stages=stages)   # TEST, as caffe.cpp


def _time(flags, stages):
    from .time import run_time
    run_time(flags["model"], iterations=_iterations(flags, "time"), gpu=flags["gpu"],
             phase=_phase(flags["phase"], TRAIN), level=flags["level"], stages=stages)


def _device_query(flags, stages):
    from .device_query import run_device_query
    run_device_query(flags["gpu"])


def _layers(flags, stages):
    from ..registry import layer_types
    for name in layer_types():
        click.echo(name)


COMMANDS = {
    "train": Command(_train, {"solver", "snapshot", "weights", "sigint_effect",
                              "sighup_effect"} | set(_STATE), "train or finetune a model"),
    "test": Command(_test, {"model", "weights", "iterations"} | set(_STATE),
                    "score a model"),
    "device_query": Command(_device_query, {"gpu"}, "show GPU diagnostic information"),
    "time": Command(_time, {"model", "iterations", "phase"} | set(_STATE),
                    "benchmark model execution time"),
    "layers": Command(_layers, set(), "list the registered layer types (caffecli's own)"),
}


def usage_text():
    """Caffe's usage message (its four commands first), our extra commands, then the flags."""
    lines = ["command line brew", "usage: %s <command> <args>" % PROG, "", "commands:"]
    rows = [(name, c.summary) for name, c in COMMANDS.items()]
    rows += [(name, summary) for name, (_, _, summary) in sorted(TOOLS.items())]
    width = max(len(name) for name, _ in rows)
    lines += ["  %-*s  %s" % (width, name, summary) for name, summary in rows]
    return gflags.usage(PROG, "\n".join(lines))


# Caffe's tools that leave FLAGS_alsologtostderr unset: INFO lines only to glog's files, the
# ERROR lines (its progress) to stderr too
FILES_ONLY_TOOLS = {"extract_features"}


def _configure_logging(parsed, alsologtostderr=True):
    glog.configure()
    glog.set_flags(**{key: parsed.values[name] for name, key in _GLOG_FLAGS.items()
                      if name in parsed.given})
    glog.start(PROG, alsologtostderr=alsologtostderr)   # caffe.cpp and most tools set it


def _run_brew(parsed):
    if not parsed.positional:
        click.echo(usage_text(), nl=False)
        return 0
    name = parsed.positional[0]
    command = COMMANDS.get(name)
    if command is None:
        raise gflags.UsageError("unknown command '%s' (commands: %s; run %s with no arguments "
                                "for the usage)" % (name, ", ".join(COMMANDS), PROG))
    if len(parsed.positional) > 1:
        raise gflags.UsageError("unexpected argument '%s' after the command '%s'"
                                % (parsed.positional[1], name))
    _configure_logging(parsed)
    for flag in dict.fromkeys(parsed.given):
        if flag not in command.flags and gflags.BY_NAME[flag].source == gflags.SOURCES[0]:
            glog.warning("main.unused_flag", "Flag -%s is not used by '%s'; ignored" % (flag, name))
    return command.run(parsed.values, gflags.split_list(parsed.stages)) or 0


def _run_tool(parsed, tool):
    _configure_logging(parsed, alsologtostderr=tool.name not in FILES_ONLY_TOOLS)
    args = [a for a in parsed.rest if a not in ("-debug", "--debug")]
    try:
        return tool.main(args=args, prog_name="%s %s" % (PROG, tool.name),
                         standalone_mode=False) or 0
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.NoSuchOption as exc:
        raise gflags.UsageError("unknown command line flag '%s'" % exc.option_name.lstrip("-")) \
            from None
    except click.UsageError as exc:
        raise gflags.UsageError("%s: %s" % (tool.name, exc.format_message())) from None
    except click.Abort:
        raise KeyboardInterrupt from None


def _dispatch(argv):
    parsed = gflags.parse(argv, TOOLS)
    if parsed.help == "version":
        click.echo("%s version %s" % (PROG, __version__))
        return 0
    if parsed.help:
        click.echo(usage_text(), nl=False)
        return 0
    if parsed.positional and parsed.positional[0] in TOOLS:
        return _run_tool(parsed, tool_command(parsed.positional[0]))
    return _run_brew(parsed)


def run(argv):
    """Run the command line ``argv``; return the exit status (errors: one line, status 1)."""
    debug = "-debug" in argv or "--debug" in argv or bool(os.environ.get("CAFFECLI_DEBUG"))
    saved = glog.snapshot_config()
    try:
        with warnings.catch_warnings():
            # numpy's floating-point RuntimeWarnings are two lines of source, not log lines;
            # Caffe says nothing either (the solver warns once when the loss is not finite)
            warnings.simplefilter("ignore", RuntimeWarning)
            return errors.run_guarded(lambda: _dispatch(argv), debug)
    finally:
        glog.restore_config(saved)


@click.command(name=PROG, add_help_option=False,
               context_settings={"ignore_unknown_options": True,
                                 "allow_interspersed_args": False})
@click.argument("argv", nargs=-1, type=click.UNPROCESSED)
def cli(argv):
    """Caffe's command-line brew (click only hands the raw words to ``run``)."""
    sys.exit(run(list(argv)))


def main(argv=None):
    """Console-script entry point (``caffecli``); returns the exit status."""
    return run(sys.argv[1:] if argv is None else list(argv))
