"""Regression sets from live traffic: records that matter, one JSON line each.

Each configured set (``sinks.regression.sets``: a name and a :class:`RegressionSetRule`)
keeps the evaluated records its rule selects, in
``<directory>/<set>/<set>-<UTC timestamp>.jsonl``:

``{"set", "written_at", "reason", "sampling", "record", "results"}``

* ``reason``: why the rule kept it, e.g. ``faithfulness/lexical score 0.213 < 0.5``.
* ``sampling``: ``{tier: reason}``, why each tier evaluated it (the export item's
  ``sampled``; the record's ``attributes`` show it as ``ragpulse.sampled.<tier>``).
* ``record``: the :class:`~ragpulse.record.RagRecord` as JSON, each text up to
  ``max_text_chars`` (default ``evaluation.max_text_chars``); ``truncated`` (only when
  one was cut) gives each cut text's field and length; ``results``: its results as the
  JSONL sink writes them. A costly tier's results that arrive after
  the record was exported (an update) are checked against the rules too; a line
  written then carries the record's earlier results as well. A record rebuilt from
  more spans (a revision) is checked with its new results alone.

Every string of ``record`` and ``results`` (question, answer, documents and
their metadata, attributes, explanations, details) is redacted
(:mod:`ragpulse.redaction`: the top-level ``redaction`` section, or
``sinks.regression.redaction`` when set) before anything is written; ids are kept.

A set holds each question once: lines are deduplicated by the sha256 of the
normalized redacted question (lower case, whitespace collapsed, punctuation
stripped at the ends), so a trace delivered twice or a question asked again adds
nothing. The index is rebuilt from the set's files at start, so it survives
restarts (deleting a file forgets its questions). Files rotate before a line
would take them past ``max_bytes``, and when a line arrives after the file is
``max_age_s`` old. ``ragpulse regression list`` summarizes a directory
(:func:`set_stats`); ``ragpulse eval SET.jsonl --replay module:function``
replays a set against a changed pipeline.
"""

from __future__ import annotations

import calendar
import hashlib
import json
import logging
import re
import threading
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Literal

from pydantic import Field

from ragpulse.config import RedactionSettings, Settings
from ragpulse.errors import ConfigError
from ragpulse.exporters.base import Sink
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import Direction, EvalResult, ExportItem, ExportKind, RagRecord
from ragpulse.redaction import Redactor
from ragpulse.results import EVALUATED_CHARS, TRUNCATED, state_attributes, stored_row
from ragpulse.signals import feedback_score, trace_fraction
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)

_SET_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_STAMP = "%Y%m%dT%H%M%SZ"
PENDING_KEPT = 10_000
"""Records awaiting a costly tier whose earlier results are kept, so that a line written
for an update carries every result of its record."""


# --- Rules ------------------------------------------------------------------------------


class RegressionSetRule(PluginOptions):
    """Which evaluated records a regression set keeps."""

    kind: Literal["low_score", "label", "negative_feedback", "random"]
    metric: str | None = Field(None, description="low_score/label: the metric to look at.")
    below: float | None = Field(
        None, description="low_score: keep qualities below this (1 - risk for risks)."
    )
    label: str | None = Field(None, description="label: keep results with this label.")
    rate: float | None = Field(None, ge=0, le=1, description="random: share kept, by trace id.")


def _default_sets() -> dict[str, RegressionSetRule]:
    return {
        "low_faithfulness": RegressionSetRule(kind="low_score", metric="faithfulness", below=0.5),
        "injection": RegressionSetRule(kind="label", metric="injection", label="injection"),
        "negative_feedback": RegressionSetRule(kind="negative_feedback"),
        "baseline": RegressionSetRule(kind="random", rate=0.01),
    }


def normalize_question(question: str) -> str:
    """Lower case, whitespace collapsed, punctuation and symbols stripped at both ends."""
    text = " ".join(question.lower().split())
    start, end = 0, len(text)
    while start < end and _strippable(text[start]):
        start += 1
    while end > start and _strippable(text[end - 1]):
        end -= 1
    return text[start:end]


def _strippable(ch: str) -> bool:
    return ch.isspace() or unicodedata.category(ch)[0] in ("P", "S")


def question_key(question: str) -> bytes:
    """The dedupe key: sha256 of the normalized question."""
    return hashlib.sha256(normalize_question(question).encode("utf-8")).digest()


