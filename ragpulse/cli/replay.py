"""``ragpulse eval SET -o OUT --replay module:function [--control ...]``: the command.

Reads the set (a file or a set folder), replays every row through the pipeline
(:func:`ragpulse.offline.replay.replay`) and scores and writes each row as its calls finish, so
an interrupted run keeps what it did (answers not yet scored are written with
``not_scored``); a finished run's output is put in input order. Then the comparison,
the reports and the exit status.

A set that live traffic kept for a bad score (``low_score``, ``label``) or bad feedback
was selected by its outcome: replayed through an unchanged pipeline, its scores rise on
their own (regression to the mean). The command says so, with the rule, and
``--control`` gives the comparison that is fair to a change:

* ``--control MODULE:FUNCTION``: the unchanged pipeline; every row is replayed through
  it too, and the change is judged against it on the same rows (``--max-drop`` gates
  that comparison);
* ``--control SET``: a random sample of live traffic (e.g. the ``baseline`` set),
  replayed through the changed pipeline too (``OUT.control.jsonl``): the change on
  traffic nobody picked; ``--max-drop`` gates it as well as the main set.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape

from ragpulse.evaluators.base import AnyEvaluator
from ragpulse.offline.io import Feed, Interrupted, SignalStop, StreamedOutput
from ragpulse.offline.json_rows import Layout
from ragpulse.offline.replay import ReplayRow
from ragpulse.offline.score import ParsedLine


@dataclass
class _Progress:
    """What an interrupted run has to say: lines written, rows in hand."""

    outputs: list[StreamedOutput] = field(default_factory=list)
    feed: Feed[ReplayRow] | None = None
    in_hand: list[ReplayRow] = field(default_factory=list)
    line: Callable[[ReplayRow, bool], str] | None = None
    rows: int = 0


def replay_file(args: argparse.Namespace, console: Console) -> int:
    """``eval --replay``: replay, score, compare, report; 1 when a --max-drop is exceeded,
    nothing was replayed, or an evaluator failed on every replayed row; 2 for a path or
    usage problem (found before the pipeline is imported); 128 + the signal on
    SIGINT/SIGTERM, the rows scored so far kept."""
    from ragpulse.offline.io import path_problem

    problem = path_problem(args.input, args.output, folder_ok=True) or _flags_problem(args)
    if problem:
        console.print(f"[red]{escape(problem)}[/red]", highlight=False, soft_wrap=True)
        return 2
    files, code = _readable(args.input, console)
    if code is not None:
        return code
    from ragpulse.offline.calls import app_export

    state = _Progress()
    try:
        # The replay captures the app's spans in memory; what its import configures sends none.
        with SignalStop() as stop, app_export(False):
            return _replay_run(args, files, console, stop, state)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        return _interrupted(args, console, state, signum)


def _flags_problem(args: argparse.Namespace) -> str | None:
    """Usage problems found before anything is imported: a --max-drop that does not parse
    or names no metric, a --control that is neither a function nor a set."""
    from ragpulse.function_loader import spec_problem
    from ragpulse.plugins import evaluator_names, metric_names
    from ragpulse.suggestions import did_you_mean

    if args.concurrency < 1:
        return "--concurrency must be at least 1"
    try:
        rules = _drop_limits(args)
    except ValueError as exc:
        return str(exc)
    for rule in rules:
        known = evaluator_names() if "/" in rule else metric_names()
        if rule not in known:
            return f"--max-drop {rule}: no such metric" + did_you_mean(rule, known)
    control = args.control
    if control is not None and not Path(control).exists() and spec_problem(control, "--control"):
        return (
            f"--control takes MODULE:FUNCTION (the unchanged pipeline) or a set file or "
            f"folder (a random sample of live traffic); {control!r} is neither"
        )
    return None


def _drop_limits(args: argparse.Namespace) -> dict[str, float]:
    """The --max-drop items as {METRIC[/METHOD]: DROP} (:mod:`ragpulse.offline.gates`)."""
    from ragpulse.offline.gates import drop_limits, parse_gates

    return drop_limits(parse_gates(args.max_drop or []))


def _readable(path: Path, console: Console) -> tuple[list[tuple[Path, Layout]], int | None]:
    """The set's readable files, each with how its rows lie; an exit code when there is
    none."""
    from ragpulse.offline.io import input_layout
    from ragpulse.offline.replay import input_files

    files = input_files(path)
    layouts = {f: input_layout(f) for f in files}
    problems = [why for why in layouts.values() if isinstance(why, str)]
    if not files or len(problems) == len(files):
        why = problems[0] if problems else f"no rows: no *.jsonl file in {path}"
        console.print(f"[red]{escape(why)}[/red]", highlight=False, soft_wrap=True)
        return [], 1
    for why in problems:  # a set folder with one bad file: the others still count
        console.print(f"[yellow]{escape(why)}[/yellow]", highlight=False, soft_wrap=True)
    return [(f, layout) for f, layout in layouts.items() if not isinstance(layout, str)], None


@dataclass
class _Input:
    rows: list[ReplayRow]
    skipped: int
    bad_lines: int
    first_lines: list[tuple[tuple[int, ...], str]]
    parsed: int


def _read(files: Sequence[tuple[Path, Layout]]) -> _Input:
    from ragpulse.offline.io import count_lines, input_rows, open_text
    from ragpulse.offline.replay import join_recorded, to_rows

    def read() -> Iterator[ParsedLine]:
        """Every file's rows, numbered on from the file before (lines as ``cat`` joins
        them; rows of a JSON array by their place)."""
        offset = 0
        for file, layout in files:
            last = offset
            with open_text(file) as f:
                for p in input_rows(f, layout, keep_text=False):
                    p.line += offset
                    last = p.line
                    yield p
            offset = offset + count_lines(file) if layout.kind == "jsonl" else last

    parsed = list(read())
    found = _Input([], 0, 0, [], len(parsed))
    for p in parsed:
        if p.row is None:
            found.bad_lines += 1
            bad = {"line": p.line, "raw": p.raw, "error": p.error}
            found.first_lines.append(((p.line,), json.dumps(bad)))
            continue
        rows = to_rows(p)
        if not rows:
            found.skipped += 1
            found.first_lines.append(
                ((p.line,), json.dumps({"line": p.line, "error": "no question to replay"}))
            )
        else:
            found.rows.extend(rows)
    join_recorded(found.rows)  # a turn recorded alone: its conversation's earlier ones
    return found


def _nothing_to_replay(found: _Input) -> str | None:
    if found.rows:
        return None
    if not found.parsed:
        return "no rows: the input has no non-blank lines"
    if found.bad_lines == found.parsed:
        return f"nothing to replay: all {found.bad_lines} lines are unreadable"
    return f"nothing to replay: none of the {found.parsed} rows has a question"


def _replay_run(
    args: argparse.Namespace,
    files: list[tuple[Path, Layout]],
    console: Console,
    stop: SignalStop,
    state: _Progress,
) -> int:
    """The body of :func:`replay_file`, over the readable ``files`` of its input."""
    from ragpulse.cli.common import evaluation_overrides, load_settings
    from ragpulse.evaluation import load_evaluators_safely
    from ragpulse.function_loader import load_function
    from ragpulse.offline.replay import recorded_names, selection
    from ragpulse.offline.run import offline_run
    from ragpulse.plugins import evaluator_names, load_evaluators
    from ragpulse.redaction import Redactor

    max_drop = _drop_limits(args)
    fn = load_function(args.replay, "--replay")
    control_set = Path(args.control) if args.control and Path(args.control).exists() else None
    control_fn = (
        load_function(args.control, "--control") if args.control and control_set is None else None
    )
    settings = load_settings(args.config, evaluation=evaluation_overrides(args))
    found = _read(files)
    why = _nothing_to_replay(found)
    if why:
        console.print(f"[red]{escape(why)}[/red]", highlight=False, soft_wrap=True)
        return 1
    control_input = None
    if control_set is not None:
        control_files, code = _readable(control_set, console)
        if code is not None:
            return 2
        control_input = _read(control_files)
        if not control_input.rows:
            console.print(f"[red]--control {escape(str(control_set))}: nothing to replay[/red]")
            return 2
    rows = found.rows
    selection_found = selection(rows)

    selection_names = args.metrics
    if not selection_names:
        recorded = recorded_names(rows)
        known = set(evaluator_names())
        absent = [n for n in recorded if n not in known]
        if absent:
            console.print(f"[yellow]recorded evaluators not installed here:[/] {', '.join(absent)}")
        selection_names = [n for n in recorded if n in known] or settings.evaluation.evaluators
    total = len(rows) + (len(control_input.rows) if control_input else 0)
    state.rows = total
    progress, task, context = offline_run(settings, "replaying and scoring", total, console)
    wanted = load_evaluators(selection_names, settings.evaluation)
    evaluators = load_evaluators_safely(wanted, context)
    if not evaluators:
        console.print("[red]no evaluator can run[/red] (see the errors above)")
        return 2
    redactor = Redactor.from_settings(settings, "eval_output")  # off unless apply_to names it

    def line_of(row: ReplayRow, scored: bool = True) -> str:
        from ragpulse.offline.replay import output_line

        text = output_line(row, **({} if scored else {"not_scored": "interrupted"}))
        if redactor.enabled:
            text = json.dumps(redactor.redact_record_dump(json.loads(text)), ensure_ascii=False)
        return text

    state.line = line_of
    with progress, closing(context):

        def stream(rows: list[ReplayRow], output: Path, first: Sequence[Any]) -> None:
            out = StreamedOutput(output, stop)
            state.outputs.append(out)
            out.write(first)
            _stream(rows, fn, control_fn, args, evaluators, out, state,
                    lambda n: progress.advance(task, n))  # fmt: skip
            out.finish()

        stream(rows, args.output, found.first_lines)
        if control_input is not None:
            stream(control_input.rows, control_output(args.output), control_input.first_lines)

    names = [e.name for e in evaluators]
    summary = _summaries(args, found, control_input, names, max_drop, selection_found)
    _finish_report(args, summary, console)
    not_loaded = [e.name for e in wanted if e not in evaluators]
    failure = _replay_failure(rows, evaluators, not_loaded)
    if failure:
        console.print(f"[red]{escape(failure)}[/red]", highlight=False, soft_wrap=True)
        return 1
    return 0 if summary["passed"] else 1


def control_output(output: Path) -> Path:
    """Where the control set's rows go: ``OUT.control.jsonl`` beside OUT."""
    return output.with_name(f"{output.stem}.control{output.suffix or '.jsonl'}")


