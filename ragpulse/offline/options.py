"""Typed options of the offline commands, built by the CLI from its flags.

So that the harness and the judge's calibration run from Python as from the command line
(no ``argparse``), and the flags' defaults are these: the CLI imports this module to build
its parser, so it imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONCURRENCY = 8
"""Calls to the user's functions in flight at once (``--concurrency``)."""
BATCH_SIZE = 256
"""Rows scored together, then written to the output (``--batch-size``)."""


@dataclass(frozen=True)
class HarnessOptions:
    """One harness run (``ragpulse eval INPUT -o OUTPUT --generator ...``), flag by flag.

    ``generator`` and ``retriever`` are ``module:function``
    (:mod:`ragpulse.function_loader`); ``conditions`` default to all six
    (:data:`ragpulse.offline.conditions.CONDITIONS`); ``max_drop`` holds gate items in the
    ``--max-drop`` grammar (:mod:`ragpulse.offline.gates`). Checked by
    :func:`ragpulse.offline.harness.run`, which says what is wrong (exit 2) before any call.
    """

    input: Path
    output: Path
    generator: str
    retriever: str | None = None
    conditions: tuple[str, ...] | None = None
    metrics: tuple[str, ...] | None = None
    seed: int = 0
    concurrency: int = CONCURRENCY
    timeout_s: float = 120.0
    batch_size: int = BATCH_SIZE
    slice_by: tuple[str, ...] | None = None
    baseline: Path | None = None
    max_drop: tuple[str, ...] = ()
    report_dir: Path | None = None
    html: bool = False
    export: bool = False
    """Let the app export its spans as its own settings say (``--export``); else its export
    is off unless ``RAGPULSE_EXPORTER`` is set (:func:`ragpulse.offline.calls.app_export`)."""


CALIBRATION_MAX_DROP = 0.05
"""How far a calibration figure may fall against its baseline (``judge calibrate``)."""


@dataclass(frozen=True)
class CalibrateOptions:
    """One ``ragpulse judge calibrate`` run, flag by flag (:mod:`ragpulse.offline.calibrate`).

    ``metrics`` default to every calibrated metric; ``max_drop`` needs ``baseline`` and
    defaults there to :data:`CALIBRATION_MAX_DROP`; prices are per 1M tokens.
    """

    metrics: tuple[str, ...] | None = None
    limit: int | None = None
    out: Path | None = None
    baseline: Path | None = None
    max_drop: float | None = None
    price_in: float | None = None
    price_out: float | None = None
