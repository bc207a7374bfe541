"""``ragpulse eval --from URL``: score the traces a tracing tool already stores and write
the results back to it (:mod:`ragpulse.collector.stored`)."""

from __future__ import annotations

import argparse
import signal
import time
from pathlib import Path
from typing import Any

from rich.markup import escape
from rich.text import Text

from ragpulse.cli.common import (
    console,
    evaluation_overrides,
    load_settings,
    print_summary,
    sink_overrides,
)


def evaluate_stored(args: argparse.Namespace) -> int:
    """Exit 0 when every trace found was scored and its results delivered; 1 when some
    results could not be delivered or no evaluator could run; 2 for a usage or settings
    problem, or a tool that cannot be reached or refuses (one line naming it); 128 + the
    signal on SIGINT or SIGTERM (what was delivered stays)."""
    from ragpulse.collector.service import Collector
    from ragpulse.collector.stored.backfill import backfill
    from ragpulse.collector.stored.common import SourceMetrics, parse_time
    from ragpulse.collector.stored.tool import open_reader, parse_backend_url
    from ragpulse.collector.stored.write_back import (
        DryRunSink,
        with_write_back,
        without_write_back,
    )
    from ragpulse.errors import BackendError
    from ragpulse.offline.score import SummarySink

    other = [f for f in ("replay", "generator", "control") if getattr(args, f, None)]
    if other or args.input is not None:
        what = ", ".join("--" + f for f in other) or f"the input file {args.input}"
        console.print(f"[red]--from reads a tracing tool: it takes no {escape(what)}[/red]")
        return 2
    if args.limit is not None and args.limit < 1:
        console.print("[red]--limit must be at least 1[/red]")
        return 2
    url = parse_backend_url(args.from_url)  # ConfigError: one line, exit 2
    now = time.time_ns()
    since = parse_time(args.since or "24h", now)
    # Until now by default: a trace that starts while the run reads is the next run's.
    until = parse_time(args.until, now) if args.until else now
    if until <= since:
        console.print("[red]--until must be later than --since[/red]")
        return 2
    evaluation = evaluation_overrides(args) or {}
    if args.metrics:
        evaluation["evaluators"] = args.metrics
    overrides: dict[str, Any] = {
        "evaluation": evaluation or None,
        "stored_traces": {"url": args.from_url},
        "sinks": sink_overrides({"jsonl.path": args.output}),
    }
    settings = load_settings(args.config, **overrides)
    if args.output is not None:  # -o is this run's results, as for a file: written anew
        Path(args.output).parent.mkdir(parents=True, exist_ok=True)
        Path(args.output).write_text("")
    tally = SummarySink()
    extra: list[Any] = [tally]
    if args.dry_run:
        extra.append(DryRunSink.for_tool(url, settings))
        settings = without_write_back(settings, url)
    else:
        settings = with_write_back(settings, url)
    collector = Collector(settings, receiver=False, metrics_server=False, extra_sinks=extra)
    metrics = SourceMetrics(collector.metrics.registry)
    reader = open_reader(url, settings.stored_traces, metrics)
    if not collector.pipeline.evaluators:
        console.print("[red]no evaluator can run[/red] (see the errors above)")
        return 1
    collector.start()
    caught = [signal.SIGINT]

    def terminated(signum: int, frame: object) -> None:
        caught[0] = signal.SIGTERM
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        run = backfill(
            collector,
            reader,
            since,
            until,
            limit=args.limit,
            deliver_timeout_s=settings.shutdown_timeout_s + 300.0,
        )
    except BackendError as exc:
        console.print(Text.assemble(("error: ", "red"), str(exc)), soft_wrap=True)
        collector.stop()
        return 2
    except KeyboardInterrupt:
        name = signal.Signals(caught[0]).name
        console.print(f"[red]interrupted ({name}):[/red] what was delivered stays in the tool")
        collector.stop(timeout=5.0)
        return 128 + caught[0]
    finally:
        signal.signal(signal.SIGTERM, previous)
        reader.close()
    collector.stop()
    return _report(args, url, run, tally, collector)


def _report(args: argparse.Namespace, url: Any, run: Any, tally: Any, collector: Any) -> int:
    registry = collector.metrics.registry
    tool = url.tool
    if tally.summary.rows:
        where = f" -> {args.output}" if args.output else ""
        print_summary(tally.table(), title=f"{tally.summary.rows} records scored{where}")
    skipped = {
        s.labels["reason"]: int(s.value)
        for metric in registry.collect()
        if metric.name == "ragpulse_traces_skipped"
        for s in metric.samples
        if s.name.endswith("_total") and s.value
    }
    console.print(
        f"{run.traces} traces ({run.spans} spans) read from {tool} at {escape(str(url))} in "
        f"{run.seconds:.1f}s ({run.traces_per_s:.1f} traces/s)"
        + (f"; no RAG record in {skipped}" if skipped else ""),
        highlight=False,
        soft_wrap=True,
    )
    if run.traces == 0:
        console.print("[yellow]no trace started in that window: see --since and --until[/yellow]")
    if args.dry_run:
        console.print(f"dry run: nothing was written to {tool}")
        return 0
    failed = sum(
        registry.get_sample_value("ragpulse_sink_items_total", {"sink": tool, "outcome": o}) or 0
        for o in ("failed", "dropped")
    )
    delivered = (
        registry.get_sample_value(
            "ragpulse_sink_items_total", {"sink": tool, "outcome": "delivered"}
        )
        or 0
    )
    if tool in [s.name for s in collector.sinks]:
        console.print(f"{int(delivered)} results written back to {tool}", highlight=False)
    if failed or not run.delivered:
        console.print(
            f"[red]{int(failed)} results could not be written back to {tool}[/red] (see the "
            "warnings above); running again replaces what was written",
            soft_wrap=True,
        )
        return 1
    return 0
