"""Shared pieces of the tools: gflags-style flag spellings on click commands.

Tools raise CaffeError; the caffecli group prints it as one line and exits 1."""
import click

from ..cli import gflags


class GflagsCommand(click.Command):
    """A click command that also takes gflags spellings (cli/gflags.py): ``-flag``,
    ``-flag=v``, ``--boolflag=true|false`` and ``--noboolflag``."""

    def parse_args(self, ctx, args):
        bools = {p.name for p in self.params
                 if isinstance(p, click.Option) and p.is_flag}
        out = []
        for tok in args:
            name, value = gflags.split_flag(tok)
            if name is None or not name.isidentifier():     # a value such as -1
                out.append(tok)
                continue
            if name in bools and value is not None:
                tok = ("--" if gflags.parse_bool(name, value) else "--no") + name
            elif name.startswith("no") and name[2:] in bools and value is None:
                tok = "--no" + name[2:]
            elif not tok.startswith("--"):
                tok = "-" + tok                 # -flag[=v] -> --flag[=v]
            out.append(tok)
        return super().parse_args(ctx, out)


def bool_flag(name, help_text):
    """A gflags boolean: ``--name`` / ``--noname`` (and ``--name=false`` via GflagsCommand)."""
    return click.option("--%s/--no%s" % (name, name), name, default=False, help=help_text)
