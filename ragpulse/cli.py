"""The ``ragpulse`` command: serve | rekey | eval | regression | judge | demo.

Every ``serve`` flag is also a config-file key and a ``RAGPULSE_*`` environment
variable (flag > env > file > default); see ragpulse/config.py.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from ragpulse import __version__, config_command
from ragpulse.config import Settings
from ragpulse.config import load_settings as _load_settings
from ragpulse.errors import ConfigError, PortUnavailable
from ragpulse.settings_env import env_name, setting_default

if TYPE_CHECKING:
    from ragpulse.offline_io import SignalStop
    from ragpulse.plugin_context import PluginContext

console = Console(stderr=True)


def load_settings(config: Path | None, **overrides: Any) -> Settings:
    """Settings for a subcommand, with log lines redacted from here on as they say
    (``redaction.apply_to: [logs]``): a log line can quote the content being scored."""
    from ragpulse.log_redaction import install_log_redaction

    settings = _load_settings(config, **overrides)
    install_log_redaction(settings)
    return settings


def _csv(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
_QUIET_BELOW_DEBUG = ("openai", "httpx", "httpcore", "httpx2", "httpcore2")
"""The judge's HTTP client (httpx in openai 1.x, httpx2 in 3.x) logs every request and each
retry at INFO ("Retrying request to ..."): 36 lines
for one unreachable judge. They are kept for --log-level DEBUG; otherwise the judge
says once, with its URL, that it cannot be reached."""


def _setting_help(text: str, path: str) -> str:
    """``text`` plus the setting's default and its environment variable, both read from
    the settings model so that help cannot drift from what ``serve`` does."""
    default = setting_default(Settings, path)
    if isinstance(default, list):
        default = ",".join(map(str, default))
    shown = "" if default is None else f"default {default or repr(default)}; "
    return f"{text} ({shown}env {env_name(path)})"


def _log_level_flag(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        metavar="LEVEL",
        # Subcommands: SUPPRESS keeps the value given before the subcommand (or INFO).
        default=argparse.SUPPRESS if default is None else default,
        help="DEBUG, INFO, WARNING or ERROR (default INFO); before or after the subcommand",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ragpulse", description="Evaluate live RAG traffic from its OpenTelemetry traces."
    )
    _log_level_flag(parser, "INFO")
    parser.add_argument("--version", action="version", version=f"ragpulse {__version__}")
    common = argparse.ArgumentParser(add_help=False)
    _log_level_flag(common, None)
    sub = parser.add_subparsers(dest="command", required=True)

    serve = sub.add_parser(
        "serve",
        parents=[common],
        help="run the collector: OTLP/HTTP in, scores out",
        description="Receive OTLP traces, evaluate RAG records, export scores. Each flag is "
        "also a config-file key and the environment variable named beside it (flag > "
        "environment > file > default); an unknown RAGPULSE_* variable is an error.",
    )
    serve.add_argument(
        "--config", type=Path, help="YAML or TOML settings file (env RAGPULSE_CONFIG)"
    )
    serve.add_argument(
        "--host", help=_setting_help("bind address of the receiver and /metrics", "host")
    )
    serve.add_argument(
        "--otlp-http-port",
        type=int,
        help=_setting_help("OTLP/HTTP receiver port", "otlp_http_port"),
    )
    serve.add_argument(
        "--otlp-grpc-port",
        type=int,
        help=_setting_help("OTLP/gRPC receiver port, 0 = off", "otlp_grpc_port"),
    )
    serve.add_argument(
        "--metrics-port", type=int, help=_setting_help("Prometheus /metrics port", "metrics_port")
    )
    serve.add_argument(
        "--results-jsonl",
        type=Path,
        help=_setting_help("append one line per evaluated record", "results_jsonl"),
    )
    serve.add_argument(
        "--otlp-export-endpoint",
        help=_setting_help(
            "OTLP/HTTP base URL for evaluation events and spans", "otlp_export_endpoint"
        ),
    )
    serve.add_argument(
        "--evaluators",
        type=_csv,
        help=_setting_help(
            "comma-separated metric or metric/method names; unset: the default set",
            "evaluation.evaluators",
        ),
    )
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        help=_setting_help("OTLP body limit after decompression", "max_body_bytes"),
    )
    serve.add_argument(
        "--source",
        choices=["otlp_http", "kafka"],
        help=_setting_help("where spans come from", "source"),
    )
    _kafka_flags(serve, "kafka.group")
    _judge_flags(serve, online=True)

    rekey = sub.add_parser(
        "rekey",
        parents=[common],
        help="split unkeyed OTLP batches from Kafka into per-trace messages keyed by trace id",
        description="Needed when producers do not key messages by trace id (the Collector "
        "without partition_traces_by_id, rotel): reads --kafka-input-topic, writes "
        "--kafka-topic, which `ragpulse serve --source kafka` reads.",
    )
    rekey.add_argument(
        "--config", type=Path, help="YAML or TOML settings file (env RAGPULSE_CONFIG)"
    )
    rekey.add_argument("--host", help=_setting_help("bind address of /metrics", "host"))
    rekey.add_argument(
        "--metrics-port", type=int, help=_setting_help("Prometheus /metrics port", "metrics_port")
    )
    rekey.add_argument(
        "--kafka-input-topic",
        help=_setting_help("unkeyed batches to split", "kafka.rekey_input_topic"),
    )
    _kafka_flags(rekey, "kafka.rekey_group")

    ev = sub.add_parser(
        "eval",
        parents=[common],
        help="score a JSONL file of {question, contexts, answer} rows, or replay a regression set",
        description="Score rows offline; each row is written back with `results` added. "
        "With --replay module:function, call that pipeline on every row's question (regression-"
        "set lines or plain rows), score the new answers with the metrics the set recorded, "
        "compare before/after and write a report; exit 1 when a --max-drop is exceeded.",
    )
    ev.add_argument(
        "input", type=Path, help="input JSONL (one row per line); with --replay also a set folder"
    )
    ev.add_argument("-o", "--output", type=Path, required=True, help="output JSONL")
    ev.add_argument(
        "--metrics",
        type=_csv,
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
        default=256,
        help="rows scored together, then written to the output (default 256)",
    )
    replay = ev.add_argument_group("replay (regression sets against a changed pipeline)")
    replay.add_argument(
        "--replay",
        metavar="MODULE:FUNCTION",
        help="call this function (sync or async) on each row's question; current dir importable",
    )
    replay.add_argument(
        "--concurrency", type=int, default=8, help="calls in flight at once (default 8)"
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
    _harness_flags(ev)
    _judge_flags(ev, online=False)

    reg = sub.add_parser(
        "regression",
        parents=[common],
        help="inspect regression sets written from live traffic",
        description="Regression sets are written by `ragpulse serve` when regression.directory "
        "is set; replay one with `ragpulse eval SET.jsonl -o OUT.jsonl --replay module:function`.",
    )
    reg_sub = reg.add_subparsers(dest="regression_command", required=True)
    reg_list = reg_sub.add_parser(
        "list", parents=[common], help="files, lines, bytes and time span of every set"
    )
    where = reg_list.add_mutually_exclusive_group()
    where.add_argument("--dir", type=Path, help="the regression directory")
    where.add_argument(
        "--config",
        type=Path,
        help="settings file naming regression.directory (env RAGPULSE_CONFIG, or "
        "RAGPULSE_REGRESSION__DIRECTORY for the folder itself)",
    )

    _judge_parser(sub, common)
    config_command.add_parsers(sub, common)

    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run the collector and an instrumented demo RAG app, print live scores",
        description="Starts the collector and a small instrumented RAG app in this process, "
        "sends questions for --duration seconds, then waits until every question sent has "
        "been evaluated (the last spans leave the app, the last traces close) and prints "
        "the scores and the Prometheus series. Starting and that final wait add a few "
        "seconds to --duration; both are reported.",
    )
    demo.add_argument(
        "--duration", type=float, default=20.0, help="seconds of traffic (default 20)"
    )
    demo.add_argument("--rate", type=float, default=8.0, help="questions per second (default 8)")
    demo.add_argument(
        "--otlp-http-port",
        type=int,
        default=4318,
        help="OTLP/HTTP receiver port (default 4318; a free one is used if it is taken)",
    )
    demo.add_argument(
        "--metrics-port",
        type=int,
        default=9464,
        help="Prometheus /metrics port (default 9464; a free one is used if it is taken)",
    )
    demo.add_argument(
        "--results-jsonl", type=Path, help="also append one line per evaluated record here"
    )
    return parser


def _parse_conditions(value: str) -> list[str]:
    from ragpulse.harness import parse_conditions  # only when the flag is given

    return parse_conditions(value)


def _harness_flags(parser: argparse.ArgumentParser) -> None:
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
        type=_parse_conditions,
        help="comma-separated: retrieved,gold,counterfactual,injected,gold_removed,"
        "irrelevant_only (default: all six; retrieved and gold_removed need --retriever or "
        "rows with a recorded run, gold and counterfactual need reference_contexts; a row "
        "that lacks what a condition needs is skipped for it and counted)",
    )
    group.add_argument("--seed", type=int, default=0, help="seed of the planted cases (0)")
    group.add_argument(
        "--timeout-s",
        type=float,
        default=120.0,
        help="a retriever or generator call past this is an error row (default 120)",
    )
    group.add_argument(
        "--slice-by",
        type=_csv,
        metavar="KEYS",
        help="metadata keys to slice the report by (default: every key with few values)",
    )
    group.add_argument(
        "--baseline",
        type=Path,
        metavar="SUMMARY.json",
        help="an earlier run's summary; figures are compared only where both runs computed "
        "them from the same conditions",
    )


def _kafka_flags(parser: argparse.ArgumentParser, group_path: str) -> None:
    group = parser.add_argument_group("Kafka")
    group.add_argument(
        "--kafka-bootstrap", help=_setting_help("host:port[,host:port]", "kafka.bootstrap")
    )
    group.add_argument(
        "--kafka-topic", help=_setting_help("spans keyed by trace id", "kafka.topic")
    )
    group.add_argument("--kafka-group", help=_setting_help("consumer group", group_path))
    group.add_argument(
        "--kafka-encoding",
        choices=["otlp_proto", "otlp_json"],
        help=_setting_help("message encoding", "kafka.encoding"),
    )
    group.add_argument(
        "--kafka-dead-letter-topic",
        help=_setting_help(
            "poison messages go here; '' = count and skip", "kafka.dead_letter_topic"
        ),
    )


def _judge_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """``judge calibrate`` (ragpulse/calibrate.py): the configured judge against labels."""
    from ragpulse.calibrate import add_arguments

    judge = sub.add_parser("judge", parents=[common], help="check the configured LLM judge")
    judge_sub = judge.add_subparsers(dest="judge_command", required=True)
    calibrate = judge_sub.add_parser(
        "calibrate",
        parents=[common],
        help="agreement of the judge with the shipped labelled calibration set",
        description="Run the configured judge over the shipped calibration set and report "
        "AUROC, balanced accuracy, confusion counts, calls, tokens, latency and cost per "
        "metric. --out writes a baseline; --baseline FILE --max-drop D exits 1 when a figure "
        "fell by more than D. Exit 2: a usage problem (bad or missing baseline), before any "
        "call.",
    )
    add_arguments(calibrate)
    calibrate.add_argument(
        "--config", type=Path, help="settings file: evaluation.judge, evaluation.options"
    )
    _judge_flags(calibrate, online=False)


def _judge_flags(parser: argparse.ArgumentParser, online: bool) -> None:
    """``online``: serve samples records for the judge (--judge-rate) and skips those past
    the minute's budget; ``eval`` judges every row and waits for the budget instead."""
    group = parser.add_argument_group(
        "LLM judge (any OpenAI-compatible endpoint)",
        description=None
        if online
        else "eval judges every row (no sampling); past the budget it waits for the next minute",
    )
    group.add_argument(
        "--judge-base-url",
        help=_setting_help(
            "e.g. https://api.openai.com/v1; unset: the judge tier is off",
            "evaluation.judge.base_url",
        ),
    )
    group.add_argument(
        "--judge-model", help=_setting_help("model name at that endpoint", "evaluation.judge.model")
    )
    group.add_argument(
        "--judge-api-key",
        help=_setting_help(
            "API key, better kept in the environment than on a command line (or OPENAI_API_KEY)",
            "evaluation.judge.api_key",
        ),
    )
    if online:
        group.add_argument(
            "--judge-rate",
            type=float,
            help=_setting_help(
                "share of records judged, chosen by trace id; priority rules add more",
                "evaluation.judge.rate",
            ),
        )
    if not online:
        group.add_argument(
            "--no-judge-cache",
            action="store_true",
            help="judge every row again: do not read or write the judge's disk cache (by "
            "default eval keeps verdicts in $RAGPULSE_CACHE_DIR, so a second run over the same "
            "rows with the same judge makes no call; evaluation.judge.cache: memory)",
        )
    past = "records past it skip the judge" if online else "eval waits for the next minute"
    group.add_argument(
        "--judge-calls-per-minute",
        type=int,
        help=_setting_help(f"budget of judge calls; {past}", "evaluation.judge.calls_per_minute"),
    )
    group.add_argument(
        "--judge-tokens-per-minute",
        type=int,
        help=_setting_help(f"budget of judge tokens; {past}", "evaluation.judge.tokens_per_minute"),
    )


