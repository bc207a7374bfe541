"""The ``ragpulse`` command, one module per subcommand; :mod:`.main` builds the parser
and dispatches."""

from ragpulse.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
