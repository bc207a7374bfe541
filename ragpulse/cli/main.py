"""The ``ragpulse`` command: the parser, one subcommand per module, and the dispatch.

Every ``serve`` flag is also a config-file key and a ``RAGPULSE_*`` environment
variable (flag > env > file > default); see :mod:`ragpulse.config`.
"""

from __future__ import annotations

import argparse
import logging
from typing import NoReturn

from rich.text import Text

from ragpulse import __version__
from ragpulse.cli import config, demo, eval, judge, metrics, regression, serve
from ragpulse.cli.common import QUIET_BELOW_DEBUG, console, log_level_flag, stdout
from ragpulse.errors import ConfigError, PortUnavailable


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
    metrics.add_parser(sub, common)
    demo.add_parser(sub, common)
    return parser


def _refuse_unknown(
    parser: argparse.ArgumentParser, args: argparse.Namespace, unknown: list[str]
) -> NoReturn:
    """argparse's refusal of flags no parser knows, by the subcommand they were given to,
    with the closest flag it has: ``unrecognized arguments: --metrics-prt 9000 (did you
    mean --metrics-port?)``. Exits 2, as argparse does."""
    from ragpulse.suggestions import did_you_mean

    current = parser
    found = True
    while found:  # down to the subcommand the line named (``config check``)
        found = False
        for action in current._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None) or "")
                if chosen is not None:
                    current, found = chosen, True
                    break
    flags = [flag for action in current._actions for flag in action.option_strings]
    hints = [
        did_you_mean(word.split("=", 1)[0], flags) for word in unknown if word.startswith("--")
    ]
    current.error(f"unrecognized arguments: {' '.join(unknown)}{''.join(h for h in hints if h)}")


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:
        _refuse_unknown(parser, args, unknown)
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
            return metrics.run(args, stdout())
    except ConfigError as exc:
        # One line (no wrapping, no markup: messages quote names and brackets as they are).
        label = "error: " if isinstance(exc, PortUnavailable) else "configuration error: "
        console.print(Text.assemble((label, "red"), str(exc)), soft_wrap=True)
        return 2
    return 1
