"""Replay a regression set against a (changed) pipeline and compare the scores.

``ragpulse eval SET.jsonl -o OUT.jsonl --replay module:function`` reads
regression-set lines (``{"set", "record", "results", ...}``, see
:mod:`ragpulse.exporters.regression`) or plain ``{"question", "contexts",
"answer"}`` rows, calls ``function(question)`` for each (sync functions on a
thread pool, async ones on an event loop, at most ``concurrency`` at a time),
scores the new answers with the evaluators the set recorded, and compares.

What the pipeline used is captured from its own spans: ragpulse is configured
with an in-memory span exporter on a private tracer provider for the replay
(replayed traffic never reaches the app's usual exporters), each call runs
inside a ``ragpulse.offline.replay`` CHAIN span, and the call's trace goes through
:func:`~ragpulse.collector.extract.records.extract_records`, so a pipeline decorated
with ``@ragpulse.pipeline`` / ``@ragpulse.retrieval`` reports the documents it
retrieved. Without spans the return value is the answer (a str, a mapping with
``answer``, or an object with ``.answer``; streams are joined) and the
documents are those of a returned mapping's ``documents``/``contexts``, else
the recorded ones.

"Before" scores are the recorded results; a metric/method the row did not
record is scored now on the recorded record. Comparisons pair rows scored on
both sides. Which way is better is the evaluator's declared ``direction``,
carried on its results: for risks (injection, refusal) a rise is a regression.

Conversations are replayed whole. A row that shows several turns (``messages``, a Ragas
multi-turn sample, DeepEval ``turns``: :mod:`ragpulse.offline.agent_rows`) is a row per
turn, and rows sharing a ``conversation_id`` are the turns of one conversation. A
conversation's turns are called one after the other, in turn order (conversations run
concurrently with each other), and each turn is given the new pipeline's own earlier
answers: ``function(question, history=[...])`` when the function has a ``history``
parameter (the earlier questions and new answers as ``{"role", "content"}`` messages),
and ``conversation_id=`` when it has one of that name; the call runs inside
``ragpulse.conversation(id)``, so a decorated pipeline's spans carry the id. The new
answer is scored with that history (and the earlier turns' new documents as evidence),
as live traffic would be; the recorded turn with the recorded one.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import re
import statistics
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from ragpulse import semconv as sc
from ragpulse.evaluators.base import AnyEvaluator
from ragpulse.offline.calls import (
    answer_of,
    documents_of,
    error_text,
    in_thread,
    is_async,
    materialize_async,
    materialize_sync,
)
from ragpulse.offline.conversations import (
    call_keywords,
    conversation_order,
    history_messages,
    joined,
)
from ragpulse.offline.options import BATCH_SIZE, CONCURRENCY
from ragpulse.offline.score import ParsedLine, records_and_coercions
from ragpulse.record import Direction, EvalResult, RagRecord
from ragpulse.results import result_dict

CHANGE = 0.05
"""A paired score that moves by more than this (in the good or bad direction) counts as
improved or regressed."""
HISTOGRAM_BINS = 10
WORST = 10


# --- Input ------------------------------------------------------------------------------


def input_files(path: Path) -> list[Path]:
    """A JSONL file, or every ``*.jsonl`` of a set directory, oldest first."""
    if path.is_dir():
        return sorted(p for p in path.glob("*.jsonl") if p.is_file())
    return [path]


def read_lines(path: Path) -> Iterator[str]:
    for file in input_files(path):
        with file.open(encoding="utf-8", errors="replace") as f:
            yield from f


@dataclass
class ReplayRow:
    """One input row and what the replay made of it."""

    line: int
    before: RagRecord
    recorded: dict[str, EvalResult]
    set: str | None = None
    before_results: dict[str, EvalResult] = field(default_factory=dict)
    after: RagRecord | None = None
    after_results: dict[str, EvalResult] = field(default_factory=dict)
    error: str | None = None
    duration_ms: float | None = None
    answer_from: str | None = None
    documents_from: str | None = None
    replay_trace_id: str | None = None
    reason: str | None = None  # why live traffic kept it (a regression-set line)
    control: ReplayRow | None = None  # the same row through the control pipeline
    part: int = 0
    """Which turn of its input line it is (0-based): a conversation row is several."""

    @property
    def key(self) -> tuple[int, int]:
        """Where its output line goes: input line, then turn."""
        return (self.line, self.part)

    def twin(self) -> ReplayRow:
        """A fresh row for the same input (to replay through another pipeline)."""
        return ReplayRow(self.line, self.before, self.recorded, self.set, reason=self.reason,
                         part=self.part)  # fmt: skip


def to_rows(parsed: ParsedLine) -> list[ReplayRow]:
    """A regression-set line or a plain row: a row per turn it shows (one, unless it is a
    conversation); none when it has no question to replay. The recorded results are the
    row's own turn's (its last)."""
    row = parsed.row or {}
    nested = row.get("record")
    if isinstance(nested, dict):
        try:
            records = [RagRecord.model_validate(nested)]
        except ValidationError:
            records = records_and_coercions(nested, parsed.line)[0]
    else:
        records = records_and_coercions(row, parsed.line)[0]
    if not records[-1].question.strip():
        return []
    recorded: dict[str, EvalResult] = {}
    for raw in row.get("results") or []:
        try:
            result = EvalResult.model_validate(raw)
        except ValidationError:
            continue
        recorded[result.name] = result
    set_name, reason = row.get("set"), row.get("reason")
    return [
        ReplayRow(
            parsed.line,
            record,
            recorded if part == len(records) - 1 else {},
            set=set_name if isinstance(set_name, str) else None,
            reason=reason if isinstance(reason, str) else None,
            part=part,
        )
        for part, record in enumerate(records)
        if record.question.strip()
    ]


def join_recorded(rows: Sequence[ReplayRow]) -> None:
    """Give each recorded turn of a conversation whose row showed no history the
    conversation's earlier recorded turns (as the collector joins live turns)."""
    for group in conversation_order([r.before for r in rows]):
        for n, i in enumerate(group[1:], 1):
            earlier = [rows[j].before for j in group[:n]]
            rows[i].before = joined(rows[i].before, earlier)


