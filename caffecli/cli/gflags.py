"""A small gflags: Caffe's command-line flags, parsed and described as gflags does.

gflags takes ``-flag value``, ``-flag=value``, ``--flag value`` and ``--flag=value`` anywhere on
the line, ``-flag``/``-noflag`` for booleans, and ``--`` to end the flags; every defined flag is
accepted whatever the command (the command decides what it uses). Errors are UsageError, one
line in gflags' words. ``usage()`` is gflags' ShowUsageWithFlagsRestrict text.
"""
import os
from collections import namedtuple

from ..errors import CaffeError

Flag = namedtuple("Flag", "name type default help source")
_CAFFE, _GLOG, _OURS = "tools/caffe.cpp", "src/logging.cc", "caffecli/cli/main.py"
SOURCES = (_CAFFE, _GLOG, _OURS)   # usage order: Caffe's own flags first, as caffe prints

FLAGS = [
    Flag("gpu", "string", "", "Optional; run in GPU mode on given device IDs separated by ','."
         "Use '-gpu all' to run on all available GPUs. The effective training batch size is "
         "multiplied by the number of devices.", _CAFFE),
    Flag("solver", "string", "", "The solver definition protocol buffer text file.", _CAFFE),
    Flag("model", "string", "", "The model definition protocol buffer text file.", _CAFFE),
    Flag("phase", "string", "", "Optional; network phase (TRAIN or TEST). Only used for 'time'.",
         _CAFFE),
    Flag("level", "int32", 0, "Optional; network level.", _CAFFE),
    Flag("stage", "string", "", "Optional; network stages (not to be confused with phase), "
         "separated by ','.", _CAFFE),
    Flag("snapshot", "string", "", "Optional; the snapshot solver state to resume training.",
         _CAFFE),
    Flag("weights", "string", "", "Optional; the pretrained weights to initialize finetuning, "
         "separated by ','. Cannot be set simultaneously with snapshot.", _CAFFE),
    Flag("iterations", "int32", 50, "The number of iterations to run.", _CAFFE),
    Flag("sigint_effect", "string", "stop", "Optional; action to take when a SIGINT signal is "
         "received: snapshot, stop or none.", _CAFFE),
    Flag("sighup_effect", "string", "snapshot", "Optional; action to take when a SIGHUP signal "
         "is received: snapshot, stop or none.", _CAFFE),
    Flag("alsologtostderr", "bool", False, "log messages go to stderr in addition to logfiles",
         _GLOG),
    Flag("log_dir", "string", "", "If specified, logfiles are written into this directory "
         "instead of the default logging directory.", _GLOG),
    Flag("logtostderr", "bool", False, "log messages go to stderr instead of logfiles", _GLOG),
    Flag("minloglevel", "int32", 0, "Messages logged at a lower level than this don't actually "
         "get logged anywhere", _GLOG),
    Flag("stderrthreshold", "int32", 2, "log messages at or above this level are copied to "
         "stderr in addition to logfiles.  This flag obsoletes --alsologtostderr.", _GLOG),
    Flag("v", "int32", 0, "Show all VLOG(m) messages for m <= this.", _GLOG),
    Flag("debug", "bool", False, "Show the Python traceback of an error instead of one line.",
         _OURS),
]
BY_NAME = {f.name: f for f in FLAGS}
HELP_FLAGS = ("help", "helpfull", "h", "version")
_TRUE = ("true", "t", "yes", "y", "1")
_FALSE = ("false", "f", "no", "n", "0")
LINE_LENGTH = 80


class UsageError(CaffeError):
    """A command line gflags rejects (unknown flag, bad value, missing argument)."""


def _int32(flag, text):
    try:
        value = int(text, 16 if text.lower().startswith(("0x", "-0x")) else 10)
    except ValueError:
        value = None
    if value is None or not -2 ** 31 <= value < 2 ** 31:
        raise UsageError("illegal value '%s' specified for int32 flag '%s'" % (text, flag))
    return value


def parse_bool(flag, text):
    """gflags' spellings of a bool value (true/t/yes/y/1, false/f/no/n/0, any case)."""
    if text.lower() in _TRUE:
        return True
    if text.lower() in _FALSE:
        return False
    raise UsageError("illegal value '%s' specified for bool flag '%s'" % (text, flag))


