"""The ``ragpulse`` command, one module per subcommand; :mod:`.main` builds the parser
and dispatches."""

import gc
import os

# pydantic looks for its plug-ins by reading the entry points of every installed
# distribution when the first model is built: 20-30 ms of each command's start-up, for
# plug-ins that would only observe ragpulse's own settings and records. The command skips
# that search unless the variable is set (set it empty to load pydantic plug-ins).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

# Importing what the commands need makes a few hundred thousand objects and next to no
# garbage: collecting as they are made (some 60 collections) costs 10-15 ms of each
# command's start-up. They live as long as the process, so they are frozen out of every
# later collection instead.
_collecting = gc.isenabled()
gc.disable()
try:
    from ragpulse.cli.main import build_parser, main
finally:
    if _collecting:
        gc.freeze()
        gc.enable()

__all__ = ["build_parser", "main"]
