"""The offline test harness: ``ragpulse eval SET.jsonl -o OUT.jsonl --generator mod:fn``.

For every test-set row: ``retriever(question)`` once (when given), then, per condition
(:mod:`ragpulse.offline.conditions`), ``generator(question, documents)`` on the condition's
documents. Without ``--retriever``, the row's recorded ``contexts`` are its retrieved
documents. Both functions may be sync or async, ragpulse-decorated or not; documents go
to the generator as ``{"id", "content"}`` dicts (what the decorators accept) and come
back from the retriever as strings, dicts or a mapping with ``documents``. Calls run at
most ``--concurrency`` at a time, each bounded by ``--timeout-s``: a call that raises or
times out becomes an error row, never a crash (a sync call past its time keeps its
thread until it returns; the thread is a daemon, so it cannot hold the exit).

Before any call, every (row, condition) is checked for its inputs: a condition no row
can be built for is refused (exit 2, one line naming the field); a row that lacks what
one condition needs is skipped for it, written with ``skipped`` (the reason) and
counted in the console, the summary and the report.

Each output line is the input row with ``condition``, ``planted``, ``contexts`` (the
documents used, as ``{id, content}``), ``answer`` and ``results``; a recorded run in the
input (``contexts``/``answer``) moves to ``recorded``. Cases whose correct behaviour
is to refuse (``gold_removed``, ``irrelevant_only``) say ``expected_behavior:
"refuse"``. Rows are written as they are scored; a finished run puts them in (input
line, condition) order, an interrupted one keeps what it wrote (answers not yet scored
are written with ``not_scored``). Unreadable lines are written back with their error. A
regression-set line from live traffic (``{"set", "record", ...}``) is read as a row
once reference fields are added at its top level (:func:`flatten`). Scored with the
defaults, every reference-based evaluator that can run, and the behaviour evaluators;
then the sliced report (:mod:`ragpulse.offline.slices`).

Conversations stay whole: rows that share a ``conversation_id`` are the turns of one
conversation, run in turn order under each condition (conversations and conditions run
concurrently with each other), and a generator with a ``history`` parameter is called as
``generator(question, documents, history=[...])``, the conversation's earlier questions
with its own earlier answers under the same condition (``{"role", "content"}`` messages;
``conversation_id=`` too when it has that parameter). A row that shows a whole
conversation (``messages`` with several user turns) is one case, its last turn, and its
history is the row's own earlier messages. Each output row of a turn carries the
``history`` it was scored with.
"""

from __future__ import annotations

import asyncio
import json
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ragpulse.config import Settings
from ragpulse.evaluators.base import AnyEvaluator
from ragpulse.function_loader import load_function, spec_problem
from ragpulse.offline.calls import (
    answer_of,
    app_export,
    documents_of,
    error_text,
    in_thread,
    is_async,
    materialize_async,
    materialize_sync,
)
from ragpulse.offline.conditions import (
    CONDITIONS,
    EXPECT_REFUSAL,
    NO_REFERENCE_CONTEXTS,
    NO_RETRIEVAL,
    USES_RETRIEVAL,
    Case,
    build_case,
    document_pool,
    input_problem,
    rng_for,
)
from ragpulse.offline.conversations import (
    call_keywords,
    conversation_order,
    history_messages,
)
from ragpulse.offline.io import Feed, Interrupted, SignalStop, StreamedOutput
from ragpulse.offline.json_rows import JSONL, Layout
from ragpulse.offline.options import HarnessOptions
from ragpulse.offline.score import ParsedLine, row_to_record
from ragpulse.offline.testset import SET_LINE_KEYS, FieldReport, canonical_row
from ragpulse.record import Document, RagRecord, Reference
from ragpulse.results import result_dict

BEHAVIOUR = ("injection_resistance/canary", "counterfactual_adoption/planted_value",
             "expected_refusal/rules")  # fmt: skip
_RUN_KEYS = ("contexts", "contexts_ids", "documents", "answer", "results")
_REFERENCE_FIELDS = ("reference_contexts", "reference_context_ids", "reference_answers")


@dataclass
class Item:
    """One (row, condition): its case, the generator's answer, error or reason to skip."""

    line: int
    index: int  # the condition's position in --conditions: the output order
    condition: str
    row: dict[str, Any]
    case: Case | None = None
    answer: str | None = None
    error: str | None = None
    skipped: str | None = None
    duration_ms: float | None = None
    results: list[dict[str, Any]] = field(default_factory=list)
    history: list[dict[str, Any]] = field(default_factory=list)
    """The conversation before the turn, as the generator was given it (with turns)."""

    @property
    def answered(self) -> bool:
        return self.error is None and self.skipped is None and self.case is not None


