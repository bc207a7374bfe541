"""The flags of ``ragpulse judge calibrate`` and the metrics it calibrates.

Apart from :mod:`ragpulse.offline.calibrate` so that building the command line, which
every ``ragpulse`` command does, does not import that module and build its models.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ragpulse.offline.options import CALIBRATION_MAX_DROP

METRICS = ("faithfulness", "context_relevance", "answer_relevance", "injection")
"""The judged metrics, each ``<metric>/llm_judge`` with ``<metric>.jsonl`` in the set."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """``judge calibrate``'s own flags (the judge flags and --config come from cli.py)."""
    parser.add_argument(
        "--metrics",
        type=lambda v: [m.strip() for m in v.split(",") if m.strip()],
        help=f"comma-separated subset of {', '.join(METRICS)} (default: all)",
    )
    parser.add_argument(
        "--limit",
        type=int,
        help="the first N rows of each metric's slice (balanced: labels alternate); "
        "default all (24 per metric)",
    )
    parser.add_argument("--out", type=Path, help="write the figures as a JSON baseline here")
    parser.add_argument(
        "--baseline", type=Path, help="compare with this baseline (written earlier by --out)"
    )
    parser.add_argument(
        "--max-drop",
        type=float,
        help="with --baseline: fail (exit 1) when a metric's AUROC, balanced accuracy or "
        f"coverage (judged share) fell by more than this (default {CALIBRATION_MAX_DROP:g})",
    )
    parser.add_argument("--price-in", type=float, help="price per 1M prompt tokens (for cost)")
    parser.add_argument("--price-out", type=float, help="price per 1M completion tokens (for cost)")