def _evaluation_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    judge = {
        "base_url": args.judge_base_url,
        "model": args.judge_model,
        "api_key": args.judge_api_key,
        "rate": getattr(args, "judge_rate", None),  # serve only: eval judges every row
        "calls_per_minute": args.judge_calls_per_minute,
        "tokens_per_minute": args.judge_tokens_per_minute,
        # eval only: memory keeps the in-run dedup, the disk cache is neither read nor written
        "cache": "memory" if getattr(args, "no_judge_cache", False) else None,
    }
    evaluation: dict[str, Any] = {"judge": {k: v for k, v in judge.items() if v is not None}}
    if getattr(args, "evaluators", None):
        evaluation["evaluators"] = args.evaluators
    return evaluation if evaluation["judge"] or "evaluators" in evaluation else None


def _kafka_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
    flags = {
        "bootstrap": args.kafka_bootstrap,
        "topic": args.kafka_topic,
        "group": args.kafka_group,
        "encoding": args.kafka_encoding,
        "dead_letter_topic": args.kafka_dead_letter_topic,
        "rekey_input_topic": getattr(args, "kafka_input_topic", None),
    }
    if args.command == "rekey" and args.kafka_group:
        flags["rekey_group"], flags["group"] = args.kafka_group, None
    chosen = {k: v for k, v in flags.items() if v is not None}
    return chosen or None


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    level = logging.getLevelName(args.log_level)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if level > logging.DEBUG:
        for name in _QUIET_BELOW_DEBUG:
            logging.getLogger(name).setLevel(logging.WARNING)
    try:
        if args.command == "serve":
            return serve(args)
        if args.command == "eval":
            return evaluate_file(args)
        if args.command == "regression":
            return regression(args)
        if args.command == "rekey":
            return rekey(args)
        if args.command == "judge":
            from ragpulse.calibrate import command

            def judge_settings() -> Settings:
                return load_settings(args.config, evaluation=_evaluation_overrides(args))

            return command(args, judge_settings, _stdout(), console)
        if args.command == "demo":
            from ragpulse.demo import run_demo

            return run_demo(args, console)
        if args.command == "config":
            return config_command.config_command(args, _stdout())
        if args.command == "metrics":
            return config_command.metrics_command(_stdout())
    except ConfigError as exc:
        # One line (no wrapping, no markup: messages quote names and brackets as they are).
        label = "error: " if isinstance(exc, PortUnavailable) else "configuration error: "
        console.print(Text.assemble((label, "red"), str(exc)), soft_wrap=True)
        return 2
    return 1