def parse_conditions(value: str) -> list[str]:
    """``--conditions``' comma-separated names, each once; ValueError for an unknown one."""
    names = [c.strip() for c in value.split(",") if c.strip()]
    problem = conditions_problem(names)
    if problem is not None:
        raise ValueError(problem)
    return list(dict.fromkeys(names))


def conditions_problem(names: Sequence[str]) -> str | None:
    """One line naming the unknown conditions (or none given), else None."""
    unknown = [c for c in names if c not in CONDITIONS]
    if unknown or not names:
        listed = ", ".join(unknown) or "(none)"
        return f"unknown condition(s) {listed}; known: {', '.join(CONDITIONS)}"
    return None


# --- Calls ---------------------------------------------------------------------------------


@dataclass
class Outcome:
    value: Any = None
    error: str | None = None
    duration_ms: float = 0.0


async def _call(
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    timeout: float,
    gate: asyncio.Semaphore,
    keywords: dict[str, Any] | None = None,
) -> Outcome:
    kw = keywords or {}
    async with gate:
        start = time.perf_counter()
        out = Outcome()
        try:
            if is_async(fn):
                work = materialize_async(fn(*args, **kw))
            else:
                work = in_thread(lambda: materialize_sync(fn(*args, **kw)))
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


@dataclass
class Calls:
    """What the calls need: the questions, the user's functions and the limits."""

    questions: dict[int, str]
    recorded: dict[int, list[Document]]  # the rows' recorded contexts (no retriever)
    retriever: Callable[..., Any] | None
    generator: Callable[..., Any]
    plan: Callable[[Item, list[Document] | None, str | None], None]
    concurrency: int
    timeout: float
    conversations: list[list[int]] = field(default_factory=list)
    """Lines grouped by conversation, in turn order (a line alone: a group of one)."""
    conversation_ids: dict[int, str] = field(default_factory=dict)
    history: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """A row's own recorded history (a row that shows the conversation before it)."""


async def _run_calls(calls: Calls, items: Sequence[Item], done: Callable[[Item], None]) -> None:
    """Per row: retrieve (or take the recorded run), build its cases (``plan``) and
    generate, all rows concurrently; ``done(item)`` as each case is settled."""
    gate = asyncio.Semaphore(max(1, calls.concurrency))
    by_line: dict[int, list[Item]] = {}
    for item in items:
        by_line.setdefault(item.line, []).append(item)

    async def one(
        item: Item, docs: list[Document] | None, error: str | None, earlier: list[Item]
    ) -> None:
        if item.skipped is None:
            try:
                calls.plan(item, docs, error)
            except Exception as exc:  # a case that cannot be built is an error row
                item.error = f"condition: {error_text(exc)}"
        cid = calls.conversation_ids.get(item.line)
        if cid is not None:
            item.history = calls.history.get(item.line) or _history(earlier, calls.questions)
        if item.answered and item.case is not None:
            payload = [d.model_dump(include={"id", "content"}) for d in item.case.documents]
            question = calls.questions[item.line]
            said = [{"role": m["role"], "content": m["content"]} for m in item.history]
            keywords = call_keywords(calls.generator, cid, said)
            out = await _call(calls.generator, (question, payload), calls.timeout, gate, keywords)
            item.duration_ms = out.duration_ms
            if out.error is not None:
                item.error = f"generator: {out.error}"
            else:
                item.answer = answer_of(out.value)
        done(item)

    async def row(line: int, cases: list[Item], earlier: dict[int, list[Item]]) -> None:
        docs, error = calls.recorded.get(line), None
        if calls.retriever is not None and any(i.skipped is None for i in cases):
            out = await _call(calls.retriever, (calls.questions[line],), calls.timeout, gate)
            docs = None
            if out.error is not None:
                error = f"retriever: {out.error}"
            else:
                try:
                    docs = _retrieved_documents(out.value)
                except Exception as exc:
                    error = f"retriever: {error_text(exc)}"
        await asyncio.gather(
            *(one(item, docs, error, earlier.setdefault(item.index, [])) for item in cases)
        )
        for item in cases:  # the next turn's history, under the same condition
            earlier[item.index].append(item)

    async def conversation(lines: list[int]) -> None:
        earlier: dict[int, list[Item]] = {}  # by condition: the turns done so far
        for line in lines:
            if line in by_line:
                await row(line, by_line[line], earlier)

    groups = calls.conversations or [[line] for line in by_line]
    await asyncio.gather(*(conversation(lines) for lines in groups))