def recorded_names(rows: Sequence[ReplayRow]) -> list[str]:
    """metric/method names the rows recorded, in first-seen order."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row.recorded))
    return list(names)


# --- Span capture ------------------------------------------------------------------------


class _Capture:
    """ragpulse configured with an in-memory exporter on a private provider.

    Spans are bucketed by trace id as they end, and each replayed call takes its
    own trace's spans back, so memory holds only calls in flight.
    """

    def __init__(self) -> None:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
            InMemorySpanExporter,
        )

        import ragpulse

        class _ByTrace(InMemorySpanExporter):
            def __init__(self) -> None:
                super().__init__()
                self.traces: dict[int, list[Any]] = defaultdict(list)
                self.traces_lock = threading.Lock()

            def export(self, spans: Sequence[Any]) -> Any:
                with self.traces_lock:
                    for span in spans:
                        self.traces[span.context.trace_id].append(span)
                return super().export(())

        self.exporter = _ByTrace()
        self.provider = TracerProvider(
            resource=Resource.create({sc.SERVICE_NAME: "ragpulse-replay"})
        )
        ragpulse.configure(
            exporter=self.exporter, tracer_provider=self.provider, capture_content=True
        )
        self.tracer = self.provider.get_tracer("ragpulse.replay")

    @contextmanager
    def span(self, question: str, line: int) -> Iterator[Any]:
        attributes: dict[str, str | int] = {
            sc.OPENINFERENCE_SPAN_KIND: sc.KIND_CHAIN,
            sc.INPUT_VALUE: question,
            sc.INPUT_MIME_TYPE: sc.MIME_TEXT,
            "ragpulse.replay.line": line,
        }
        with self.tracer.start_as_current_span("ragpulse.replay", attributes=attributes) as span:
            yield span

    def record(self, trace_id: int) -> RagRecord | None:
        """The trace's record (its first pipeline), extracted as the collector would."""
        from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

        from ragpulse.collector.extract.records import extract_records
        from ragpulse.collector.intake.otlp import decode_request

        with self.exporter.traces_lock:
            spans = self.exporter.traces.pop(trace_id, [])
        if not spans:
            return None
        try:
            records, _ = extract_records(decode_request(encode_spans(spans)).spans)
        except Exception:  # the return value still gives the answer
            logging.getLogger(__name__).warning("replay: extraction failed", exc_info=True)
            return None
        return records[0] if records else None

    def close(self) -> None:
        import ragpulse

        ragpulse.shutdown()
        self.provider.shutdown()


