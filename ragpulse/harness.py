"""The offline test harness: ``ragpulse eval SET.jsonl -o OUT.jsonl --generator mod:fn``.

For every test-set row: ``retriever(question)`` once (when given), then, per condition
(:mod:`ragpulse.conditions`), ``generator(question, documents)`` on the condition's
documents. Both may be sync or async, ragpulse-decorated or not; documents go to the
generator as ``{"id", "content"}`` dicts (what the decorators accept) and come back
from the retriever as strings, dicts or a mapping with ``documents``. Calls run at most
``--concurrency`` at a time, each bounded by ``--timeout-s``: a call that raises or
times out becomes an error row, never a crash (a sync call past its time keeps its
thread until it returns; the thread is a daemon, so it cannot hold the exit).

Each output line is the input row with ``condition``, ``planted``, ``contexts`` (the
documents used, as ``{id, content}``), ``answer`` and ``results``; a recorded run in the
input (``contexts``/``answer``) moves to ``recorded``. Cases whose correct behaviour
is to refuse (``gold_removed``, ``irrelevant_only``) say ``expected_behavior:
"refuse"``. Lines are ordered by (input line, condition); unreadable lines are written
back with their error. A regression-set line from live traffic (``{"set", "record",
...}``) is read as a row once reference fields are added at its top level
(:func:`flatten`). Scored with the defaults, every reference-based evaluator that
can run, and the behaviour evaluators; then the sliced report (:mod:`ragpulse.slices`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ragpulse.conditions import (
    CONDITIONS,
    EXPECT_REFUSAL,
    NEEDS_RETRIEVER,
    Case,
    build_case,
    document_pool,
    rng_for,
)
from ragpulse.evaluators.base import Evaluator
from ragpulse.exporters.jsonl import result_dict
from ragpulse.offline import ParsedLine, row_to_record
from ragpulse.record import Document, RagRecord
from ragpulse.replay import (
    _is_async,
    _materialize_async,
    _materialize_sync,
    answer_of,
    documents_of,
    error_text,
    load_function,
)

BEHAVIOUR = ("injection_resistance/canary", "counterfactual_adoption/planted_value",
             "expected_refusal/rules")  # fmt: skip
_RUN_KEYS = ("contexts", "contexts_ids", "documents", "answer", "results")
_REFERENCE_FIELDS = ("reference_contexts", "reference_context_ids", "reference_answers",
                     "expected_behavior")  # fmt: skip


@dataclass
class Item:
    """One (row, condition): its case, the generator's answer or error."""

    line: int
    index: int  # the condition's position in --conditions: the output order
    condition: str
    row: dict[str, Any]
    case: Case | None = None
    answer: str | None = None
    error: str | None = None
    duration_ms: float | None = None
    results: list[dict[str, Any]] = field(default_factory=list)


def parse_conditions(value: str) -> list[str]:
    names = [c.strip() for c in value.split(",") if c.strip()]
    unknown = [c for c in names if c not in CONDITIONS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown condition(s) {', '.join(unknown) or '(none)'}; known: {', '.join(CONDITIONS)}"
        )
    return list(dict.fromkeys(names))


# --- Calls ---------------------------------------------------------------------------------


