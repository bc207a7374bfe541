"""``ragpulse eval``: score a file, replay a set (``--replay``), or run the test harness
(``--generator``)."""

from __future__ import annotations

import argparse
import signal
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragpulse.cli.common import (
    console,
    csv_list,
    evaluation_overrides,
    judge_flags,
    load_settings,
    print_summary,
    quiet_abandoned_tasks,
    spoken,
    stdout,
)
from ragpulse.config import Settings
from ragpulse.offline.options import BATCH_SIZE, CONCURRENCY, HarnessOptions
from ragpulse.plugin_index import source_urls

if TYPE_CHECKING:
    from ragpulse.offline.io import SignalStop
    from ragpulse.offline.json_rows import Layout


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    ev = sub.add_parser(
        "eval",
        parents=[common],
        help="score a JSONL file of {question, contexts, answer} rows, the traces a tracing "
        "tool stores (--from), or replay a regression set",
        description="Score rows offline; each row is written back with `results` added. "
        "With --from URL, score the traces Phoenix, MLflow or Langfuse stores and write the "
        "results back to it. "
        "With --replay module:function, call that pipeline on every row's question (regression-"
        "set lines or plain rows), score the new answers with the metrics the set recorded, "
        "compare before/after and write a report; exit 1 when a --max-drop is exceeded.",
    )
    ev.add_argument(
        "input",
        type=Path,
        nargs="?",
        help="input JSONL (one row per line) or a JSON array of rows; with --replay also a "
        "set folder; none with --from",
    )
    ev.add_argument(
        "-o",
        "--output",
        type=Path,
        help="output JSONL; with --from optional (the results go back to the tool, and to "
        "this file too when given)",
    )
    ev.add_argument(
        "--metrics",
        type=csv_list,
        help="comma-separated metric or metric/method names (default: evaluation.evaluators "
        "from --config or env RAGPULSE_EVALUATORS, else the default set)",
    )
    ev.add_argument(
        "--config",
        type=Path,
        help="settings file: evaluation.evaluators, evaluation.options, evaluation.judge "
        "(env RAGPULSE_CONFIG)",
    )
    ev.add_argument(
        "--batch-size",
        type=int,
        default=BATCH_SIZE,
        help=f"rows scored together, then written to the output (default {BATCH_SIZE})",
    )
    replay = ev.add_argument_group("replay (regression sets against a changed pipeline)")
    replay.add_argument(
        "--replay",
        metavar="MODULE:FUNCTION",
        help="call this function (sync or async) on each row's question; current dir importable",
    )
    replay.add_argument(
        "--concurrency",
        type=int,
        default=CONCURRENCY,
        help=f"calls in flight at once (default {CONCURRENCY})",
    )
    replay.add_argument(
        "--max-drop",
        action="append",
        metavar="METRIC=VALUE",
        help="fail (exit 1) when the mean score of METRIC (or metric/method) drops by more "
        "than VALUE; repeatable",
    )
    replay.add_argument(
        "--control",
        metavar="MODULE:FUNCTION|SET",
        help="what a change is compared with: the unchanged pipeline (replayed on the same "
        "rows; --max-drop then judges the change against it), or a set of randomly sampled "
        "live traffic (replayed through --replay too, into OUT.control.jsonl). A set kept for "
        "a low score improves on replay through an unchanged pipeline: this tells the two apart",
    )
    replay.add_argument(
        "--report-dir", type=Path, help="where the report goes (default: the output's folder)"
    )
    replay.add_argument("--html", action="store_true", help="also write an HTML report")
    stored_flags(ev)
    harness_flags(ev)
    judge_flags(ev, online=False)


def stored_flags(parser: argparse.ArgumentParser) -> None:
    tools = source_urls()  # the registered tools' URL shapes, read without importing them
    group = parser.add_argument_group(
        "stored traces (score what a tracing tool already holds; results go back to it)"
    )
    group.add_argument(
        "--from",
        dest="from_url",
        metavar="URL",
        help=f"{spoken(list(tools.values()))} ({next(iter(tools), 'TOOL')}+https://... for TLS); "
        "credentials from settings (stored_traces) or the tool's environment variables, never "
        "in the URL",
    )
    group.add_argument(
        "--since",
        metavar="D|TS",
        help="traces whose root span started at or after this: a duration before now (90s, "
        "15m, 2h, 7d) or an ISO 8601 time (default 24h)",
    )
    group.add_argument(
        "--until",
        metavar="D|TS",
        help="traces whose root span started before this: a duration before now or an ISO "
        "8601 time (default: now)",
    )
    group.add_argument("--limit", type=int, metavar="N", help="at most N traces, the newest first")
    group.add_argument(
        "--dry-run",
        action="store_true",
        help="print, one JSON line each, the requests that would write the results back to "
        "the tool, and send none",
    )