def _start_capture() -> _Capture | None:
    try:
        return _Capture()
    except Exception as exc:  # no spans: answers come from return values
        logging.getLogger(__name__).warning(
            "replay: cannot capture spans (%s); using return values", exc
        )
        return None


# --- Replay ------------------------------------------------------------------------------


def _finish(
    row: ReplayRow,
    value: Any,
    record: RagRecord | None,
    trace_id: int | None,
    earlier: Sequence[RagRecord] = (),
) -> None:
    row.replay_trace_id = f"{trace_id:032x}" if trace_id else None
    returned_docs = documents_of(value)
    answer = record.answer if record is not None and record.answer else ""
    row.answer_from = "spans" if answer else "return"
    answer = answer or answer_of(value)
    if record is not None and record.documents:
        documents, row.documents_from = list(record.documents), "spans"
    elif returned_docs is not None:
        documents, row.documents_from = returned_docs, "return"
    else:
        documents, row.documents_from = list(row.before.documents), "recorded"
    base = record if record is not None else row.before
    update: dict[str, Any] = {
        "trace_id": row.before.trace_id,
        "span_id": row.before.span_id,
        "service": row.before.service,
        "route": row.before.route,
        "question": row.before.question,
        "answer": answer,
        "documents": documents,
        "attributes": {**row.before.attributes, **(record.attributes if record else {})},
    }
    if row.documents_from == "recorded" and row.before.kind == "agent":
        # The recorded documents are an agent's tool results: the tool calls that
        # returned them come with them (their indices point into them), so the agent
        # evaluators score the new answer against what the agent had called.
        update.update(kind="agent", tool_calls=row.before.tool_calls,
                      model_calls=row.before.model_calls)  # fmt: skip
    if row.before.conversation_id:
        # A turn of a conversation: the new answers before it are its history (the
        # recorded history, and documents carried from it, belong to the old answers).
        update.update(conversation_id=row.before.conversation_id, turn=row.before.turn,
                      history=[], standalone_question=None,
                      documents=[d for d in documents if not d.carried])  # fmt: skip
        row.after = joined(base.model_copy(update=update), earlier)
        return
    row.after = base.model_copy(update=update)


def _failed(row: ReplayRow, exc: BaseException, start: float) -> None:
    row.duration_ms = (time.perf_counter() - start) * 1000
    row.error = error_text(exc)


class _Call:
    """What one replayed call returned (set inside :func:`_replaying`)."""

    value: Any = None


@contextmanager
def _replaying(
    row: ReplayRow, capture: _Capture | None, earlier: Sequence[ReplayRow] = ()
) -> Iterator[_Call]:
    """Times one call inside its replay span (in its conversation, when it is a turn of
    one), then fills ``row`` from the value and the trace's spans; an exception from the
    call becomes ``row.error`` (never raised). ``earlier``: the conversation's turns
    replayed before it, through the same pipeline."""
    from ragpulse.sdk.conversation import Conversation

    start = time.perf_counter()
    call = _Call()
    trace_id = None
    try:
        with (
            Conversation(row.before.conversation_id),
            capture.span(row.before.question, row.line) if capture else nullcontext() as span,
        ):
            trace_id = span.get_span_context().trace_id if span is not None else None
            yield call
            if span is not None:
                span.set_attribute(sc.OUTPUT_VALUE, answer_of(call.value))
                span.set_attribute(sc.OUTPUT_MIME_TYPE, sc.MIME_TEXT)
        row.duration_ms = (time.perf_counter() - start) * 1000
        record = capture.record(trace_id) if capture is not None and trace_id else None
        answered = [r.after for r in earlier if r.after is not None]
        _finish(row, call.value, record, trace_id, answered)
    except Exception as exc:
        if capture is not None and trace_id:
            _drop(capture, trace_id)
        _failed(row, exc, start)


