"""Rewrite a gflags-style command line (``caffe train -solver x``) into the form click parses.

gflags accepts ``-flag value``, ``-flag=value``, ``--flag value`` and ``--flag=value`` and flags
before or after the command word; click wants ``--flag`` after the subcommand. ``--debug``
(ours, not Caffe's) may appear anywhere and is moved in front for the group.
"""
import re

_SINGLE_DASH = re.compile(r"^-([A-Za-z_][A-Za-z0-9_]+)(=.*)?$")
_GROUP_FLAGS = ("--debug", "--help", "--version")


def _to_double_dash(token):
    """``-solver`` / ``-solver=x`` -> ``--solver`` / ``--solver=x``; other tokens unchanged."""
    m = _SINGLE_DASH.match(token)
    if m:
        return "--" + m.group(1) + (m.group(2) or "")
    return token


def normalize(argv, commands, value_flags=()):
    """Return click-ready argv: group flags first, then the command word, then its flags.

    ``commands``: the subcommand names; ``value_flags``: option names (without dashes) that take
    a value, so a value that looks like a command word (``-solver train``) is not mistaken
    for the command.
    """
    value_flags = set(value_flags)
    tokens = [_to_double_dash(t) for t in argv]
    group, rest = [], []
    command_at = None
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok == "--":
            rest.extend(tokens[i:])
            break
        if tok in _GROUP_FLAGS and command_at is None or tok == "--debug":
            group.append(tok)
            i += 1
            continue
        if tok.startswith("--") and "=" not in tok and tok[2:] in value_flags \
                and i + 1 < len(tokens):
            rest.extend([tok, tokens[i + 1]])
            i += 2
            continue
        if command_at is None and tok in commands:
            command_at = len(rest)
        rest.append(tok)
        i += 1
    if command_at:  # flags came before the command word: move the word first
        rest.insert(0, rest.pop(command_at))
    return group + rest


def split_list(values):
    """Repeatable and comma-separated flags (``--stage a,b --stage c``) as one list, split as
    Caffe splits ``-stage``: no flag gives ``[""]`` (Caffe's NetState then holds stage "")."""
    return ",".join(str(v) for v in (values or ())).split(",")
