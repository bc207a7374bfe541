"""The ``ragpulse`` command, one module per subcommand; :mod:`.main` builds the parser
and dispatches."""

import os

# pydantic looks for its plug-ins by reading the entry points of every installed
# distribution when the first model is built: 20-30 ms of each command's start-up, for
# plug-ins that would only observe ragpulse's own settings and records. The command skips
# that search unless the variable is set (set it empty to load pydantic plug-ins).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

from ragpulse.cli.main import build_parser, main

__all__ = ["build_parser", "main"]