def serve(args: argparse.Namespace) -> int:
    import time

    from ragpulse.collector.service import Collector
    from ragpulse.runtime import tune_for_throughput

    overrides: dict[str, Any] = {
        "host": args.host,
        "otlp_http_port": args.otlp_http_port,
        "otlp_grpc_port": args.otlp_grpc_port,
        "metrics_port": args.metrics_port,
        "results_jsonl": args.results_jsonl,
        "otlp_export_endpoint": args.otlp_export_endpoint,
        "max_body_bytes": args.max_body_bytes,
        "evaluation": _evaluation_overrides(args),
        "source": args.source,
        "kafka": _kafka_overrides(args),
    }
    settings = load_settings(args.config, **overrides)
    collector = Collector(settings)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    collector.start()
    tune_for_throughput()
    log = logging.getLogger("ragpulse")
    if settings.source == "kafka":
        k = settings.kafka
        log.info("consuming %s from %s as group %s (%s)", k.topic, k.bootstrap, k.group, k.encoding)
    else:
        log.info("OTLP/HTTP receiver on %s/v1/traces", collector.otlp_url)
    log.info("Prometheus metrics on %s", collector.metrics_url)
    log.info("evaluators: %s", ", ".join(e.name() for e in collector.pipeline.evaluators))
    log.info("sinks: %s", ", ".join(s.name for s in collector.pipeline.sinks))
    stop.wait()
    bound = settings.shutdown_timeout_s
    log.info("shutting down: evaluating open traces (at most %.0fs)", bound)
    started = time.monotonic()
    # Stop on a daemon thread: whatever hangs (a source, a sink), the process exits
    # within the documented bound (plus a little grace for the sinks' last word).
    stopping = threading.Thread(target=collector.stop, name="ragpulse-stop", daemon=True)
    stopping.start()
    stopping.join(bound + 2.0)
    if stopping.is_alive():
        log.error("shutdown did not finish within %.0fs; exiting anyway", bound)
        return 1
    log.info("stopped in %.1fs", time.monotonic() - started)
    return 0


