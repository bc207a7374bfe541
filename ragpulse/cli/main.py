"""The ``ragpulse`` command: the parser, one subcommand per module, and the dispatch.

Every ``serve`` flag is also a config-file key and a ``RAGPULSE_*`` environment
variable (flag > env > file > default); see :mod:`ragpulse.config`.
"""

from __future__ import annotations

import argparse
import logging
import warnings

from rich.text import Text

from ragpulse import __version__
from ragpulse.cli import config, demo, eval, judge, regression, serve
from ragpulse.cli.common import QUIET_BELOW_DEBUG, console, log_level_flag, stdout
from ragpulse.errors import ConfigError, PortUnavailable, RagpulseDeprecationWarning


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragpulse", description="Evaluate live RAG traffic from its OpenTelemetry traces."
    )
    log_level_flag(parser, "INFO")
    parser.add_argument("--version", action="version", version=f"ragpulse {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    log_level_flag(common, None)
    sub = parser.add_subparsers(dest="command", required=True)
    serve.add_parsers(sub, common)
    eval.add_parser(sub, common)
    regression.add_parser(sub, common)
    judge.add_parser(sub, common)
    config.add_parsers(sub, common)
    demo.add_parser(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    # A plug-in or settings file written against an earlier release: say what to rename
    # (Python hides deprecation warnings outside __main__ by default).
    warnings.simplefilter("default", RagpulseDeprecationWarning)
    args = build_parser().parse_args(argv)
    level = logging.getLevelName(args.log_level)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if level > logging.DEBUG:
        for name in QUIET_BELOW_DEBUG:
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        if args.command == "serve":
            return serve.run_serve(args)
        if args.command == "rekey":
            return serve.run_rekey(args)
        if args.command == "eval":
            return eval.evaluate_file(args)
        if args.command == "regression":
            return regression.run(args)
        if args.command == "judge":
            return judge.run(args)
        if args.command == "demo":
            return demo.run_demo(args, console)
        if args.command == "config":
            return config.config_command(args, stdout())
        if args.command == "metrics":
            return config.metrics_command(stdout())
    except ConfigError as exc:
        # One line (no wrapping, no markup: messages quote names and brackets as they are).
        label = "error: " if isinstance(exc, PortUnavailable) else "configuration error: "
        console.print(Text.assemble((label, "red"), str(exc)), soft_wrap=True)
        return 2
    return 1
