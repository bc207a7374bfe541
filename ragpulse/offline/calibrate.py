"""``ragpulse judge calibrate``: how well the configured LLM judge agrees with labelled rows.

Runs the product's own judge evaluators (``<metric>/llm_judge``, with the same
settings, options and prompts as ``ragpulse eval``) over the shipped calibration
set (ragpulse/calibration_data, pinned by MANIFEST.json) and reports, per metric:
AUROC, balanced accuracy at the product's pass/fail threshold, confusion counts,
rows left unjudged and why, calls, tokens, latency and, given prices, cost.
``--out`` writes the figures as a JSON baseline; ``--baseline`` with
``--max-drop`` compares a new run against one (a model or prompt change) and
fails when a figure dropped by more than allowed.

Exit codes (as ``ragpulse eval``'s gates): 0 done, no gate exceeded; 1 a figure
dropped past ``--max-drop`` or a metric got no judged row at all; 2 a usage
problem found before any judge call (no judge configured, missing or corrupt
baseline, a baseline of another set or ``--limit``, a modified calibration file);
128 + the signal when interrupted.
"""

from __future__ import annotations

import hashlib
import json
import math
import signal
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import closing
from datetime import UTC, datetime
from importlib import metadata, resources
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from ragpulse.config import Settings
from ragpulse.errors import RagpulseError
from ragpulse.offline.calibrate_flags import METRICS
from ragpulse.offline.options import CALIBRATION_MAX_DROP, CalibrateOptions
from ragpulse.record import Document, EvalResult, RagRecord

if TYPE_CHECKING:
    from prometheus_client import CollectorRegistry


THRESHOLD = 0.5
"""The product's pass/fail line, as the Prometheus failure ratio draws it
(deploy/prometheus/recording.rules.yaml): a quality <= 0.5 fails, a risk > 0.5 is
flagged. Every calibration label is 1 on the score's high side (faithful, relevant,
injection), so one rule predicts every metric's positive: score > THRESHOLD."""

GATED = ("auroc", "balanced_accuracy", "coverage")


class CalibrationError(RagpulseError):
    """A problem found before any judge call (exit 2); the message says the fix."""