def _keywords(fn: Callable[..., Any], row: ReplayRow, earlier: Sequence[ReplayRow]
              ) -> dict[str, Any]:  # fmt: skip
    """``history`` and ``conversation_id`` for a turn of a conversation, when ``fn``
    takes them: the conversation's questions and this pipeline's answers so far."""
    said = [(r.before.question, r.after.answer if r.after else None) for r in earlier]
    return call_keywords(fn, row.before.conversation_id, history_messages(said))


def _call_sync(
    fn: Callable[..., Any],
    row: ReplayRow,
    capture: _Capture | None,
    earlier: Sequence[ReplayRow] = (),
) -> None:
    with _replaying(row, capture, earlier) as call:
        call.value = materialize_sync(fn(row.before.question, **_keywords(fn, row, earlier)))


async def _call_async(
    fn: Callable[..., Any],
    row: ReplayRow,
    capture: _Capture | None,
    earlier: Sequence[ReplayRow] = (),
) -> None:
    with _replaying(row, capture, earlier) as call:
        value = fn(row.before.question, **_keywords(fn, row, earlier))
        call.value = await materialize_async(value)


def _drop(capture: _Capture, trace_id: int) -> None:
    with capture.exporter.traces_lock:
        capture.exporter.traces.pop(trace_id, None)


def replay(
    rows: Sequence[ReplayRow],
    fn: Callable[..., Any],
    concurrency: int = CONCURRENCY,
    progress: Callable[[], None] | None = None,
    capture_spans: bool = True,
    control: Callable[[str], Any] | None = None,
    done: Callable[[ReplayRow], None] | None = None,
) -> None:
    """Call ``fn(question)`` for every row, and ``control(question)`` for its twin
    (``row.control``) when given; fills ``after`` or ``error``; never raises for the
    functions' exceptions. The turns of a conversation are called in order, each given
    its pipeline's earlier answers (see the module's doc). ``done(row)`` (and
    ``progress()``) once a row's calls are over, from a worker thread."""
    concurrency = max(1, concurrency)
    tick = progress or (lambda: None)
    calls_left = {id(row): 1 + (control is not None) for row in rows}
    lock = threading.Lock()

    def settled(row: ReplayRow) -> None:
        with lock:
            calls_left[id(row)] -= 1
            over = not calls_left[id(row)]
        if over:
            if done is not None:
                done(row)
            tick()

    if control is not None:
        for row in rows:
            row.control = row.twin()
    # A job: one pipeline's calls for one conversation (or one row), in turn order.
    jobs: list[_Job] = []
    for group in conversation_order([r.before for r in rows]):
        owners = [rows[i] for i in group]
        jobs.append(_Job(fn, owners, owners))
        if control is not None:
            jobs.append(_Job(control, [r.control for r in owners if r.control], owners))
    capture = _start_capture() if capture_spans else None
    try:
        if is_async(fn) or (control is not None and is_async(control)):
            asyncio.run(_replay_async(jobs, concurrency, settled, capture))
        else:
            _replay_threads(jobs, concurrency, settled, capture)
    finally:
        if capture is not None:
            capture.close()


@dataclass
class _Job:
    """One pipeline's calls for a conversation's turns (or one row), made in order."""

    fn: Callable[..., Any]
    targets: list[ReplayRow]
    """The rows the calls fill (a row's control twins, for the control pipeline)."""
    owners: list[ReplayRow]
    """The rows of the input they answer for, one per target."""


def _replay_threads(
    jobs: Sequence[_Job],
    concurrency: int,
    settled: Callable[[ReplayRow], None],
    capture: _Capture | None,
) -> None:
    """Sync calls on ``concurrency`` daemon threads: a call that never returns cannot
    hold the process at exit (an interrupted run leaves it behind)."""
    queued: queue.SimpleQueue[_Job] = queue.SimpleQueue()
    for job in jobs:
        queued.put(job)
    calls = sum(len(job.targets) for job in jobs)
    over: queue.SimpleQueue[ReplayRow] = queue.SimpleQueue()

    def work() -> None:
        while True:
            try:
                job = queued.get_nowait()
            except queue.Empty:
                return
            for n, (target, owner) in enumerate(zip(job.targets, job.owners, strict=True)):
                _call_sync(job.fn, target, capture, job.targets[:n])
                over.put(owner)

    for i in range(min(concurrency, len(jobs))):
        threading.Thread(target=work, name=f"ragpulse-replay-{i}", daemon=True).start()
    for _ in range(calls):
        settled(over.get())


