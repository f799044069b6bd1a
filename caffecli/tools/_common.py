"""Shared pieces of the converter tools: gflags-style flag parsing and a progress bar.

Tools raise CaffeError; the caffecli group prints it as one line and exits 1."""
import re
import sys

import click


_SINGLE = re.compile(r"^-([A-Za-z_][A-Za-z0-9_]*)(=.*)?$")
_TRUE = {"true", "t", "yes", "y", "1"}
_FALSE = {"false", "f", "no", "n", "0"}


class GflagsCommand(click.Command):
    """A click command that also takes gflags spellings: ``-flag``, ``-flag=v``,
    ``--boolflag=true|false`` and ``--noboolflag``."""

    def parse_args(self, ctx, args):
        bools = {p.name for p in self.params
                 if isinstance(p, click.Option) and p.is_flag}
        out = []
        for tok in args:
            m = _SINGLE.match(tok)
            if m:
                tok = "--" + m.group(1) + (m.group(2) or "")
            if tok.startswith("--"):
                name, eq, value = tok[2:].partition("=")
                if name in bools and eq:
                    v = value.lower()
                    if v not in _TRUE | _FALSE:
                        raise click.UsageError("flag --%s takes true or false, got %r"
                                               % (name, value))
                    tok = "--" + name if v in _TRUE else "--no" + name
                elif name.startswith("no") and name[2:] in bools and not eq:
                    tok = "--no" + name[2:]
            out.append(tok)
        return super().parse_args(ctx, out)


def bool_flag(name, help_text):
    """A gflags boolean: ``--name`` / ``--noname`` (and ``--name=false`` via GflagsCommand)."""
    return click.option("--%s/--no%s" % (name, name), name, default=False, help=help_text)


def progress(total, desc):
    """A tqdm bar on stderr when it is a terminal, else a no-op object with update/close."""
    if sys.stderr.isatty():
        try:
            from tqdm import tqdm
            return tqdm(total=total, desc=desc, file=sys.stderr, leave=False)
        except ImportError:
            pass
    return _NoBar()


class _NoBar:
    def update(self, n=1):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