def check_rule(name: str, rule: RegressionSetRule) -> None:
    """Raise ConfigError when a set's name or rule cannot work."""
    if not _SET_NAME.match(name):
        raise ConfigError(
            f"regression set name {name!r} must be letters, digits, '_', '-', '.' (a file name)"
        )
    needs = {
        "low_score": ("metric", "below"),
        "label": ("metric", "label"),
        "negative_feedback": (),
        "random": ("rate",),
    }[rule.kind]
    missing = [f for f in needs if getattr(rule, f) is None]
    if missing:
        raise ConfigError(f"regression set {name!r} ({rule.kind}) needs {', '.join(missing)}")


def describe_rule(rule: RegressionSetRule) -> str:
    if rule.kind == "low_score":
        return f"{rule.metric} score < {rule.below:g}" if rule.below is not None else "low_score"
    if rule.kind == "label":
        return f"{rule.metric} label = {rule.label}"
    if rule.kind == "negative_feedback":
        return "negative user feedback"
    return f"random {100 * (rule.rate or 0):g}% of traces"


def _metric_matches(result: EvalResult, metric: str | None) -> bool:
    return metric is not None and metric in (result.metric, result.name)


def rule_reason(
    set_name: str, rule: RegressionSetRule, record: RagRecord, results: Sequence[EvalResult]
) -> str | None:
    """Why ``rule`` keeps the record (human-readable), or None when it does not.

    ``metric`` names a metric (any method) or one ``metric/method``.
    """
    if rule.kind == "low_score":
        # On the quality scale (1 - risk for lower-is-better metrics): "low" is always "bad".
        below = rule.below
        if below is None:
            return None
        for r in results:
            quality = r.quality
            low = quality is not None and quality < below
            if low and _metric_matches(r, rule.metric) and r.score is not None:
                if r.direction is Direction.HIGHER_IS_BETTER:
                    return f"{r.name} score {r.score:.3f} < {below:g}"
                return f"{r.name} risk {r.score:.3f} > {1 - below:g}"
        return None
    if rule.kind == "label":
        for r in results:
            if _metric_matches(r, rule.metric) and r.label is not None and r.label == rule.label:
                return f"{r.name} label = {r.label}"
        return None
    if rule.kind == "negative_feedback":
        score = feedback_score(record.attributes)
        return f"user feedback {score:g} < 0" if score is not None and score < 0 else None
    rate = rule.rate or 0.0
    if rate > 0 and (
        rate >= 1.0 or trace_fraction(record.trace_id, f"regression:{set_name}") < rate
    ):
        return f"random {100 * rate:g}% sample by trace id"
    return None


# --- Files -------------------------------------------------------------------------------


def set_files(set_dir: Path) -> list[Path]:
    """The set's JSONL files, oldest first (names carry the UTC start time)."""
    if not set_dir.is_dir():
        return []
    return sorted(p for p in set_dir.glob("*.jsonl") if p.is_file())


def _file_started(path: Path) -> float | None:
    stamp = path.stem.rsplit("-", 1)[-1]
    try:
        return float(calendar.timegm(time.strptime(stamp, _STAMP)))
    except ValueError:
        return None


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class _OpenFile:
    path: Path
    started: float
    size: int
    handle: IO[str]