_CONVERT = {"int32": _int32, "bool": parse_bool, "string": lambda flag, text: text}


class Parsed:
    """Flag values (defaults where not given), which flags were given, the positional words
    before a tool command, and the words after it (the tool parses those itself)."""

    def __init__(self):
        self.values = {f.name: f.default for f in FLAGS}
        self.given = []
        self.stages = []
        self.positional = []
        self.rest = []
        self.help = None


def split_flag(token):
    """``-name=value`` / ``--name`` -> (name, value or None); not a flag -> (None, None)."""
    if not token.startswith("-") or token == "-":
        return None, None
    body = token[2:] if token.startswith("--") else token[1:]
    name, eq, value = body.partition("=")
    return name, (value if eq else None)


def parse(argv, tool_commands=()):
    """Parse ``argv`` as gflags would; the first positional word that is in ``tool_commands``
    ends parsing (everything after it belongs to that tool)."""
    out = Parsed()
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            out.positional.extend(argv[i:])
            break
        name, value = split_flag(token)
        if name is None:
            out.positional.append(token)
            if token in tool_commands and len(out.positional) == 1:
                out.rest = list(argv[i:])
                break
            continue
        if name in HELP_FLAGS and value is None:
            out.help = name
            continue
        flag = BY_NAME.get(name)
        if flag is None and name.startswith("no") and value is None:
            flag = BY_NAME.get(name[2:])
            if flag is not None and flag.type == "bool":
                out.values[flag.name] = False
                out.given.append(flag.name)
                continue
            flag = None
        if flag is None:
            raise UsageError("unknown command line flag '%s'" % name)
        if value is None:
            if flag.type == "bool":
                value = "true"
            elif i < len(argv):
                value = argv[i]
                i += 1
            else:
                raise UsageError("flag '%s' is missing its argument; flag description: %s"
                                 % (token, flag.help))
        out.values[flag.name] = _CONVERT[flag.type](name, value)
        out.given.append(flag.name)
        if flag.name == "stage":
            out.stages.append(value)
    return out


def split_list(values):
    """Repeated and comma-separated flags (``-stage a,b -stage c``) as one list, split as Caffe
    splits ``-stage``: no flag gives ``[""]`` (Caffe's NetState then holds stage "")."""
    return ",".join(str(v) for v in (values or ())).split(",")


# ---- gflags' usage text ------------------------------------------------------------------
def _wrap_description(text):
    """DescribeOneFlag's wrapping: at most 80 columns, continuation lines indented 6."""
    out, column = "", 0
    while True:
        if column + len(text) < LINE_LENGTH:
            return out + text, column + len(text)
        cut = LINE_LENGTH - column - 1
        while cut > 0 and not text[cut].isspace():
            cut -= 1
        if cut <= 0:
            return out + text, LINE_LENGTH
        out += text[:cut]
        text = text[cut:].lstrip()
        if not text:
            return out, column + cut
        out += "\n      "
        column = 6


def _add_word(word, text, column):
    if column + 1 + len(word) >= LINE_LENGTH:
        return text + "\n      " + word, 6 + len(word)
    return text + " " + word, column + 1 + len(word)


def _default_text(flag):
    if flag.type == "string":
        return 'default: "%s"' % flag.default
    if flag.type == "bool":
        return "default: %s" % ("true" if flag.default else "false")
    return "default: %s" % flag.default


def describe(flag):
    """One flag as gflags lists it: ``    -name (help) type: T default: D``, wrapped."""
    text, column = _wrap_description("    -%s (%s)" % (flag.name, flag.help))
    text, column = _add_word("type: " + flag.type, text, column)
    text, _ = _add_word(_default_text(flag), text, column)
    return text + "\n"


def usage(program, message):
    """``program: message`` then every flag, grouped by the file defining it, as gflags does
    (it sorts by file name; here Caffe's file comes first)."""
    text = "%s: %s\n" % (program, message)
    last_file, first_dir = None, True
    for flag in sorted(FLAGS, key=lambda f: (SOURCES.index(f.source), f.name)):
        if flag.source != last_file:
            if last_file is None or os.path.dirname(flag.source) != os.path.dirname(last_file):
                if not first_dir:
                    text += "\n\n"
                first_dir = False
            text += "\n  Flags from %s:\n" % flag.source
            last_file = flag.source
        text += describe(flag)
    return text