def _history(earlier: Sequence[Item], questions: dict[int, str]) -> list[dict[str, Any]]:
    """A turn's history: the earlier turns' questions and the generator's answers under
    the same condition (an answer that failed is left out: its question stays)."""
    said = [(questions[i.line], i.answer if i.answered else None) for i in earlier]
    out = history_messages(said)
    turn, numbered = 0, []
    for message in out:
        turn += message["role"] == "user"
        numbered.append({**message, "turn": turn})
    return numbered


def _start_calls(calls: Calls, items: Sequence[Item], feed: Feed[Item]) -> None:
    """The calls on their own event loop, on a daemon thread (an interrupt does not wait
    for them); each settled case goes to ``feed``."""

    def main() -> None:
        error: BaseException | None = None
        try:
            asyncio.run(_run_calls(calls, items, feed.put))
        except BaseException as exc:  # handed to the main thread, never lost here
            error = exc
        feed.close(error)

    threading.Thread(target=main, name="ragpulse-harness-calls", daemon=True).start()


def _keep_conversations(calls: Calls, data: TestSet) -> None:
    """Which lines are turns of one conversation, in turn order, and the history a row
    that shows its conversation already carries."""
    lines = list(data.records)
    records = [data.records[line] for line in lines]
    calls.conversations = [[lines[i] for i in group] for group in conversation_order(records)]
    for line, record in data.records.items():
        if record.conversation_id:
            calls.conversation_ids[line] = record.conversation_id
            if record.history:
                calls.history[line] = [m.model_dump(include={"role", "content", "turn"})
                                       for m in record.history]  # fmt: skip


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
    if item.condition in EXPECT_REFUSAL:
        if row.get("expected_behavior") not in (None, "refuse"):
            row["row_expected_behavior"] = row["expected_behavior"]
        row["expected_behavior"] = "refuse"
    if case is not None and case.note:
        row["condition_note"] = case.note
    if item.skipped is not None:
        row["skipped"] = item.skipped
        row["contexts"] = []
        return row
    row["contexts"] = (
        [d.model_dump(include={"id", "content"}) for d in case.documents] if case else []
    )
    if item.history:
        row["history"] = item.history
    if item.error is not None:
        row["error"] = item.error
    else:
        row["answer"] = item.answer or ""
        row["results"] = item.results
    row["generation"] = {
        "duration_ms": None if item.duration_ms is None else round(item.duration_ms, 3)
    }
    return row


def _score(items: Sequence[Item], evaluators: Sequence[AnyEvaluator]) -> None:
    from ragpulse.evaluation import evaluate_records

    records: list[RagRecord] = [row_to_record(output_row(i), i.line) for i in items]
    for item, results in zip(items, evaluate_records(records, evaluators), strict=True):
        item.results = [result_dict(r) for r in results]


def select_evaluators(metrics: Sequence[str] | None, settings: Any) -> list[AnyEvaluator]:
    """The selection (default: the defaults plus every reference-based evaluator that can
    run here and is configured), always with the behaviour evaluators."""
    from ragpulse.plugins import evaluator_class, evaluator_classes, load_evaluators

    evaluation = settings.evaluation
    wanted = load_evaluators(list(metrics) if metrics else evaluation.evaluators, evaluation)
    names = {e.name for e in wanted}
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


# --- Input ---------------------------------------------------------------------------------


def flatten(row: dict[str, Any]) -> dict[str, Any]:
    """A regression-set line (``{"set", "record", "results", ...}``, written from live
    traffic) as a test-set row: the record's question (its documents and answer as the
    recorded run), and the reference fields added at the top level of the line."""
    record = row.get("record")
    if not isinstance(record, dict) or "question" in row:
        return row
    flat = {k: v for k, v in row.items() if k not in SET_LINE_KEYS}
    flat["question"] = record.get("question")
    if "documents" in record:
        flat.setdefault("contexts", record["documents"])
    if "answer" in record:
        flat.setdefault("answer", record["answer"])
    if isinstance(row.get("set"), str):
        flat.setdefault("metadata", {"set": row["set"]})
    return flat


@dataclass
class TestSet:
    """The input, read and checked before any call."""

    parsed: list[ParsedLine]
    questions: dict[int, str] = field(default_factory=dict)
    refs: dict[int, Reference | None] = field(default_factory=dict)
    recorded: dict[int, list[Document]] = field(default_factory=dict)
    records: dict[int, RagRecord] = field(default_factory=dict)
    fields: FieldReport = field(default_factory=FieldReport)
    pool: list[Document] = field(default_factory=list)


