"""The ``ragpulse`` command, one module per subcommand; :mod:`.main` builds the parser
and dispatches.

Every command needs the ``collector`` extra; without it (``pip install ragpulse`` is the
SDK an app imports) the command says the one line that installs it, and exits 2.
"""

import argparse
import gc
import os
import sys

from ragpulse import extras

# pydantic looks for its plug-ins by reading the entry points of every installed
# distribution when the first model is built: 20-30 ms of each command's start-up, for
# plug-ins that would only observe ragpulse's own settings and records. The command skips
# that search unless the variable is set (set it empty to load pydantic plug-ins).
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

_ABSENT = extras.missing("collector")

if _ABSENT:

    def main(argv: list[str] | None = None) -> int:
        """Says which extra the command needs and how to install it; exit status 2."""
        args = sys.argv[1:] if argv is None else argv
        command = next((a for a in args if not a.startswith("-")), "")
        what = f"ragpulse {command}".strip()
        print(extras.needs("collector", what, _ABSENT), file=sys.stderr)
        return 2

    def build_parser() -> argparse.ArgumentParser:
        raise extras.MissingExtra(extras.needs("collector", "the ragpulse command", _ABSENT))

else:
    # Importing what the commands need makes a few hundred thousand objects and next to
    # no garbage: collecting as they are made (some 60 collections) costs 10-15 ms of each
    # command's start-up. They live as long as the process, so they are frozen out of
    # every later collection instead.
    _collecting = gc.isenabled()
    gc.disable()
    try:
        from ragpulse.cli.main import build_parser, main
    finally:
        if _collecting:
            gc.freeze()
            gc.enable()

__all__ = ["build_parser", "main"]