async def _in_thread(fn: Callable[..., Any], args: tuple[Any, ...]) -> Any:
    """``fn(*args)`` on a daemon thread: a call abandoned at its timeout cannot block exit."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            (future.set_result if ok else future.set_exception)(value)

    def work() -> None:
        try:
            ok, value = True, _materialize_sync(fn(*args))
        except BaseException as exc:
            ok, value = False, exc
        try:
            loop.call_soon_threadsafe(settle, ok, value)
        except RuntimeError:  # the run ended (it timed out long ago): nobody waits
            pass

    threading.Thread(target=work, name="ragpulse-harness", daemon=True).start()
    return await future


@dataclass
class Outcome:
    value: Any = None
    error: str | None = None
    duration_ms: float = 0.0


async def _call(
    fn: Callable[..., Any], args: tuple[Any, ...], timeout: float, gate: asyncio.Semaphore
) -> Outcome:
    async with gate:
        start = time.perf_counter()
        out = Outcome()
        try:
            if _is_async(fn):
                work = _materialize_async(fn(*args))
            else:
                work = _in_thread(fn, args)
            out.value = await asyncio.wait_for(work, timeout)
        except TimeoutError:
            out.error = f"timeout: no answer within {timeout:g} s"
        except Exception as exc:
            out.error = error_text(exc)
        out.duration_ms = (time.perf_counter() - start) * 1000
        return out


def _retrieved_documents(value: Any) -> list[Document]:
    """What a retriever returned, as documents; TypeError when it is none of the shapes."""
    if isinstance(value, list | tuple):
        return row_to_record({"contexts": list(value)}, 0).documents
    docs = documents_of(value)
    if docs is None:
        raise TypeError(
            f"the retriever returned {type(value).__name__}; expected a list of documents "
            "(strings or {id, content}) or a mapping with 'documents'"
        )
    return docs


async def _run_calls(
    questions: dict[int, str],
    items: Sequence[Item],
    retriever: Callable[..., Any] | None,
    generator: Callable[..., Any],
    plan: Callable[[Item, list[Document] | None, str | None], None],
    concurrency: int,
    timeout: float,
    tick: Callable[[], None],
) -> None:
    """Retrieve per row, then build every case (``plan``) and generate, concurrently."""
    gate = asyncio.Semaphore(max(1, concurrency))
    retrieved: dict[int, tuple[list[Document] | None, str | None]] = {}
    if retriever is not None:
        lines = list(questions)
        outcomes = await asyncio.gather(
            *(_call(retriever, (questions[n],), timeout, gate) for n in lines)
        )
        for n, out in zip(lines, outcomes, strict=True):
            if out.error is not None:
                retrieved[n] = (None, f"retriever: {out.error}")
                continue
            try:
                retrieved[n] = (_retrieved_documents(out.value), None)
            except Exception as exc:
                retrieved[n] = (None, f"retriever: {error_text(exc)}")

    async def one(item: Item) -> None:
        docs, error = retrieved.get(item.line, (None, None))
        try:
            plan(item, docs, error)
        except Exception as exc:  # a case that cannot be built is an error row, not a crash
            item.error = f"condition: {error_text(exc)}"
        if item.case is not None and item.error is None:
            payload = [d.model_dump(include={"id", "content"}) for d in item.case.documents]
            out = await _call(generator, (questions[item.line], payload), timeout, gate)
            item.duration_ms = out.duration_ms
            if out.error is not None:
                item.error = f"generator: {out.error}"
            else:
                item.answer = answer_of(out.value)
        tick()

    await asyncio.gather(*(one(item) for item in items))


# --- Rows --------------------------------------------------------------------------------


def output_row(item: Item) -> dict[str, Any]:
    row = {k: v for k, v in item.row.items() if k not in _RUN_KEYS}
    recorded = {k: item.row[k] for k in ("contexts", "contexts_ids", "answer") if k in item.row}
    if recorded:
        row["recorded"] = recorded
    row["line"] = item.line
    case = item.case
    row["condition"] = item.condition
    row["planted"] = case.planted if case else {}
    if case is not None and case.condition in EXPECT_REFUSAL:
        if row.get("expected_behavior") not in (None, "refuse"):
            row["row_expected_behavior"] = row["expected_behavior"]
        row["expected_behavior"] = "refuse"
    if case is not None and case.note:
        row["condition_note"] = case.note
    row["contexts"] = (
        [d.model_dump(include={"id", "content"}) for d in case.documents] if case else []
    )
    if item.error is not None:
        row["error"] = item.error
    else:
        row["answer"] = item.answer or ""
        row["results"] = item.results
    row["generation"] = {
        "duration_ms": None if item.duration_ms is None else round(item.duration_ms, 3)
    }
    return row


def _score(items: Sequence[Item], evaluators: Sequence[Evaluator], batch_size: int) -> None:
    from ragpulse.evaluation import evaluate_records

    done = [i for i in items if i.error is None and i.case is not None]
    for start in range(0, len(done), max(1, batch_size)):
        chunk = done[start : start + batch_size]
        records: list[RagRecord] = [row_to_record(output_row(i), i.line) for i in chunk]
        for item, results in zip(chunk, evaluate_records(records, evaluators), strict=True):
            item.results = [result_dict(r) for r in results]


def select_evaluators(metrics: list[str] | None, settings: Any) -> list[Evaluator]:
    """The selection (default: the defaults plus every reference-based evaluator that can
    run here and is configured), always with the behaviour evaluators."""
    from ragpulse.plugins import evaluator_class, evaluator_classes, load_evaluators

    evaluation = settings.evaluation
    wanted = load_evaluators(metrics or evaluation.evaluators, evaluation)
    names = {e.name() for e in wanted}
    extra: list[str] = list(BEHAVIOUR)
    if not (metrics or evaluation.evaluators):
        extra += [
            name
            for name, cls in sorted(evaluator_classes().items())
            if cls.requires_reference
            and cls.missing() is None
            and cls.unconfigured(evaluation) is None
        ]
    for name in dict.fromkeys(extra):
        if name not in names:
            wanted.append(evaluator_class(name)(evaluation.options.get(name, {})))
            names.add(name)
    return wanted


# --- The command -------------------------------------------------------------------------


def run(args: argparse.Namespace, console: Console) -> int:
    """``eval --generator``: 0 when done and the gates pass; 1 when a gate fails or no
    call answered; 2 for a path or usage problem."""
    from ragpulse.offline_io import not_text, path_problem

    problem = path_problem(args.input, args.output)
    if problem is None:
        problem = not_text(args.input)
    conditions: list[str] = args.conditions or list(CONDITIONS)
    if problem is None and args.retriever is None:
        needs = [c for c in conditions if c in NEEDS_RETRIEVER]
        if needs:
            problem = f"--conditions {','.join(needs)} need --retriever"
    for flag, spec in (("--generator", args.generator), ("--retriever", args.retriever)):
        if problem is None and spec is not None and not _is_spec(spec):
            problem = f"{flag} takes module:function, got {spec!r}"
    if problem is None and (args.concurrency < 1 or args.timeout_s <= 0):
        problem = "--concurrency must be at least 1 and --timeout-s positive"
    if problem is None:
        problem = _gate_problem(args)
    if problem is not None:
        console.print(f"[red]{escape(problem)}[/red]", highlight=False, soft_wrap=True)
        return 2
    try:
        return _run(args, conditions, console)
    except KeyboardInterrupt:
        console.print("[red]interrupted:[/red] nothing written")
        return 130


def _is_spec(spec: str) -> bool:
    module, sep, attr = spec.partition(":")
    return bool(sep and module and attr)


def _gate_problem(args: argparse.Namespace) -> str | None:
    """A --max-drop that does not parse or a --baseline that does not read, before any
    call is made (an hour of generation must not end in a usage error)."""
    import importlib

    if args.baseline is not None:
        try:
            json.loads(Path(args.baseline).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return f"--baseline {args.baseline}: {error_text(exc)}"
    try:
        parse: Any = importlib.import_module("ragpulse.slices").parse_gates
    except (ImportError, AttributeError):
        return None
    try:
        parse(list(args.max_drop or []))
    except ValueError as exc:
        return str(exc)
    return None


_SET_KEYS = ("set", "written_at", "reason", "sampling", "record", "results")


def flatten(row: dict[str, Any]) -> dict[str, Any]:
    """A regression-set line (``{"set", "record", "results", ...}``, written from live
    traffic) as a test-set row: the record's question (its documents and answer as the
    recorded run), and the reference fields added at the top level of the line."""
    record = row.get("record")
    if not isinstance(record, dict) or "question" in row:
        return row
    flat = {k: v for k, v in row.items() if k not in _SET_KEYS}
    flat["question"] = record.get("question")
    if "documents" in record:
        flat.setdefault("contexts", record["documents"])
    if "answer" in record:
        flat.setdefault("answer", record["answer"])
    if isinstance(row.get("set"), str):
        flat.setdefault("metadata", {"set": row["set"]})
    return flat


def _read(path: Path) -> list[ParsedLine]:
    from ragpulse.offline import parse_lines
    from ragpulse.offline_io import open_text

    with open_text(path) as f:
        parsed = list(parse_lines(f))
    for p in parsed:
        if p.row is not None:
            p.row = flatten(p.row)
    return parsed


def _run(args: argparse.Namespace, conditions: list[str], console: Console) -> int:
    from ragpulse.cli import _evaluation_overrides, _offline_run, load_settings
    from ragpulse.evaluation import load_evaluators_safely

    generator = load_function(args.generator)
    retriever = load_function(args.retriever) if args.retriever else None
    settings = load_settings(args.config, evaluation=_evaluation_overrides(args))
    parsed = _read(args.input)
    out: dict[tuple[int, int], str] = {}
    questions: dict[int, str] = {}
    refs = {}
    items: list[Item] = []
    for p in parsed:
        if p.row is None:
            out[(p.line, -1)] = json.dumps({"line": p.line, "raw": p.raw, "error": p.error})
            continue
        record = row_to_record(p.row, p.line)
        if not record.question.strip():
            bad = {**p.row, "line": p.line, "error": "no question"}
            out[(p.line, -1)] = json.dumps(bad, ensure_ascii=False, default=str)
            continue
        questions[p.line] = record.question
        refs[p.line] = record.reference
        items += [Item(p.line, i, c, p.row) for i, c in enumerate(conditions)]
    pool = document_pool(list(refs.values()))

    def plan(item: Item, retrieved: list[Document] | None, error: str | None) -> None:
        condition = item.condition
        ref = refs[item.line]
        qid = ref.question_id if ref and ref.question_id else f"line-{item.line}"
        uses_retrieved = condition in NEEDS_RETRIEVER or (
            condition == "injected" and retriever is not None
        )
        rng = rng_for(args.seed, qid, condition)
        if uses_retrieved and error is not None:
            item.case = Case(condition=condition, documents=[])
            item.error = error
            return
        item.case = build_case(condition, ref, retrieved, pool, rng)

    progress, task, context = _offline_run(settings, "generating", len(items))
    from contextlib import closing

    with closing(context):
        wanted = select_evaluators(args.metrics, settings)
        evaluators = load_evaluators_safely(wanted, context)
        with progress:
            asyncio.run(
                _run_calls(
                    questions,
                    items,
                    retriever,
                    generator,
                    plan,
                    args.concurrency,
                    args.timeout_s,
                    lambda: progress.advance(task),
                )
            )
            progress.update(task, description="scoring")
            _score(items, evaluators, args.batch_size)
    rows = []
    for item in items:
        row = output_row(item)
        rows.append(row)
        out[(item.line, item.index)] = json.dumps(row, ensure_ascii=False, default=str)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    with args.output.open("w", encoding="utf-8") as f:
        for key in sorted(out):
            f.write(out[key] + "\n")
    console.print(
        f"{len(items) - sum(i.error is not None for i in items)} of {len(items)} cases "
        f"answered ({len(questions)} questions x {len(conditions)} conditions) -> {args.output}"
    )
    notes = _notes(items, parsed, refs, questions)
    passed = _report(args, rows, notes, console)
    if items and all(i.error is not None for i in items):
        first = next(i.error for i in items if i.error)
        console.print(f"[red]every case failed: {escape(str(first))}[/red]")
        return 1
    return 0 if passed else 1


def _notes(
    items: Sequence[Item],
    parsed: Sequence[ParsedLine],
    refs: dict[int, Any],
    questions: dict[int, str],
) -> list[str]:
    """What was kept with an error, and how many rows lacked which reference field."""
    notes = []
    bad = sum(p.row is None for p in parsed)
    if bad:
        notes.append(f"{bad} unreadable lines written back with an error field")
    no_question = sum(p.row is not None and p.line not in questions for p in parsed)
    if no_question:
        notes.append(f"{no_question} rows without a question written back with an error field")
    errors = [i for i in items if i.error]
    if errors:
        notes.append(f"{len(errors)} error rows (first: line {errors[0].line}: {errors[0].error})")
    rows = [p.row for p in parsed if p.row is not None and p.line in questions]
    for key in _REFERENCE_FIELDS:
        missing = sum(not r.get(key) for r in rows)
        if missing:
            notes.append(f"{missing} of {len(rows)} rows lack {key}")
    return notes


def _report(
    args: argparse.Namespace, rows: list[dict[str, Any]], notes: list[str], console: Console
) -> bool:
    """The sliced report (:mod:`ragpulse.slices`); returns whether the gates passed."""
    from ragpulse.slice_report import print_sliced, write_sliced_reports
    from ragpulse.slices import sliced_summary

    baseline = (
        json.loads(Path(args.baseline).read_text(encoding="utf-8")) if args.baseline else None
    )
    summary = sliced_summary(rows, args.slice_by, baseline, list(args.max_drop or []))
    summary.setdefault("notes", notes)
    paths = write_sliced_reports(summary, args.output, args.report_dir, args.html)
    print_sliced(summary, console)
    for kind, path in paths.items():
        console.print(f"{kind}: {path}")
    return bool(summary.get("passed", True))