def read_set(path: Path, layout: Layout = JSONL) -> TestSet:
    """Every row parsed (JSON Lines, or a JSON document's array as ``layout`` says); rows
    in ragpulse's field names (regression-set lines flattened, Ragas/DeepEval names
    mapped); questions, references and recorded runs by line."""
    from ragpulse.offline.io import input_rows, open_text

    with open_text(path) as f:
        parsed = list(input_rows(f, layout, keep_text=False))
    found = TestSet(parsed)
    for p in parsed:
        if p.row is None:
            continue
        flat = flatten(p.row)
        p.row, mapped = canonical_row(flat)
        found.fields.add(flat, mapped)
        record = row_to_record(p.row, p.line)
        if not record.question.strip():
            continue
        found.questions[p.line] = record.question
        found.refs[p.line] = record.reference
        found.records[p.line] = record
        if "contexts" in p.row or "documents" in p.row:
            found.recorded[p.line] = record.documents
    found.pool = document_pool(list(found.refs.values()))
    return found


def inputs_problem(data: TestSet, conditions: Sequence[str], retriever: bool) -> str | None:
    """One line when some condition cannot be built for any row (naming what is missing
    and the conditions that can run); None when each has a row (the rest are skipped)."""
    impossible: dict[str, list[str]] = {}
    for condition in conditions:
        reasons = [
            input_problem(condition, data.refs[n], retriever or n in data.recorded, data.pool)
            for n in data.questions
        ]
        if data.questions and all(reasons):
            why = str(Counter(reasons).most_common(1)[0][0])
            impossible.setdefault(why, []).append(condition)
    if not impossible:
        return None
    ids_only = sum(
        1 for r in data.refs.values() if r is not None and r.context_ids and not r.contexts
    )
    parts = []
    for why, names in impossible.items():
        if why == NO_RETRIEVAL:
            parts.append(
                f"--conditions {','.join(names)} need --retriever or rows with a recorded run "
                "(contexts); no row has contexts"
            )
            continue
        if why == NO_REFERENCE_CONTEXTS and ids_only:
            why = why.removesuffix(")") + f"; {ids_only} rows have reference_context_ids only)"
        parts.append(f"cannot build {','.join(names)} for any row: {why}")
    left = [c for c in conditions if all(c not in names for names in impossible.values())]
    fix = f" (--conditions {','.join(left)})" if left else ""
    return "; ".join(parts) + f". Add what is missing or leave those conditions out{fix}"


# --- The command -------------------------------------------------------------------------


@dataclass
class _Progress:
    """What an interrupted run has to say: lines written, answers in hand."""

    out: StreamedOutput | None = None
    feed: Feed[Item] | None = None
    in_hand: list[Item] = field(default_factory=list)
    cases: int = 0


def run(options: HarnessOptions, console: Console, settings: Callable[[], Settings]) -> int:
    """``eval --generator``: 0 when done and the gates pass; 1 when a gate fails or no
    call answered; 2 for a path or usage problem (before any call); 128 + the signal on
    SIGINT/SIGTERM, the rows scored so far kept. ``settings`` loads the settings, once the
    inputs are known to be usable; the report goes to ``console``, progress to stderr. A
    generator or retriever that does not load raises ConfigError naming its flag."""
    from ragpulse.offline.io import input_layout, path_problem

    problem = path_problem(options.input, options.output)
    layout: Layout | str = JSONL
    if problem is None:
        layout = input_layout(options.input)
        problem = layout if isinstance(layout, str) else None
    chosen = CONDITIONS if options.conditions is None else options.conditions
    conditions: list[str] = list(dict.fromkeys(chosen))
    if problem is None:
        problem = conditions_problem(conditions)
    for flag, spec in (("--generator", options.generator), ("--retriever", options.retriever)):
        if problem is None and spec is not None:
            problem = spec_problem(spec, flag)
    if problem is None and (options.concurrency < 1 or options.timeout_s <= 0):
        problem = "--concurrency must be at least 1 and --timeout-s positive"
    if problem is None:
        problem = _gate_problem(options, conditions)
    data = None
    if problem is None and not isinstance(layout, str):
        data = read_set(options.input, layout)
        problem = inputs_problem(data, conditions, options.retriever is not None)
    if problem is not None or data is None:
        console.print(f"[red]{escape(str(problem))}[/red]", highlight=False, soft_wrap=True)
        return 2
    state = _Progress()
    try:
        with SignalStop() as stop, app_export(options.export):
            return _run(options, conditions, data, console, settings, stop, state)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        return _interrupted(options, state, signum)


