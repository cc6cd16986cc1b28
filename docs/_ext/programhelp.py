"""The ``program-help`` directive: a command's own ``--help``, taken at build time.

``{program-help} stalkd`` (or ``twistd-beanstalk``, ``stalk``) inserts the help text
the installed code prints, so the reference page lists every option the program
has, in its own words, without a copy to keep in step.  The text is taken in
process (no subprocess): the option tables are read where they are defined.
"""
import argparse
import os
from typing import Callable, Dict, List

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def stalkd_help() -> str:
    from twisted_stalk.stalkd import USAGE
    return USAGE


def twistd_help() -> str:
    from twisted_stalk.tap import Options
    options = Options()
    text = str(options)
    return "Usage: twistd [options] beanstalk [options]\n" + text.split("\n", 1)[1]


def stalk_help() -> str:
    from twisted_stalk_cli.shell.main import build_parser
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "88"
    try:
        parser: argparse.ArgumentParser = build_parser()
        parser.prog = "stalk"
        return parser.format_help()
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


PROGRAMS: Dict[str, Callable[[], str]] = {
    "stalkd": stalkd_help,
    "twistd-beanstalk": twistd_help,
    "stalk": stalk_help,
}


class ProgramHelp(SphinxDirective):
    """Insert a program's ``--help`` as a literal block."""

    required_arguments = 1

    def run(self) -> List[nodes.Node]:
        name = self.arguments[0]
        if name not in PROGRAMS:
            raise self.error(f"program-help: unknown program {name!r} "
                             f"(one of {', '.join(sorted(PROGRAMS))})")
        text = PROGRAMS[name]().rstrip("\n")
        block = nodes.literal_block(text, text)
        block["language"] = "text"
        return [block]


def setup(app):
    app.add_directive("program-help", ProgramHelp)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