async def _replay_async(
    jobs: Sequence[_Job],
    concurrency: int,
    settled: Callable[[ReplayRow], None],
    capture: _Capture | None,
) -> None:
    semaphore = asyncio.Semaphore(concurrency)

    async def call(f: Callable[..., Any], row: ReplayRow, earlier: list[ReplayRow]) -> None:
        async with semaphore:
            if is_async(f):
                await _call_async(f, row, capture, earlier)
            else:  # a sync control beside an async pipeline: on a thread
                await in_thread(_call_sync, f, row, capture, earlier)

    async def one(job: _Job) -> None:
        for n, (target, owner) in enumerate(zip(job.targets, job.owners, strict=True)):
            await call(job.fn, target, job.targets[:n])
            settled(owner)

    await asyncio.gather(*(one(job) for job in jobs))


# --- Scoring -----------------------------------------------------------------------------


def score(
    rows: Sequence[ReplayRow], evaluators: Sequence[AnyEvaluator], batch_size: int = BATCH_SIZE
) -> None:
    """Score every replayed record, and the recorded record where a result is missing."""
    from ragpulse.evaluation import evaluate_records

    for row in rows:
        # Recorded results may predate ``direction``: the evaluator's own declaration counts.
        row.before_results = {
            e.name: row.recorded[e.name].model_copy(update={"direction": e.direction})
            for e in evaluators
            if e.name in row.recorded
        }
    for evaluator in evaluators:
        missing = [r for r in rows if evaluator.name not in r.before_results]
        for chunk in _chunks(missing, batch_size):
            scored = evaluate_records([r.before for r in chunk], [evaluator])
            for row, results in zip(chunk, scored, strict=True):
                if results:  # none when the evaluator does not apply to the record's kind
                    row.before_results[evaluator.name] = results[0]
    twins = [r.control for r in rows if r.control is not None]
    for row in rows:
        if row.control is not None:
            row.control.before_results = row.before_results
    replayed = [r for r in [*rows, *twins] if r.after is not None]
    for chunk in _chunks(replayed, batch_size):
        scored = evaluate_records([r.after for r in chunk if r.after is not None], evaluators)
        for row, results in zip(chunk, scored, strict=True):
            row.after_results = {r.name: r for r in results}


def _chunks(items: Sequence[ReplayRow], size: int) -> Iterator[Sequence[ReplayRow]]:
    size = max(1, size)
    for start in range(0, len(items), size):
        yield items[start : start + size]


# --- Comparison --------------------------------------------------------------------------


def direction_of(name: str, rows: Sequence[ReplayRow]) -> Direction:
    """The direction the evaluator stamped on its results (the fresh ones first)."""
    for row in rows:
        for results in (row.after_results, row.before_results):
            if name in results:
                return results[name].direction
    return Direction.HIGHER_IS_BETTER


def gain(direction: Direction, before: float, after: float) -> float:
    """How much better ``after`` is (negative: a regression), in the metric's direction."""
    return after - before if direction is Direction.HIGHER_IS_BETTER else before - after


def _histogram(values: Sequence[float]) -> list[int]:
    counts = [0] * HISTOGRAM_BINS
    for v in values:
        counts[min(HISTOGRAM_BINS - 1, max(0, int(v * HISTOGRAM_BINS)))] += 1
    return counts