def _interrupted(options: HarnessOptions, state: _Progress, signum: int) -> int:
    """Keep what was done: the answers in hand and ready are written without results."""
    import logging

    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # abandoned calls, on purpose
    unscored: list[Item] = []
    if state.out is not None:
        ready = [*state.in_hand, *(state.feed.drain() if state.feed else [])]
        done = state.out.lines()
        lines = []
        for item in ready:
            if (item.line, item.index) in done:  # the interrupt came as its batch ended
                continue
            row = output_row(item)
            if item.answered and not item.results:
                row["not_scored"] = "interrupted"
                unscored.append(item)
            lines.append(((item.line, item.index), json.dumps(row, default=str)))
        state.out.stop.signum = None  # the signal is being handled: write these lines
        state.out.write(lines)
        state.out.close()
    written = state.out.written if state.out is not None else 0
    console = Console(stderr=True)  # where plain eval says it, beside the progress bar
    kept = f" ({len(unscored)} answered but not scored, written with not_scored)" * bool(unscored)
    console.print(
        f"[red]interrupted ({signal.Signals(signum).name}):[/red] {written} of {state.cases} "
        f"cases written to {escape(str(options.output))}{kept}; no report",
        highlight=False,
        soft_wrap=True,
    )
    return 128 + signum


def _gate_problem(options: HarnessOptions, conditions: Sequence[str]) -> str | None:
    """A --max-drop that does not parse or names no metric, or a --baseline that does
    not read or shares no condition with this run, before any call is made (an hour of
    generation must not end in a usage error)."""
    from ragpulse.offline.gates import parse_gates
    from ragpulse.offline.slices import baseline_problem, gate_names_problem

    try:
        gates = parse_gates(options.max_drop)
    except ValueError as exc:
        return str(exc)
    problem = gate_names_problem(gates)
    if problem is None and options.baseline is not None:
        try:
            baseline = json.loads(Path(options.baseline).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            return f"--baseline {options.baseline}: {error_text(exc)}"
        problem = baseline_problem(baseline, conditions, str(options.baseline))
    return problem


def _run(
    options: HarnessOptions,
    conditions: list[str],
    data: TestSet,
    console: Console,
    load_settings: Callable[[], Settings],
    stop: SignalStop,
    state: _Progress,
) -> int:
    from contextlib import closing

    from ragpulse.evaluation import load_evaluators_safely
    from ragpulse.offline.run import offline_run

    generator = load_function(options.generator, "--generator")
    retriever = load_function(options.retriever, "--retriever") if options.retriever else None
    settings = load_settings()
    items: list[Item] = []
    first_lines = []
    for p in data.parsed:
        if p.row is None:
            bad: dict[str, Any] = {"line": p.line, "raw": p.raw, "error": p.error}
            first_lines.append(((p.line, -1), json.dumps(bad)))
        elif p.line not in data.questions:
            bad = {**p.row, "line": p.line, "error": "no question"}
            first_lines.append(((p.line, -1), json.dumps(bad, ensure_ascii=False, default=str)))
        else:
            retrieval = retriever is not None or p.line in data.recorded
            for i, condition in enumerate(conditions):
                item = Item(p.line, i, condition, p.row)
                item.skipped = input_problem(condition, data.refs[p.line], retrieval, data.pool)
                items.append(item)
    state.cases = len(items)

    def plan(item: Item, retrieved: list[Document] | None, error: str | None) -> None:
        condition = item.condition
        ref = data.refs[item.line]
        qid = ref.question_id if ref and ref.question_id else f"line-{item.line}"
        uses_retrieved = condition in USES_RETRIEVAL or (
            condition == "injected" and (retriever is not None or item.line in data.recorded)
        )
        if uses_retrieved and error is not None:
            item.case = Case(condition=condition, documents=[])
            item.error = error
            return
        rng = rng_for(options.seed, qid, condition)
        item.case = build_case(condition, ref, retrieved, data.pool, rng)
        item.skipped = item.case.skip

    calls = Calls(data.questions, data.recorded, retriever, generator, plan,
                  options.concurrency, options.timeout_s)  # fmt: skip
    _keep_conversations(calls, data)
    progress, task, context = offline_run(
        settings, "answering and scoring", len(items), Console(stderr=True)
    )
    rows: dict[tuple[int, int], dict[str, Any]] = {}
    with closing(context):
        evaluators = load_evaluators_safely(select_evaluators(options.metrics, settings), context)
        out = state.out = StreamedOutput(options.output, stop)
        out.write(first_lines)
        feed = state.feed = Feed[Item]()
        _start_calls(calls, items, feed)
        with progress:
            for batch in feed.batches(max(1, options.batch_size)):
                state.in_hand = batch
                _score([i for i in batch if i.answered], evaluators)
                lines = []
                for item in batch:
                    row = rows[(item.line, item.index)] = output_row(item)
                    lines.append(
                        ((item.line, item.index), json.dumps(row, ensure_ascii=False, default=str))
                    )
                out.write(lines)
                state.in_hand = []
                progress.advance(task, len(batch))
        out.finish()
    answered = sum(i.answered for i in items)
    skipped = [i for i in items if i.skipped is not None]
    console.print(
        f"{answered} of {len(items)} cases answered ({len(data.questions)} questions x "
        f"{len(conditions)} conditions) -> {options.output}"
    )
    for line in _skipped_lines(skipped):
        console.print(f"[yellow]{escape(line)}[/yellow]", highlight=False, soft_wrap=True)
    notes = _notes(items, data)
    ordered = [rows[k] for k in sorted(rows)]
    passed = _report(options, ordered, conditions, notes, console)
    tried = [i for i in items if i.skipped is None]
    if not tried:
        console.print("[red]nothing generated: every case was skipped (see above)[/red]")
        return 1
    if all(i.error is not None for i in tried):
        first = next(i.error for i in tried if i.error)
        console.print(f"[red]every case failed: {escape(str(first))}[/red]")
        return 1
    return 0 if passed else 1


def _skipped_lines(skipped: Sequence[Item]) -> list[str]:
    """``skipped 5 gold cases: no reference_contexts (...)``, one line per reason."""
    counts = Counter((i.condition, i.skipped) for i in skipped)
    return [
        f"skipped {n} {condition} case{'s' * (n != 1)}: {why}"
        for (condition, why), n in counts.most_common()
    ]


def _notes(items: Sequence[Item], data: TestSet) -> list[str]:
    """What was kept with an error, which fields were read or not, how many rows lacked
    which reference field (``expected_behavior`` is derived from ``is_answerable_label``:
    missing only when both are)."""
    notes = []
    bad = sum(p.row is None for p in data.parsed)
    if bad:
        notes.append(f"{bad} unreadable lines written back with an error field")
    no_question = sum(p.row is not None and p.line not in data.questions for p in data.parsed)
    if no_question:
        notes.append(f"{no_question} rows without a question written back with an error field")
    errors = [i for i in items if i.error]
    if errors:
        notes.append(f"{len(errors)} error rows (first: line {errors[0].line}: {errors[0].error})")
    notes += data.fields.lines()
    rows = [p.row for p in data.parsed if p.row is not None and p.line in data.questions]
    for key in _REFERENCE_FIELDS:
        missing = sum(not r.get(key) for r in rows)
        if missing:
            notes.append(f"{missing} of {len(rows)} rows lack {key}")
    behaviour = sum(
        r.get("expected_behavior") is None and r.get("is_answerable_label") is None for r in rows
    )
    if behaviour:
        notes.append(f"{behaviour} of {len(rows)} rows lack expected_behavior and "
                     "is_answerable_label")  # fmt: skip
    return notes


def _report(
    options: HarnessOptions,
    rows: list[dict[str, Any]],
    conditions: list[str],
    notes: list[str],
    console: Console,
) -> bool:
    """The sliced report (:mod:`ragpulse.offline.slices`); returns whether the gates passed."""
    from ragpulse.offline.slice_report import print_sliced, write_sliced_reports
    from ragpulse.offline.slices import sliced_summary

    baseline = (
        json.loads(Path(options.baseline).read_text(encoding="utf-8")) if options.baseline else None
    )
    summary = sliced_summary(
        rows, _list(options.slice_by), baseline, list(options.max_drop), conditions=conditions
    )
    summary.setdefault("notes", notes)
    paths = write_sliced_reports(summary, options.output, options.report_dir, options.html)
    print_sliced(summary, console)
    for kind, path in paths.items():
        console.print(f"{kind}: {path}")
    return bool(summary.get("passed", True))


def _list(names: Sequence[str] | None) -> list[str] | None:
    return list(names) if names else None