def _stream(
    rows: list[ReplayRow],
    fn: Callable[..., Any],
    control_fn: Callable[..., Any] | None,
    args: argparse.Namespace,
    evaluators: Sequence[AnyEvaluator],
    out: StreamedOutput,
    state: _Progress,
    advance: Callable[[int], None],
) -> None:
    """Replay on worker threads; score and write each batch of finished rows here."""
    import threading

    from ragpulse.offline.replay import replay, score

    feed = state.feed = Feed[ReplayRow]()

    def calls() -> None:
        error: BaseException | None = None
        try:
            replay(rows, fn, args.concurrency, control=control_fn, done=feed.put)
        except BaseException as exc:  # handed to the main thread, never lost here
            error = exc
        feed.close(error)

    threading.Thread(target=calls, name="ragpulse-replay-calls", daemon=True).start()
    line_of = state.line or (lambda row, scored: "")
    for batch in feed.batches(max(1, args.batch_size)):
        state.in_hand = batch
        score(batch, evaluators, args.batch_size)
        out.write((row.key, line_of(row, True)) for row in batch)
        state.in_hand = []
        advance(len(batch))


def _interrupted(args: argparse.Namespace, console: Console, state: _Progress, signum: int) -> int:
    """Keep what was done: the rows replayed but not scored are written without scores."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)  # abandoned calls, on purpose
    unscored = 0
    if state.outputs and state.line is not None:
        out = state.outputs[-1]
        ready = [*state.in_hand, *(state.feed.drain() if state.feed else [])]
        done = out.lines()
        lines = [(r.key, state.line(r, False)) for r in ready if r.key not in done]
        unscored = len(lines)
        out.stop.signum = None  # the signal is being handled: write these lines
        out.write(lines)
        for output in state.outputs:
            output.close()
    written = sum(o.written for o in state.outputs)
    kept = f" ({unscored} replayed but not scored, written with not_scored)" * bool(unscored)
    where = ", ".join(str(o.path) for o in state.outputs) or str(args.output)
    console.print(
        f"[red]interrupted ({signal.Signals(signum).name}):[/red] {written} of {state.rows} "
        f"rows written to {escape(where)}{kept}; no report",
        highlight=False,
        soft_wrap=True,
    )
    return 128 + signum


# --- Selection, control, summary -----------------------------------------------------------


def _summaries(
    args: argparse.Namespace,
    found: _Input,
    control_input: _Input | None,
    names: list[str],
    max_drop: Mapping[str, float],
    selection_found: list[dict[str, Any]],
) -> dict[str, Any]:
    """The main comparison, with the selection, and the control's (which the thresholds
    then judge: against the control pipeline, or on the control set as well)."""
    from ragpulse.offline.replay import against_control, selection, summarize

    rows = found.rows
    meta = {"input": str(args.input), "output": str(args.output), "replay": args.replay,
            "evaluators": names}  # fmt: skip
    pipeline_control = any(r.control is not None for r in rows)
    summary = summarize(
        rows, names, {} if pipeline_control else max_drop, bad_lines=found.bad_lines,
        skipped=found.skipped, meta=meta,
    )  # fmt: skip
    selected_on = {s["metric"] for s in selection_found if s["biased"] and s["metric"]}
    for m in summary["metrics"]:
        m["selected_on"] = m["evaluator"] in selected_on or m["metric"] in selected_on
    summary["selection"] = selection_found
    summary["selected_by_outcome"] = any(s["biased"] for s in selection_found)
    if pipeline_control:
        twins = [r.control for r in rows if r.control is not None]
        alone = summarize(twins, names, {})
        net = summarize(against_control(rows), names, max_drop)
        summary["control"] = {
            "kind": "pipeline",
            "control": args.control,
            "replayed": alone["replayed"],
            "replay_errors": alone["replay_errors"],
            "metrics": alone["metrics"],
            "net": {k: net[k] for k in ("metrics", "regressions", "worst_regressions")},
        }
        summary["thresholds"] = [{**t, "against": "control"} for t in net["thresholds"]]
        # The regressions that matter are the change's, not the recorded run's.
        summary["regressions"] = net["regressions"]
        summary["worst_regressions"] = net["worst_regressions"]
        summary["regressions_against"] = "control"
    elif control_input is not None:
        other = summarize(
            control_input.rows, names, max_drop, bad_lines=control_input.bad_lines,
            skipped=control_input.skipped,
        )  # fmt: skip
        summary["control"] = {
            "kind": "set",
            "control": args.control,
            "output": str(control_output(args.output)),
            "rows": other["rows"],
            "replayed": other["replayed"],
            "replay_errors": other["replay_errors"],
            "metrics": other["metrics"],
            "selection": selection(control_input.rows),
        }
        summary["thresholds"] += [
            {**t, "rule": f"{t['rule']} (control set)", "against": "control set"}
            for t in other["thresholds"]
        ]
    summary["passed"] = not any(t["exceeded"] for t in summary["thresholds"])
    return summary


def _finish_report(args: argparse.Namespace, summary: dict[str, Any], console: Console) -> None:
    from ragpulse.offline.report import write_reports

    paths = write_reports(summary, args.output, args.report_dir, args.html)
    print_replay(summary)
    for kind, path in paths.items():
        console.print(f"{kind}: {path}")


def _replay_failure(
    rows: list[ReplayRow], evaluators: Sequence[AnyEvaluator], not_loaded: list[str]
) -> str | None:
    """One line when the replay did not do its job: every call failed, an evaluator
    failed on every replayed row, or one could not load."""
    replayed = [r for r in rows if r.after is not None]
    if not replayed:
        first = next((r.error for r in rows if r.error), "no answer")
        return f"every replay call failed ({len(rows)} rows): {first}"
    for e in evaluators:  # a conversation metric scores no turn: no result on any row
        results = [row.after_results.get(e.name) for row in replayed]
        errors = [r.error for r in results if r is not None]
        if errors and all(errors):
            return f"{e.name} failed on every replayed row ({len(replayed)}): {errors[0]}"
    if not_loaded:
        return f"could not load {', '.join(not_loaded)} (see the errors above)"
    return None


def print_replay(summary: dict[str, Any]) -> None:
    from ragpulse.cli.common import stdout, table
    from ragpulse.offline.report import (
        SCORE_HEADER,
        THRESHOLD_HEADER,
        WORST_HEADER,
        control_rows,
        count,
        score_rows,
        selection_line,
        threshold_rows,
        worst_rows,
    )

    out = stdout()
    title = (
        f"{summary['replayed']} of {summary['rows']} rows replayed with {summary['replay']} "
        f"-> {summary['output']}"
    )
    out.print(table(title, SCORE_HEADER, score_rows(summary)))
    line = selection_line(summary)
    if line:
        out.print(f"[yellow]{escape(line)}[/yellow]", highlight=False)
    for title, header, rows in control_rows(summary):
        out.print(table(title, header, rows))
    if summary["worst_regressions"]:
        against = " against the control" * (summary.get("regressions_against") == "control")
        title = f"worst regressions{against} ({summary['regressions']} in all)"
        out.print(table(title, WORST_HEADER, worst_rows(summary)))
    else:
        out.print("no regressions")
    if summary["replay_errors"]:
        out.print(f"[yellow]{count(summary['replay_errors'], 'replay error')}[/yellow], e.g.:")
        for e in summary["error_examples"][:5]:
            out.print(f"  line {e['line']}: {e['error']}", markup=False, highlight=False)
    if summary["skipped_no_question"] or summary["unreadable_lines"]:
        out.print(
            f"[yellow]{count(summary['skipped_no_question'], 'row')} without a question, "
            f"{count(summary['unreadable_lines'], 'unreadable line')} (kept with an error field)"
            "[/yellow]"
        )
    if summary["thresholds"]:
        out.print(table("thresholds (--max-drop)", THRESHOLD_HEADER, threshold_rows(summary)))
        for t in summary["thresholds"]:
            if t["exceeded"]:
                drop = "-" if t["drop"] is None else f"{t['drop']:.3f}"
                out.print(
                    f"[red]FAILED[/red] {t['rule']}: {t['evaluator'] or t.get('note')} "
                    f"dropped by {drop}"
                )