def rekey(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from ragpulse.collector.rekey import Rekeyer
    from ragpulse.collector.service import start_metrics_server

    settings = load_settings(
        args.config, host=args.host, metrics_port=args.metrics_port, kafka=_kafka_overrides(args)
    )
    registry = CollectorRegistry()
    server = start_metrics_server(settings.host, settings.metrics_port, registry)
    rekeyer = Rekeyer(settings.kafka, registry)
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: rekeyer.stop())
    k = settings.kafka
    logging.getLogger("ragpulse").info(
        "re-keying %s -> %s on %s (group %s)", k.rekey_input_topic, k.topic, k.bootstrap,
        k.rekey_group,
    )  # fmt: skip
    rekeyer.run()
    server.shutdown()
    return 0


def evaluate_file(args: argparse.Namespace) -> int:
    """Score ``args.input`` into ``args.output`` row by row, flushing every batch.

    Exit 0 when it did its job; 1 with one line when nothing was scored (empty,
    compressed, binary or unreadable input) or an evaluator failed on every row
    (or could not load); 2 for a path or usage problem (found before anything
    loads); 128 + the signal on SIGINT/SIGTERM, the rows scored so far kept.
    """
    from rich.markup import escape

    from ragpulse.offline_io import Interrupted, SignalStop, not_text, path_problem

    if getattr(args, "generator", None) and getattr(args, "control", None):
        console.print("[red]--control needs --replay (the harness compares with --baseline)[/red]")
        return 2
    if getattr(args, "generator", None):
        from ragpulse.harness import run as run_harness

        return run_harness(args, _stdout())  # its report is wide: 160 columns off a terminal
    harness_only = [
        f for f in ("retriever", "conditions", "slice_by", "baseline") if getattr(args, f, None)
    ]
    if harness_only:  # never ignored silently
        flags = ", ".join("--" + f.replace("_", "-") for f in harness_only)
        console.print(f"[red]{flags} need --generator[/red]")
        return 2
    if args.replay:
        from ragpulse.replay_command import replay_file

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
    problem = not_text(args.input)
    if problem:
        console.print(f"[red]{escape(problem)}[/red]", highlight=False, soft_wrap=True)
        return 1
    written = [0]
    try:
        with SignalStop() as stop:
            return _score_file(args, stop, written)
    except (Interrupted, KeyboardInterrupt) as exc:
        signum = exc.signum if isinstance(exc, Interrupted) else signal.SIGINT
        name = signal.Signals(signum).name
        _quiet_abandoned_tasks()
        console.print(
            f"[red]interrupted ({name}):[/red] {written[0]} rows written to "
            f"{escape(str(args.output))}; the rest of the input was not scored",
            highlight=False,
            soft_wrap=True,
        )
        return 128 + signum