class RegressionSink(Sink["RegressionSink.Options"]):
    """Writes the records each set's rule selects; thread-safe, one flush per line.

    ``clock`` (seconds since the epoch) is injectable for rotation tests.
    ``export`` never raises: failures are logged and counted under
    ``ragpulse_sink_errors_total{sink="regression"}`` when ``metrics`` is given.
    """

    name = "regression"
    default_enabled = True

    class Options(PluginOptions):
        """Regression sets written from live traffic."""

        directory: Path | None = Field(None, description="Where sets are written; unset = off.")
        sets: dict[str, RegressionSetRule] = Field(default_factory=_default_sets)
        max_bytes: int = Field(
            50 * 1024 * 1024, ge=1024, description="Rotate a set file past this."
        )
        max_age_s: float = Field(24 * 3600, gt=0, description="Rotate a set file older than this.")
        redaction: RedactionSettings | None = Field(
            None,
            description="Replaces the top-level redaction section for regression sets only "
            "(whole section, not merged); unset = the top-level section.",
        )
        max_text_chars: int = Field(
            EVALUATED_CHARS,
            ge=1,
            description="Longest text (question, answer, one document, a tool call's "
            "arguments or result) stored; a longer one is cut and the line's `truncated` "
            "gives its length. Default: evaluation.max_text_chars, what was evaluated.",
        )

    def __init__(
        self,
        directory: str | Path,
        sets: Mapping[str, RegressionSetRule] | None = None,
        *,
        max_bytes: int = 50 * 1024 * 1024,
        max_age_s: float = 24 * 3600.0,
        redaction: RedactionSettings | Redactor | None = None,
        max_text_chars: int = EVALUATED_CHARS,
        clock: Callable[[], float] = time.time,
        metrics: CollectorMetrics | None = None,
    ) -> None:
        if sets is None:
            sets = _default_sets()
        for set_name, rule in sets.items():
            check_rule(set_name, rule)
        given = redaction.settings if isinstance(redaction, Redactor) else redaction
        super().__init__(
            self.Options(
                directory=Path(directory),
                sets=dict(sets),
                max_bytes=max_bytes,
                max_age_s=max_age_s,
                redaction=given,
                max_text_chars=max_text_chars,
            )
        )
        self.directory = Path(directory)
        self.max_text_chars = max_text_chars
        self.sets = dict(sets)
        self.max_bytes, self.max_age_s = max_bytes, max_age_s
        if not isinstance(redaction, Redactor):
            redaction = Redactor.for_path(redaction or RedactionSettings(), "regression")
        self.redactor = redaction
        self._clock = clock
        self._metrics = metrics
        self._lock = threading.Lock()
        self._open: dict[str, _OpenFile] = {}
        self.written = 0
        self.duplicates = 0
        self.errors = 0
        self._seen: dict[str, set[bytes]] = {n: self._load_index(n) for n in self.sets}
        # Results of records exported while a costly tier is pending, by (trace, span) id.
        self._pending: OrderedDict[str, list[EvalResult]] = OrderedDict()

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        # The top-level section, unless sinks.regression.redaction replaces it; the texts'
        # bound, unless sinks.regression.max_text_chars sets its own.
        return {
            "redaction": settings.redaction.model_dump(),
            "max_text_chars": settings.evaluation.max_text_chars,
        }

    @classmethod
    def create(
        cls, options: RegressionSink.Options, context: PluginContext
    ) -> RegressionSink | None:
        if options.directory is None or not options.sets:
            return None
        return cls(
            options.directory,
            options.sets,
            max_bytes=options.max_bytes,
            max_age_s=options.max_age_s,
            redaction=options.redaction,
            max_text_chars=options.max_text_chars,
            metrics=context.metrics,
        )

    # -- export ----------------------------------------------------------------------------

    def export(self, item: ExportItem[RagRecord]) -> None:
        record, results = item.record, item.results
        try:
            # A rule looks at the new results; a line written carries all of the record's.
            every = self._with_earlier(item)
            chosen = [
                (set_name, reason)
                for set_name, rule in self.sets.items()
                if (reason := rule_reason(set_name, rule, record, results)) is not None
            ]
            if not chosen:
                return
            body = self._body(item, every)
            key = question_key(body["record"].get("question") or "")
        except Exception:
            self._failed(f"cannot select or redact the record of trace {record.trace_id}")
            return
        with self._lock:
            for set_name, reason in chosen:
                seen = self._seen[set_name]
                if key in seen:
                    self.duplicates += 1
                    continue
                line = {
                    "set": set_name,
                    "written_at": _iso(self._clock()),
                    "reason": reason,
                    **body,
                }
                try:
                    self._write(set_name, json.dumps(line, ensure_ascii=False))
                except Exception:
                    self._failed(f"cannot write trace {record.trace_id} to set {set_name}")
                    continue
                seen.add(key)
                self.written += 1

    def _with_earlier(self, item: ExportItem[RagRecord]) -> Sequence[EvalResult]:
        """The item's results after those its record was exported with before (an update
        joins its record's earlier results, kept while a costly tier is pending; a
        revision's results replace them)."""
        key = item.record.record_id  # a revision keeps it, whatever span it is rooted at
        with self._lock:
            earlier: list[EvalResult] = []
            if item.kind is not ExportKind.FIRST:
                earlier = self._pending.pop(key, [])
            if item.kind is ExportKind.REVISION:
                earlier = []
            every = [*earlier, *item.results]
            if item.pending:
                self._pending[key] = every
                while len(self._pending) > PENDING_KEPT:
                    self._pending.popitem(last=False)
        return every

    def _body(self, item: ExportItem[RagRecord], results: Sequence[EvalResult]) -> dict[str, Any]:
        # One row, so that a word of a value redacted in the record is also caught
        # where a result quotes it alone (unsupported_tokens).
        row = stored_row(
            item.record, results, self.redactor, self.max_text_chars, state_attributes(item)
        )
        redacted_results = row.pop("results")
        truncated = row.pop(TRUNCATED, None)
        body = {
            "sampling": self.redactor.redact_json(dict(item.sampled)),
            "record": row,
            "results": redacted_results,
        }
        if truncated:
            body[TRUNCATED] = truncated
        return body

    def _failed(self, what: str) -> None:
        self.errors += 1
        log.exception("regression sink: %s", what)
        if self._metrics is not None:
            self._metrics.sink_errors.labels(self.name).inc()

    # -- files -----------------------------------------------------------------------------

    def _write(self, set_name: str, line: str) -> None:
        data = line + "\n"
        size = len(data.encode("utf-8"))
        current = self._open.get(set_name) or self._resume(set_name)
        if current is not None and (
            (current.size > 0 and current.size + size > self.max_bytes)
            or self._clock() - current.started >= self.max_age_s
        ):
            current.handle.close()
            current = None
        if current is None:
            current = self._new_file(set_name)
        self._open[set_name] = current
        current.handle.write(data)
        current.handle.flush()
        current.size += size

    def _resume(self, set_name: str) -> _OpenFile | None:
        """Go on appending to the newest file when it is still within both limits."""
        files = set_files(self.directory / set_name)
        if not files:
            return None
        path = files[-1]
        started = _file_started(path)
        size = path.stat().st_size
        if started is None or size >= self.max_bytes:
            return None
        if self._clock() - started >= self.max_age_s:
            return None
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open between lines
        if size and not _ends_with_newline(path):
            handle.write("\n")  # a line cut short by a crash stays on its own line
            size += 1
        return _OpenFile(path, started, size, handle)

    def _new_file(self, set_name: str) -> _OpenFile:
        set_dir = self.directory / set_name
        set_dir.mkdir(parents=True, exist_ok=True)
        started = float(int(self._clock()))
        while True:
            path = set_dir / f"{set_name}-{time.strftime(_STAMP, time.gmtime(started))}.jsonl"
            if not path.exists():
                break
            started += 1  # a second rotation within the same second: the next second's name
        handle = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept open between lines
        return _OpenFile(path, started, 0, handle)

    def _load_index(self, set_name: str) -> set[bytes]:
        seen: set[bytes] = set()
        for path in set_files(self.directory / set_name):
            try:
                with path.open(encoding="utf-8", errors="replace") as f:
                    for raw in f:
                        question = _question_of(raw)
                        if question is not None:
                            seen.add(question_key(self.redactor.redact(question)))
            except OSError as exc:
                log.warning("regression set %s: cannot read %s: %s", set_name, path, exc)
        if seen:
            log.info("regression set %s: %d questions already kept", set_name, len(seen))
        return seen

    def shutdown(self) -> None:
        with self._lock:
            for current in self._open.values():
                try:
                    current.handle.close()
                except OSError:
                    log.warning("cannot close %s", current.path)
            self._open.clear()