def parse_conditions_flag(value: str) -> list[str]:
    from ragpulse.offline.harness import parse_conditions  # only when the flag is given

    try:
        return parse_conditions(value)
    except ValueError as exc:  # argparse prints this message as it is
        raise argparse.ArgumentTypeError(str(exc)) from None


def harness_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "test harness (a labelled test set through a retriever and generator, under "
        "adversarial conditions; --concurrency, --max-drop, --report-dir, --html apply)"
    )
    group.add_argument(
        "--generator",
        metavar="MODULE:FUNCTION",
        help="generator(question, documents) -> answer, sync or async; runs the harness",
    )
    group.add_argument(
        "--retriever", metavar="MODULE:FUNCTION", help="retriever(question) -> documents"
    )
    group.add_argument(
        "--conditions",
        type=parse_conditions_flag,
        help="comma-separated: retrieved,gold,counterfactual,injected,gold_removed,"
        "irrelevant_only (default: all six; retrieved and gold_removed need --retriever or "
        "rows with a recorded run, gold and counterfactual need reference_contexts; a row "
        "that lacks what a condition needs is skipped for it and counted)",
    )
    group.add_argument(
        "--seed",
        type=int,
        default=HarnessOptions.seed,
        help=f"seed of the planted cases ({HarnessOptions.seed})",
    )
    group.add_argument(
        "--timeout-s",
        type=float,
        default=HarnessOptions.timeout_s,
        help="a retriever or generator call past this is an error row "
        f"(default {HarnessOptions.timeout_s:g})",
    )
    group.add_argument(
        "--slice-by",
        type=csv_list,
        metavar="KEYS",
        help="metadata keys to slice the report by (default: every key with few values)",
    )
    group.add_argument(
        "--export",
        action="store_true",
        help="let the app export its spans as its own settings say (default: off while the "
        "harness imports it, unless RAGPULSE_EXPORTER is set)",
    )
    group.add_argument(
        "--baseline",
        type=Path,
        metavar="SUMMARY.json",
        help="an earlier run's summary; figures are compared only where both runs computed "
        "them from the same conditions",
    )


def harness_options(args: argparse.Namespace) -> HarnessOptions:
    """The harness's options from ``eval``'s flags."""

    def names(value: list[str] | None) -> tuple[str, ...] | None:
        return None if value is None else tuple(value)

    return HarnessOptions(
        input=args.input,
        output=args.output,
        generator=args.generator,
        retriever=args.retriever,
        conditions=names(args.conditions),
        metrics=names(args.metrics),
        seed=args.seed,
        concurrency=args.concurrency,
        timeout_s=args.timeout_s,
        batch_size=args.batch_size,
        slice_by=names(args.slice_by),
        baseline=args.baseline,
        max_drop=tuple(args.max_drop or ()),
        report_dir=args.report_dir,
        html=args.html,
        export=args.export,
    )