def _score_file(args: argparse.Namespace, stop: SignalStop, written: list[int]) -> int:
    """The body of :func:`evaluate_file`; ``written[0]`` counts the lines on disk."""
    from rich.markup import escape

    from ragpulse.evaluation import load_evaluators_safely
    from ragpulse.offline import Summary, score_rows
    from ragpulse.offline_io import batches, count_lines, open_text, read_rows
    from ragpulse.plugins import load_evaluators
    from ragpulse.redaction import Redactor
    from ragpulse.runtime import tune_for_throughput

    settings = load_settings(args.config, evaluation=_evaluation_overrides(args))
    evaluation = settings.evaluation
    selection = args.metrics or evaluation.evaluators
    total = count_lines(args.input)
    progress, task, context = _offline_run(settings, "scoring", total)
    with closing(context):
        wanted = load_evaluators(selection, evaluation)
        evaluators = load_evaluators_safely(wanted, context)
        tune_for_throughput()
        if not evaluators:
            console.print("[red]no evaluator can run[/red] (see the errors above)")
            return 2
        not_loaded = [e.name() for e in wanted if e not in evaluators]
        redactor = Redactor.from_settings(settings, "eval_output")
        summary = Summary()
        args.output.parent.mkdir(parents=True, exist_ok=True)
        with (
            open_text(args.input) as source,
            args.output.open("w", encoding="utf-8") as out,
            progress,
        ):
            for batch in batches(read_rows(source), args.batch_size):
                lines = score_rows(batch, evaluators, summary, redactor)
                with stop.writing():  # a signal waits for the batch to be on disk
                    for line in lines:  # one by one: a 50 MB row is not copied twice more
                        out.write(line)
                        out.write("\n")
                    out.flush()
                    written[0] += len(lines)
                progress.update(task, completed=batch[-1].line, description="scoring")
            progress.update(task, completed=total)  # trailing blank lines
    if summary.rows:
        print_summary(summary.table(), title=f"{summary.rows} rows scored -> {args.output}")
    for note in summary.notes():
        console.print(f"[yellow]{escape(note)}[/yellow]", highlight=False, soft_wrap=True)
    failure = summary.failure(not_loaded)
    if failure:
        console.print(f"[red]{escape(failure)}[/red]", highlight=False, soft_wrap=True)
        return 1
    return 0