def _mean(values: Sequence[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(
    rows: Sequence[ReplayRow],
    evaluators: Sequence[str],
    max_drop: Mapping[str, float],
    *,
    bad_lines: int = 0,
    skipped: int = 0,
    meta: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The comparison as a JSON-able summary (what the console, Markdown and HTML show)."""
    metrics = []
    regressions: list[dict[str, Any]] = []
    for name in evaluators:
        direction = direction_of(name, rows)
        before_vals, after_vals = [], []
        improved = regressed = after_na = after_err = 0
        for row in rows:
            b, a = row.before_results.get(name), row.after_results.get(name)
            if row.after is not None and a is not None:
                after_err += bool(a.error)
                after_na += a.score is None and not a.error
            if b is None or a is None or b.score is None or a.score is None:
                continue
            before_vals.append(b.score)
            after_vals.append(a.score)
            g = gain(direction, b.score, a.score)
            improved += g > CHANGE
            regressed += g < -CHANGE
            if g < -CHANGE:
                regressions.append(
                    {
                        "trace_id": row.before.trace_id,
                        "line": row.line,
                        "set": row.set,
                        "evaluator": name,
                        "before": b.score,
                        "after": a.score,
                        "drop": -g,
                        "question": row.before.question,
                        "answer_after": row.after.answer if row.after else "",
                    }
                )
        n = len(before_vals)
        mean_b, mean_a = _mean(before_vals), _mean(after_vals)
        metric, _, method = name.partition("/")
        metrics.append(
            {
                "evaluator": name,
                "metric": metric,
                "method": method,
                "higher_is_better": direction is Direction.HIGHER_IS_BETTER,
                "paired": n,
                "mean_before": mean_b,
                "mean_after": mean_a,
                "delta": None if mean_b is None or mean_a is None else mean_a - mean_b,
                "drop": None
                if mean_b is None or mean_a is None
                else -gain(direction, mean_b, mean_a),
                "improved": improved,
                "regressed": regressed,
                "unchanged": n - improved - regressed,
                "improved_share": improved / n if n else None,
                "regressed_share": regressed / n if n else None,
                "after_not_applicable": after_na,
                "after_errors": after_err,
                "histogram": {
                    "edges": [i / HISTOGRAM_BINS for i in range(HISTOGRAM_BINS + 1)],
                    "before": _histogram(before_vals),
                    "after": _histogram(after_vals),
                },
            }
        )
    regressions.sort(key=lambda r: (-r["drop"], r["line"]))
    thresholds = check_thresholds(metrics, max_drop)
    errors = [r for r in rows if r.error]
    return {
        **dict(meta or {}),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "rows": len(rows) + skipped + bad_lines,
        "replayed": sum(r.after is not None for r in rows),
        "replay_errors": len(errors),
        "error_examples": [
            {"line": r.line, "trace_id": r.before.trace_id, "error": r.error} for r in errors[:10]
        ],
        "skipped_no_question": skipped,
        "unreadable_lines": bad_lines,
        "change_threshold": CHANGE,
        "metrics": metrics,
        "regressions": len(regressions),
        "worst_regressions": regressions[:WORST],
        "thresholds": thresholds,
        "passed": not any(t["exceeded"] for t in thresholds),
    }


def check_thresholds(
    metrics: Sequence[Mapping[str, Any]], max_drop: Mapping[str, float]
) -> list[dict[str, Any]]:
    """One entry per (threshold, matching evaluator); a threshold nothing can be checked
    against fails (a CI gate must not pass silently)."""
    out = []
    for rule, limit in max_drop.items():
        matched = [m for m in metrics if rule in (m["metric"], m["evaluator"])]
        checked = [m for m in matched if m["drop"] is not None]
        for m in checked:
            out.append(
                {
                    "rule": f"{rule}={limit:g}",
                    "evaluator": m["evaluator"],
                    "max_drop": limit,
                    "drop": m["drop"],
                    "exceeded": m["drop"] > limit,
                }
            )
        if not checked:
            out.append(
                {
                    "rule": f"{rule}={limit:g}",
                    "evaluator": None,
                    "max_drop": limit,
                    "drop": None,
                    "exceeded": True,
                    "note": "no paired scores for this metric"
                    if matched
                    else "metric not evaluated",
                }
            )
    return out


# --- Selection and control ----------------------------------------------------------------

_SCORE_REASON = re.compile(r"^(?P<name>\S+) (?P<what>score|risk) \S+ (?P<op>[<>]) (?P<limit>\S+)$")
_LABEL_REASON = re.compile(r"^(?P<name>\S+) label = (?P<label>.+)$")
BIASED = frozenset({"low_score", "label", "negative_feedback"})
"""Rules that pick records for a bad outcome: such a set regresses to the mean on replay."""


def selection_rule(reason: str | None) -> tuple[str, str, str | None]:
    """(kind, rule, metric) of the reason a regression-set line gives for being kept
    (:func:`ragpulse.exporters.regression.rule_reason` writes it): ``low_score``,
    ``label``, ``negative_feedback``, ``random``, or ``unknown`` for a row without one."""
    text = (reason or "").strip()
    if m := _SCORE_REASON.match(text):
        return "low_score", f"{m['name']} {m['what']} {m['op']} {m['limit']}", m["name"]
    if m := _LABEL_REASON.match(text):
        return "label", f"{m['name']} label = {m['label']}", m["name"]
    if text.startswith("user feedback"):
        return "negative_feedback", "negative user feedback", None
    if text.startswith("random"):
        return "random", text, None
    return "unknown", text or "no reason recorded", None


def selection(rows: Sequence[ReplayRow]) -> list[dict[str, Any]]:
    """How the replayed rows were chosen, per set and rule, with row counts; ``biased``
    when the rule picked them for a bad score or outcome."""
    counts: dict[tuple[str | None, str, str, str | None], int] = defaultdict(int)
    for row in rows:
        counts[(row.set, *selection_rule(row.reason))] += 1
    return [
        {"set": set_name, "kind": kind, "rule": rule, "metric": metric, "rows": n,
         "biased": kind in BIASED}
        for (set_name, kind, rule, metric), n in counts.items()
    ]  # fmt: skip


def against_control(rows: Sequence[ReplayRow]) -> list[ReplayRow]:
    """Rows that compare the changed pipeline's answers ("after") with the control
    pipeline's on the same input ("before"): the change net of regression to the mean."""
    out = []
    for row in rows:
        twin = row.control
        if twin is None or twin.after is None or row.after is None:
            continue
        out.append(
            ReplayRow(row.line, twin.after, {}, row.set, before_results=twin.after_results,
                      after=row.after, after_results=row.after_results, reason=row.reason)
        )  # fmt: skip
    return out


# --- Output ------------------------------------------------------------------------------


def _side(record: RagRecord | None, results: Mapping[str, EvalResult]) -> dict[str, Any] | None:
    if record is None:
        return None
    side: dict[str, Any] = {
        "answer": record.answer,
        "documents": [d.model_dump(mode="json") for d in record.documents],
        "results": [result_dict(r) for r in results.values()],
    }
    if record.tool_calls:  # an agent turn: the calls its documents came from
        side["tool_calls"] = [c.model_dump(mode="json") for c in record.tool_calls]
    return side


def _deltas(before: Mapping[str, EvalResult], after: Mapping[str, EvalResult]) -> dict[str, float]:
    out = {}
    for name, b in before.items():
        a = after.get(name)
        if a is not None and a.score is not None and b.score is not None:
            out[name] = round(a.score - b.score, 6)
    return out


def output_line(row: ReplayRow, **extra: Any) -> str:
    """The row as one JSON line: before, after, deltas, how the call went; with a control
    pipeline, its side and the deltas from it (after - control)."""
    deltas = _deltas(row.before_results, row.after_results)
    out: dict[str, Any] = {
        "line": row.line,
        "set": row.set,
        "trace_id": row.before.trace_id,
        **(
            {"conversation_id": row.before.conversation_id, "turn": row.before.turn}
            if row.before.conversation_id
            else {}
        ),
        "question": row.before.question,
        "before": _side(row.before, row.before_results),
        "after": _side(row.after, row.after_results),
        "deltas": deltas,
        "replay": {
            "error": row.error,
            "duration_ms": None if row.duration_ms is None else round(row.duration_ms, 3),
            "answer_from": row.answer_from,
            "documents_from": row.documents_from,
            "trace_id": row.replay_trace_id,
        },
    }
    if row.control is not None:
        twin = row.control
        out["control"] = {
            **(_side(twin.after, twin.after_results) or {}),
            "error": twin.error,
            "duration_ms": None if twin.duration_ms is None else round(twin.duration_ms, 3),
        }
        out["deltas_vs_control"] = _deltas(twin.after_results, row.after_results)
    out.update(extra)
    return json.dumps(out, ensure_ascii=False)