def evaluate_file(args: argparse.Namespace) -> int:
    """Score ``args.input`` into ``args.output`` row by row, flushing every batch.

    Exit 0 when it did its job; 1 with one line when nothing was scored (empty,
    compressed, binary or unreadable input) or an evaluator failed on every row
    (or could not load); 2 for a path or usage problem (found before anything
    loads); 128 + the signal on SIGINT/SIGTERM, the rows scored so far kept.
    """
    from rich.markup import escape

    from ragpulse.offline.io import Interrupted, SignalStop, input_layout, path_problem

    if getattr(args, "from_url", None):
        from ragpulse.cli.stored import evaluate_stored

        return evaluate_stored(args)
    stored_only = [f for f in ("since", "until", "limit", "dry_run") if getattr(args, f, None)]
    if stored_only:
        flags = ", ".join("--" + f.replace("_", "-") for f in stored_only)
        console.print(f"[red]{flags} need --from[/red]")
        return 2
    if args.input is None or args.output is None:
        console.print("[red]an input file and -o/--output are needed (or --from URL)[/red]")
        return 2
    if getattr(args, "generator", None) and getattr(args, "control", None):
        console.print("[red]--control needs --replay (the harness compares with --baseline)[/red]")
        return 2
    if getattr(args, "generator", None):
        from ragpulse.offline.harness import run as run_harness

        def settings() -> Settings:
            return load_settings(args.config, evaluation=evaluation_overrides(args))

        # a wide report: 160 columns off a tty
        return run_harness(harness_options(args), stdout(), settings)
    harness_only = [
        f
        for f in ("retriever", "conditions", "slice_by", "baseline", "export")
        if getattr(args, f, None)
    ]
    if harness_only:  # never ignored silently
        flags = ", ".join("--" + f.replace("_", "-") for f in harness_only)
        console.print(f"[red]{flags} need --generator[/red]")
        return 2
    if args.replay:
        from ragpulse.cli.replay import replay_file

        return replay_file(args, console)
    unused = [f for f in ("max_drop", "report_dir", "html", "control") if getattr(args, f)]
    if unused:
        flags = ", ".join("--" + f.replace("_", "-") for f in unused)
        console.print(f"[red]{flags} need --replay[/red]")
        return 2
    problem = path_problem(args.input, args.output)
    if problem:
        console.print(f"[red]{escape(problem)}[/red]", highlight=False, soft_wrap=True)
        return 2
    layout = input_layout(args.input)
    if isinstance(layout, str):
        console.print(f"[red]{escape(layout)}[/red]", highlight=False, soft_wrap=True)
        return 1
    written = [0]
    try:
        with SignalStop() as stop:
            return _score_file(args, stop, written, layout)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        quiet_abandoned_tasks()
        console.print(
            f"[red]interrupted ({name}):[/red] {written[0]} rows written to "
            f"{escape(str(args.output))}; the rest of the input was not scored",
            highlight=False,
            soft_wrap=True,
        )
        return 128 + signum


def _score_file(
    args: argparse.Namespace, stop: SignalStop, written: list[int], layout: Layout
) -> int:
    """The body of :func:`evaluate_file`; ``written[0]`` counts the lines on disk."""
    from rich.markup import escape

    from ragpulse.evaluation import load_evaluators_safely
    from ragpulse.offline.conversations import OfflineConversations
    from ragpulse.offline.io import batches, input_rows, open_text, row_count
    from ragpulse.offline.run import offline_run
    from ragpulse.offline.score import Summary, score_rows
    from ragpulse.plugins import load_evaluators
    from ragpulse.redaction import Redactor
    from ragpulse.runtime import tune_for_throughput

    settings = load_settings(args.config, evaluation=evaluation_overrides(args))
    evaluation = settings.evaluation
    selection = args.metrics or evaluation.evaluators
    total = row_count(args.input, layout)
    progress, task, context = offline_run(settings, "scoring", total, console)
    with closing(context):
        wanted = load_evaluators(selection, evaluation)
        evaluators = load_evaluators_safely(wanted, context)
        tune_for_throughput()
        if not evaluators:
            console.print("[red]no evaluator can run[/red] (see the errors above)")
            return 2
        not_loaded = [e.name for e in wanted if e not in evaluators]
        redactor = Redactor.from_settings(settings, "eval_output")
        summary = Summary()
        conversations = OfflineConversations(settings.conversations, evaluators, redactor)
        args.output.parent.mkdir(parents=True, exist_ok=True)
        with (
            open_text(args.input) as source,
            args.output.open("w", encoding="utf-8") as out,
            progress,
        ):
            for batch in batches(input_rows(source, layout), args.batch_size):
                lines = score_rows(
                    batch, evaluators, summary, redactor, settings.agents, conversations
                )
                with stop.writing():  # a signal waits for the batch to be on disk
                    for line in lines:  # one by one: a 50 MB row is not copied twice more
                        out.write(line)
                        out.write("\n")
                    out.flush()
                    written[0] += len(lines)
                progress.update(task, completed=batch[-1].line, description="scoring")
            # The end of the run closes every conversation: their lines end the output.
            lines = conversations.close()
            with stop.writing():
                out.writelines(line + "\n" for line in lines)
                out.flush()
                written[0] += len(lines)
            progress.update(task, completed=total)  # trailing blank lines
        summary.add_conversations(conversations)
    if summary.rows:
        print_summary(summary.table(), title=summary.title(args.output))
    for note in summary.notes():
        console.print(f"[yellow]{escape(note)}[/yellow]", highlight=False, soft_wrap=True)
    failure = summary.failure(not_loaded)
    if failure:
        console.print(f"[red]{escape(failure)}[/red]", highlight=False, soft_wrap=True)
        return 1
    return 0