def _quiet_abandoned_tasks() -> None:
    """After an interrupt, in-flight judge calls are abandoned on purpose: asyncio's
    "Task was destroyed but it is pending" at exit would read as a crash."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)


def _offline_run(
    settings: Settings, description: str, total: int | None
) -> tuple[Progress, TaskID, PluginContext]:
    """The progress bar and plug-in context of an offline run (``eval``, ``eval --replay``).

    Offline, a judge waits for its per-minute budget instead of skipping rows, and says
    so on the progress bar.
    """
    from ragpulse.plugin_context import PluginContext

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TimeRemainingColumn())  # fmt: skip
    progress = Progress(*columns, console=console)
    task = progress.add_task(description, total=total)
    context = PluginContext(
        settings,
        offline=True,
        notify=lambda msg: progress.update(task, description=f"scoring ({msg})"),
    )
    return progress, task, context


def _stdout() -> Console:
    return Console(width=None if sys.stdout.isatty() else 160)


def _table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 or col in ("question", "rule") else "right")
    for row in rows:
        table.add_row(*row)
    return table


def regression(args: argparse.Namespace) -> int:
    from ragpulse.exporters.regression import describe_rule, set_stats

    settings = None
    directory = args.dir
    if directory is None:
        settings = load_settings(args.config)
        directory = settings.regression.directory
    if directory is None:
        console.print(
            "[red]no regression directory:[/red] pass --dir, or --config with "
            "regression.directory (or set RAGPULSE_REGRESSION__DIRECTORY)"
        )
        return 2
    if not directory.is_dir():
        console.print(f"[red]no such directory:[/red] {directory}")
        return 2
    stats = set_stats(directory)
    rules = settings.regression.sets if settings is not None else {}
    table = Table(title=f"regression sets in {directory}")
    header = ["set", "files", "lines", "bytes", "first written_at", "last written_at"]
    header += ["rule"] if rules else []
    for col in header:
        table.add_column(col, justify="right" if col in ("files", "lines", "bytes") else "left")
    for s in stats:
        row = [s.name, str(s.files), str(s.lines), str(s.bytes)]
        row += [s.first_written_at or "-", s.last_written_at or "-"]
        if rules:
            row.append(describe_rule(rules[s.name]) if s.name in rules else "-")
        table.add_row(*row)
    out = _stdout()
    out.print(table)
    if not stats:
        out.print("no sets yet")
    return 0


def print_summary(rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    for col in ("evaluator", "scored", "mean", "p50", "not_applicable", "errors"):
        table.add_column(col, justify="left" if col == "evaluator" else "right")
    for row in rows:
        table.add_row(*(_fmt(row[c]) for c in row))
    _stdout().print(table)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


if __name__ == "__main__":
    sys.exit(main())