class CalibrationRow(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    source: str
    label: Literal[0, 1]
    question: str = ""
    contexts: list[str] = Field(default_factory=list)
    answer: str = ""
    where: Literal["question", "document"] | None = None

    def record(self) -> RagRecord:
        return RagRecord(
            trace_id=self.id,
            question=self.question,
            documents=[Document(content=c) for c in self.contexts],
            answer=self.answer,
        )


class MetricFigures(BaseModel):
    """One metric's agreement with the labels and what it cost."""

    evaluator: str
    rows: int
    judged: int = Field(description="rows that got a score")
    unjudged: dict[str, int] = Field(description="by reason: error:<reason>, skipped, ...")
    coverage: float = Field(description="judged / rows")
    auroc: float | None = Field(description="over judged rows; None with one class only")
    balanced_accuracy: float | None
    tp: int
    fp: int
    tn: int
    fn: int
    prompts: list[str] = Field(description="prompt ids@versions the results name")
    calls: int
    prompt_tokens: int
    completion_tokens: int
    latency_p50_s: float | None = Field(description="per chat completion, retries included")
    latency_p95_s: float | None
    cost: float | None = Field(None, description="with --price-in/--price-out")
    cost_per_1000_records: float | None = None


class Calibration(BaseModel):
    """The baseline file: which judge, which set, which figures. Never a secret."""

    kind: Literal["ragpulse.judge_calibration"] = "ragpulse.judge_calibration"
    schema_version: Literal[1] = 1
    ragpulse_version: str
    created: datetime
    judge_model: str
    judge_host: str = Field(description="host[:port] of the base URL only")
    calibration_set: str = Field(description="MANIFEST.json version")
    limit: int | None
    threshold: float
    concurrency: int
    price_in: float | None = Field(None, description="per 1M prompt tokens")
    price_out: float | None = Field(None, description="per 1M completion tokens")
    metrics: dict[str, MetricFigures]


# -- the set -----------------------------------------------------------------------------


def _data() -> resources.abc.Traversable:
    return resources.files("ragpulse") / "calibration_data"


def set_version() -> str:
    return str(_manifest()["version"])


def _manifest() -> dict[str, object]:
    try:
        manifest = json.loads((_data() / "MANIFEST.json").read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CalibrationError(f"the calibration set's MANIFEST.json is unreadable: {exc}") from exc
    if not isinstance(manifest, dict):
        raise CalibrationError("the calibration set's MANIFEST.json is not an object")
    return manifest


def load_set(metric: str, limit: int | None = None) -> list[CalibrationRow]:
    """The first ``limit`` rows (balanced: the file alternates labels) of a metric's file,
    after checking the file is the one MANIFEST.json pins."""
    files = _manifest().get("files")
    pinned = files.get(f"{metric}.jsonl") if isinstance(files, dict) else None
    if not isinstance(pinned, dict):
        raise CalibrationError(f"the calibration set has no file for {metric}")
    data = (_data() / f"{metric}.jsonl").read_bytes()
    if hashlib.sha256(data).hexdigest() != pinned.get("sha256"):
        raise CalibrationError(
            f"calibration_data/{metric}.jsonl differs from the SHA-256 MANIFEST.json pins: "
            "reinstall ragpulse (or rebuild the set with bench/calibration_set.py)"
        )
    rows = [CalibrationRow.model_validate_json(line) for line in data.decode().splitlines()]
    return rows[:limit] if limit is not None else rows


# -- figures -----------------------------------------------------------------------------


def auroc(scores: Sequence[float], labels: Sequence[int]) -> float | None:
    """P(a positive outscores a negative), ties counted half; None without both classes.

    Pairwise (O(n^2)): calibration slices are tens of rows, and this form is the
    definition itself (bench/injection_dev.py computes it the same way).
    """
    pos = [s for s, y in zip(scores, labels, strict=True) if y == 1]
    neg = [s for s, y in zip(scores, labels, strict=True) if y == 0]
    if not pos or not neg:
        return None
    wins = sum((p > n) + 0.5 * (p == n) for p in pos for n in neg)
    return wins / (len(pos) * len(neg))


def percentile(values: Sequence[float], q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def unjudged_reason(result: EvalResult) -> str | None:
    """None for a scored result, else a bounded reason (error:<reason>, skipped, ...)."""
    if result.score is not None and not result.error:
        return None
    label = result.label or "error"
    return label if label != "error" else "error:evaluator"


def figures(
    evaluator: str,
    rows: Sequence[CalibrationRow],
    results: Sequence[EvalResult],
    latencies: Sequence[float],
    usage: tuple[int, int, int],
    prices: tuple[float | None, float | None],
) -> MetricFigures:
    scored = [
        (r.score, row.label)
        for r, row in zip(results, rows, strict=True)
        if unjudged_reason(r) is None and r.score is not None
    ]
    unjudged = Counter(
        reason for r in results if (reason := unjudged_reason(r)) is not None
    )  # fmt: skip
    pred = [(s > THRESHOLD, y == 1) for s, y in scored]
    tp = sum(p and y for p, y in pred)
    fp = sum(p and not y for p, y in pred)
    tn = sum(not p and not y for p, y in pred)
    fn = sum(not p and y for p, y in pred)
    balanced = (tp / (tp + fn) + tn / (tn + fp)) / 2 if tp + fn and tn + fp else None
    calls, prompt_tokens, completion_tokens = usage
    price_in, price_out = prices
    cost = None
    if price_in is not None or price_out is not None:
        cost = (prompt_tokens * (price_in or 0.0) + completion_tokens * (price_out or 0.0)) / 1e6
    prompts = sorted({p for r in results for p in r.details.get("prompts", [])})
    return MetricFigures(
        evaluator=evaluator,
        rows=len(rows),
        judged=len(scored),
        unjudged=dict(sorted(unjudged.items())),
        coverage=len(scored) / len(rows) if rows else 0.0,
        auroc=auroc([s for s, _ in scored], [y for _, y in scored]),
        balanced_accuracy=balanced,
        tp=tp,
        fp=fp,
        tn=tn,
        fn=fn,
        prompts=prompts,
        calls=calls,
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        latency_p50_s=percentile(latencies, 50),
        latency_p95_s=percentile(latencies, 95),
        cost=cost,
        cost_per_1000_records=cost / len(rows) * 1000 if cost is not None and rows else None,
    )


# -- running -----------------------------------------------------------------------------


def judge_host(base_url: str | None) -> str:
    """host[:port]: no scheme, credentials, path or query can carry a secret into a file."""
    parts = urlsplit(str(base_url or ""))
    host = parts.hostname or ""
    return f"{host}:{parts.port}" if parts.port else host


def _sample_total(registry: CollectorRegistry, name: str, **labels: str) -> int:
    """A sample's total over the label sets matching ``labels`` (the judge's own series)."""
    total = 0.0
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return int(total)


def _usage(registry: CollectorRegistry) -> tuple[int, int, int]:
    """Judge calls, prompt and completion tokens so far, from the client's own series:
    failed calls and repair calls count too, which the results alone would miss (one
    latency observation per chat completion the client asked for)."""
    return (
        _sample_total(registry, "ragpulse_judge_latency_seconds_count"),
        _sample_total(registry, "ragpulse_judge_tokens_total", kind="prompt"),
        _sample_total(registry, "ragpulse_judge_tokens_total", kind="completion"),
    )


class _CallTimes:
    """Stands in for the client's latency histogram: forwards every observation and keeps
    it, so percentiles are exact per chat completion. Timing whole rows instead would
    count the budget's waits (60 calls a minute by default) as judge latency."""

    def __init__(self, histogram: Any) -> None:
        self.histogram = histogram
        self.seconds: list[float] = []

    def labels(self, *labels: str) -> _CallTimes._Child:
        return _CallTimes._Child(self, self.histogram.labels(*labels))

    class _Child:
        def __init__(self, parent: _CallTimes, child: Any) -> None:
            self.parent, self.child = parent, child

        def observe(self, seconds: float) -> None:
            self.parent.seconds.append(seconds)  # on the client's one loop thread
            self.child.observe(seconds)


def run(
    settings: Settings,
    metrics: Sequence[str],
    limit: int | None,
    prices: tuple[float | None, float | None],
    advance: Callable[[str, int], None] = lambda metric, rows: None,
    notify: Callable[[str], None] = lambda message: None,
) -> Calibration:
    """Judge every row of each metric's slice with the configured judge; the figures.

    The judge cache is forced to memory (a fresh one): a shared redis cache would answer
    from earlier runs and measure nothing.
    """
    from ragpulse.evaluation import evaluate_records, load_evaluators_safely
    from ragpulse.plugin_context import PluginContext
    from ragpulse.plugins import load_evaluators

    judge = settings.evaluation.judge
    if not judge.configured:
        raise CalibrationError(
            "no LLM judge configured: set --judge-base-url and --judge-model (or "
            "RAGPULSE_JUDGE_BASE_URL and RAGPULSE_JUDGE_MODEL, or evaluation.judge in --config)"
        )
    judge = judge.model_copy(update={"cache": "memory"})
    evaluation = settings.evaluation.model_copy(update={"judge": judge})
    settings = settings.model_copy(update={"evaluation": evaluation})
    slices = {m: load_set(m, limit) for m in metrics}
    out: dict[str, MetricFigures] = {}
    context = PluginContext(settings, offline=True, notify=notify)
    registry = context.metrics.registry
    times = _CallTimes(context.metrics.judge.latency)
    cast(Any, context.metrics.judge).latency = times
    with closing(context):
        for metric in metrics:
            name = f"{metric}/llm_judge"
            evaluators = load_evaluators_safely(load_evaluators([name], evaluation), context)
            if not evaluators:
                raise CalibrationError(f"{name} cannot run (see the error above)")
            rows = slices[metric]
            before = _usage(registry)

            results: list[EvalResult] = []
            times.seconds = []
            # Batches through the product's path, as `ragpulse eval` runs them: the evaluator
            # judges a batch's rows concurrently (judge.concurrency at a time) on the client's
            # loop while this thread waits, so Ctrl-C interrupts it as it does eval.
            step = 2 * judge.concurrency
            for start in range(0, len(rows), step):
                batch = [row.record() for row in rows[start : start + step]]
                results += [r for [r] in evaluate_records(batch, evaluators)]
                advance(metric, len(batch))
            after = _usage(registry)
            used = (after[0] - before[0], after[1] - before[1], after[2] - before[2])
            out[metric] = figures(name, rows, results, times.seconds, used, prices)
    return Calibration(
        ragpulse_version=_version(),
        created=datetime.now(UTC),
        judge_model=str(judge.model),
        judge_host=judge_host(judge.base_url),
        calibration_set=set_version(),
        limit=limit,
        threshold=THRESHOLD,
        concurrency=judge.concurrency,
        price_in=prices[0],
        price_out=prices[1],
        metrics=out,
    )


def _version() -> str:
    try:
        return metadata.version("ragpulse")
    except metadata.PackageNotFoundError:
        return "unknown"


# -- baselines and the drift gate --------------------------------------------------------


def load_baseline(path: Path) -> Calibration:
    """The baseline at ``path``; every problem is one :class:`CalibrationError` line."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CalibrationError(
            f"baseline {path} does not exist (write one with --out {path})"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CalibrationError(f"baseline {path} cannot be read: {exc}") from None
    try:
        return Calibration.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the file"
        raise CalibrationError(
            f"baseline {path} is not a ragpulse judge calibration ({where}: {first['msg']}); "
            "write a new one with --out"
        ) from None


def check_comparable(baseline: Calibration, limit: int | None, path: Path) -> None:
    """Figures of another set or another slice of it are not comparable: refuse early."""
    if baseline.calibration_set != set_version():
        raise CalibrationError(
            f"baseline {path} was made on calibration set {baseline.calibration_set}, this "
            f"ragpulse ships {set_version()}: make a new baseline with --out"
        )
    if baseline.limit != limit:
        raise CalibrationError(
            f"baseline {path} was made with --limit {baseline.limit}, this run has --limit "
            f"{limit}: use the same --limit"
        )


def drops(current: Calibration, baseline: Calibration, max_drop: float) -> list[str]:
    """One line per gated figure that fell by more than ``max_drop`` (or became undefined)."""
    out = []
    for metric, now in current.metrics.items():
        before = baseline.metrics.get(metric)
        if before is None:
            continue
        for figure in GATED:
            old, new = getattr(before, figure), getattr(now, figure)
            if old is None:
                continue
            if new is None:
                out.append(f"{metric} {figure}: {old:.3f} -> undefined (one class judged)")
            elif old - new > max_drop + 1e-12:
                out.append(f"{metric} {figure}: {old:.3f} -> {new:.3f} (-{old - new:.3f})")
    return out


def changes(current: Calibration, baseline: Calibration) -> list[str]:
    """What differs between the runs besides the figures: the usual causes of a drop."""
    notes = []
    if current.judge_model != baseline.judge_model or current.judge_host != baseline.judge_host:
        notes.append(
            f"judge: {baseline.judge_model} at {baseline.judge_host} -> "
            f"{current.judge_model} at {current.judge_host}"
        )
    for metric, now in current.metrics.items():
        before = baseline.metrics.get(metric)
        if before is None:
            notes.append(f"{metric}: not in the baseline, not gated")
        elif before.prompts and now.prompts and before.prompts != now.prompts:
            notes.append(
                f"{metric} prompts: {', '.join(before.prompts)} -> {', '.join(now.prompts)}"
            )
    return notes


# -- output ------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def table(calibration: Calibration, baseline: Calibration | None = None) -> Table:
    title = (
        f"judge {calibration.judge_model} at {calibration.judge_host} on calibration set "
        f"{calibration.calibration_set} (pass/fail at score > {calibration.threshold:g})"
    )
    t = Table(title=title)
    for column in ("metric", "rows", "judged", "unjudged", "AUROC", "bal. acc.", "TP/FP/TN/FN",
                   "calls", "tokens in/out", "p50 s", "p95 s", "cost", "cost/1k rec"):  # fmt: skip
        t.add_column(column, justify="left" if column in ("metric", "unjudged") else "right")
    for metric, m in calibration.metrics.items():
        old = baseline.metrics.get(metric) if baseline else None

        def gated(figure: str, m: MetricFigures = m, old: MetricFigures | None = old) -> str:
            new = getattr(m, figure)
            if old is None or getattr(old, figure) is None:
                return _f(new)
            return f"{_f(new)} ({_f(getattr(old, figure))})"

        t.add_row(
            metric,
            str(m.rows),
            str(m.judged),
            ", ".join(f"{k} {v}" for k, v in m.unjudged.items()) or "-",
            gated("auroc"),
            gated("balanced_accuracy"),
            f"{m.tp}/{m.fp}/{m.tn}/{m.fn}",
            str(m.calls),
            f"{m.prompt_tokens}/{m.completion_tokens}",
            _f(m.latency_p50_s, 2),
            _f(m.latency_p95_s, 2),
            _f(m.cost, 4),
            _f(m.cost_per_1000_records, 2),
        )
    if baseline is not None:
        t.caption = "(baseline figures in brackets)"
    return t


# -- the command -------------------------------------------------------------------------


def command(
    options: CalibrateOptions,
    load: Callable[[], Settings],
    stdout: Console,
    stderr: Console,
) -> int:
    """The body of ``ragpulse judge calibrate``; exit codes as the module says."""
    try:
        return _command(options, load, stdout, stderr)
    except CalibrationError as exc:
        stderr.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
        return 2
    except KeyboardInterrupt:
        stderr.print("[red]interrupted:[/red] nothing written")
        return 128 + signal.SIGINT


def _command(
    options: CalibrateOptions, load: Callable[[], Settings], stdout: Console, stderr: Console
) -> int:
    metrics = list(options.metrics or METRICS)
    unknown = [m for m in metrics if m not in METRICS]
    if unknown:
        raise CalibrationError(
            f"--metrics: unknown {', '.join(unknown)} (choose from {', '.join(METRICS)})"
        )
    if options.limit is not None and options.limit < 2:
        raise CalibrationError("--limit must be at least 2 (one row of each label)")
    if options.max_drop is not None and options.baseline is None:
        raise CalibrationError("--max-drop needs --baseline")
    for flag in ("max_drop", "price_in", "price_out"):
        value = getattr(options, flag)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise CalibrationError(f"--{flag.replace('_', '-')} must be a number >= 0")
    baseline = None
    if options.baseline is not None:
        baseline = load_baseline(options.baseline)
        check_comparable(baseline, options.limit, options.baseline)
    settings = load()
    for metric in metrics:
        load_set(metric, options.limit)  # a modified file is refused before any call
    total = sum(len(load_set(m, options.limit)) for m in metrics)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())  # fmt: skip
    with Progress(*columns, console=stderr) as progress:
        task = progress.add_task("judging", total=total)
        calibration = run(
            settings,
            metrics,
            options.limit,
            (options.price_in, options.price_out),
            advance=lambda metric, rows: progress.update(task, advance=rows, description=metric),
            notify=lambda msg: progress.update(task, description=f"judging ({msg})"),
        )
    stdout.print(table(calibration, baseline))
    if options.out is not None:
        options.out.parent.mkdir(parents=True, exist_ok=True)
        options.out.write_text(calibration.model_dump_json(indent=1) + "\n", encoding="utf-8")
        stdout.print(f"baseline written: {options.out}", highlight=False, soft_wrap=True)
    status = 0
    blind = [m for m, f in calibration.metrics.items() if f.judged == 0]
    if blind:
        stdout.print(
            Text.assemble(("no row judged: ", "red"), ", ".join(blind), " (see unjudged)"),
            soft_wrap=True,
        )
        status = 1
    if baseline is not None:
        for note in changes(calibration, baseline):
            stdout.print(Text(note, style="yellow"), soft_wrap=True)
        max_drop = CALIBRATION_MAX_DROP if options.max_drop is None else options.max_drop
        dropped = drops(calibration, baseline, max_drop)
        for line in dropped:
            stdout.print(Text.assemble(("drift: ", "red"), line), soft_wrap=True)
        if dropped:
            status = 1
        else:
            stdout.print(f"no figure dropped by more than {max_drop:g} against {options.baseline}")
    return status
