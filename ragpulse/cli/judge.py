"""``ragpulse judge calibrate``: the configured judge against the shipped labels
(:mod:`ragpulse.offline.calibrate`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ragpulse.cli.common import console, evaluation_overrides, judge_flags, load_settings, stdout
from ragpulse.config import Settings
from ragpulse.offline.options import CalibrateOptions


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """``judge calibrate`` (ragpulse/calibrate.py): the configured judge against labels."""
    from ragpulse.offline.calibrate_flags import add_arguments

    judge = sub.add_parser("judge", parents=[common], help="check the configured LLM judge")
    judge_sub = judge.add_subparsers(dest="judge_command", required=True)
    calibrate = judge_sub.add_parser(
        "calibrate",
        parents=[common],
        help="agreement of the judge with the shipped labelled calibration set",
        description="Run the configured judge over the shipped calibration set and report "
        "AUROC, balanced accuracy, confusion counts, calls, tokens, latency and cost per "
        "metric. --out writes a baseline; --baseline FILE --max-drop D exits 1 when a figure "
        "fell by more than D. Exit 2: a usage problem (bad or missing baseline), before any "
        "call.",
    )
    add_arguments(calibrate)
    calibrate.add_argument(
        "--config", type=Path, help="settings file: evaluation.judge, evaluation.options"
    )
    judge_flags(calibrate, online=False)


def run(args: argparse.Namespace) -> int:
    from ragpulse.offline.calibrate import command

    def judge_settings() -> Settings:
        return load_settings(args.config, evaluation=evaluation_overrides(args))

    return command(calibrate_options(args), judge_settings, stdout(), console)


def calibrate_options(args: argparse.Namespace) -> CalibrateOptions:
    """``judge calibrate``'s options from its flags."""
    return CalibrateOptions(
        metrics=None if args.metrics is None else tuple(args.metrics),
        limit=args.limit,
        out=args.out,
        baseline=args.baseline,
        max_drop=args.max_drop,
        price_in=args.price_in,
        price_out=args.price_out,
    )