def _ends_with_newline(path: Path) -> bool:
    with path.open("rb") as f:
        f.seek(-1, 2)
        return f.read(1) == b"\n"


def _parsed(raw: str | None) -> dict[str, Any]:
    """A set line as a dict; {} for a blank, cut-short or foreign line."""
    if not raw or not raw.strip():
        return {}
    try:
        row = json.loads(raw)
    except ValueError:
        return {}
    return row if isinstance(row, dict) else {}


def _question_of(raw: str) -> str | None:
    record = _parsed(raw).get("record")
    question = record.get("question") if isinstance(record, dict) else None
    return question if isinstance(question, str) else None


# --- Listing ------------------------------------------------------------------------------


@dataclass
class SetStats:
    name: str
    files: int = 0
    lines: int = 0
    bytes: int = 0
    first_written_at: str | None = None
    last_written_at: str | None = None


def set_stats(directory: str | Path) -> list[SetStats]:
    """One entry per set (sub-directory holding ``*.jsonl``) under ``directory``, by name."""
    root = Path(directory)
    out = []
    for set_dir in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        files = set_files(set_dir)
        if not files:
            continue
        stats = SetStats(set_dir.name, files=len(files))
        stamps: list[str] = []
        for path in files:
            stats.bytes += path.stat().st_size
            first = last = None
            with path.open(encoding="utf-8", errors="replace") as f:
                for raw in f:
                    if raw.strip():
                        stats.lines += 1
                        first = first or raw
                        last = raw
            stamps.extend(s for s in (_written_at(first), _written_at(last)) if s)
        if stamps:
            stats.first_written_at, stats.last_written_at = min(stamps), max(stamps)
        out.append(stats)
    return out


def _written_at(raw: str | None) -> str | None:
    value = _parsed(raw).get("written_at")
    return value if isinstance(value, str) else None
