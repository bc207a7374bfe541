"""``ragpulse regression list``: the regression sets written from live traffic."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from ragpulse.cli.common import console, load_settings, stdout


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    reg = sub.add_parser(
        "regression",
        parents=[common],
        help="inspect regression sets written from live traffic",
        description="Regression sets are written by `ragpulse serve` when "
        "sinks.regression.directory is set; replay one with "
        "`ragpulse eval SET.jsonl -o OUT.jsonl --replay module:function`.",
    )
    reg_sub = reg.add_subparsers(dest="regression_command", required=True)
    reg_list = reg_sub.add_parser(
        "list", parents=[common], help="files, lines, bytes and time span of every set"
    )
    where = reg_list.add_mutually_exclusive_group()
    where.add_argument("--dir", type=Path, help="the regression directory")
    where.add_argument(
        "--config",
        type=Path,
        help="settings file naming sinks.regression.directory (env RAGPULSE_CONFIG, or "
        "RAGPULSE_SINKS__REGRESSION__DIRECTORY for the folder itself)",
    )


def run(args: argparse.Namespace) -> int:
    from ragpulse.exporters.regression import RegressionSink, describe_rule, set_stats

    options: RegressionSink.Options | None = None
    directory = args.dir
    if directory is None:
        found = RegressionSink.options_from(load_settings(args.config))
        assert isinstance(found, RegressionSink.Options)
        options, directory = found, found.directory
    if directory is None:
        console.print(
            "[red]no regression directory:[/red] pass --dir, or --config with "
            "sinks.regression.directory (or set RAGPULSE_SINKS__REGRESSION__DIRECTORY)"
        )
        return 2
    if not directory.is_dir():
        console.print(f"[red]no such directory:[/red] {directory}")
        return 2
    stats = set_stats(directory)
    rules = options.sets if options is not None else {}
    table = Table(title=f"regression sets in {directory}")
    header = ["set", "files", "lines", "bytes", "first written_at", "last written_at"]
    header += ["rule"] if rules else []
    for col in header:
        table.add_column(col, justify="right" if col in ("files", "lines", "bytes") else "left")
    for s in stats:
        row = [s.name, str(s.files), str(s.lines), str(s.bytes)]
        row += [s.first_written_at or "-", s.last_written_at or "-"]
        if rules:
            row.append(describe_rule(rules[s.name]) if s.name in rules else "-")
        table.add_row(*row)
    out = stdout()
    out.print(table)
    if not stats:
        out.print("no sets yet")
    return 0
