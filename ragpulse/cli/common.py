"""What every subcommand shares: the console, settings loading, flag helpers, tables."""

from __future__ import annotations

import argparse
import logging
import sys
import warnings
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from ragpulse.config import Settings
from ragpulse.config import load_settings as _load_settings
from ragpulse.settings_env import env_name, setting_default

# No emoji codes: ":name:" in a file name, a field or an error message stays as written
# (and the table of codes, a few ms to import, is not loaded).
console = Console(stderr=True, emoji=False)


def load_settings(config: Path | None, **overrides: Any) -> Settings:
    """Settings for a subcommand: every problem reported at once, plug-in options and
    evaluator names included, and log lines redacted from here on as they say
    (``redaction.apply_to: [logs]``): a log line can quote the content being scored."""
    from ragpulse.log_redaction import install_log_redaction
    from ragpulse.plugins import plugin_problems

    def plugins_as_run(settings: Settings) -> list[tuple[tuple[str, ...], str, str]]:
        # A source URL fills in its tool's sink (sinks.phoenix without an endpoint is fine).
        if settings.stored_traces.url:
            from ragpulse.collector.stored.write_back import stored_write_back

            settings = stored_write_back(settings)
        return plugin_problems(settings)

    settings = _load_settings(config, checks=[plugins_as_run], **overrides)
    install_log_redaction(settings)
    return settings


def spoken(items: list[str]) -> str:
    """``a, b or c``, as help texts list choices."""
    return f"{', '.join(items[:-1])} or {items[-1]}" if len(items) > 1 else "".join(items)


def csv_list(value: str) -> list[str]:
    return [v.strip() for v in value.split(",") if v.strip()]


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
QUIET_BELOW_DEBUG = ("openai", "httpx", "httpcore", "httpx2", "httpcore2")
"""The judge's HTTP client (httpx in openai 1.x, httpx2 in 3.x) logs every request and each
retry at INFO ("Retrying request to ..."): 36 lines
for one unreachable judge. They are kept for --log-level DEBUG; otherwise the judge
says once, with its URL, that it cannot be reached."""


def setting_help(text: str, path: str) -> str:
    """``text`` plus the setting's default and its environment variable, both read from
    the settings model so that help cannot drift from what ``serve`` does. A sink's option
    (``sinks.jsonl.path``) that a flag sets is unset by default (tests/unit/test_cli.py
    holds the sinks' ``Options`` to it): building ``--help`` imports no sink."""
    default = None if path.startswith("sinks.") else setting_default(Settings, path)
    if isinstance(default, list):
        default = ",".join(map(str, default))
    shown = "" if default is None else f"default {default or repr(default)}; "
    return f"{text} ({shown}env {env_name(path)})"


def log_level_flag(parser: argparse.ArgumentParser, default: str | None) -> None:
    parser.add_argument(
        "--log-level",
        type=str.upper,
        choices=LOG_LEVELS,
        metavar="LEVEL",
        # Subcommands: SUPPRESS keeps the value given before the subcommand (or INFO).
        default=argparse.SUPPRESS if default is None else default,
        help="DEBUG, INFO, WARNING or ERROR (default INFO); before or after the subcommand",
    )


def kafka_flags(parser: argparse.ArgumentParser, group_path: str) -> None:
    group = parser.add_argument_group("Kafka")
    group.add_argument(
        "--kafka-bootstrap", help=setting_help("host:port[,host:port]", "kafka.bootstrap")
    )
    group.add_argument("--kafka-topic", help=setting_help("spans keyed by trace id", "kafka.topic"))
    group.add_argument("--kafka-group", help=setting_help("consumer group", group_path))
    group.add_argument(
        "--kafka-encoding",
        choices=["otlp_proto", "otlp_json"],
        help=setting_help("message encoding", "kafka.encoding"),
    )
    group.add_argument(
        "--kafka-dead-letter-topic",
        help=setting_help(
            "poison messages go here; '' = count and skip", "kafka.dead_letter_topic"
        ),
    )


def judge_flags(parser: argparse.ArgumentParser, online: bool) -> None:
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
        help=setting_help(
            "e.g. https://api.openai.com/v1; unset: the judge tier is off",
            "evaluation.judge.base_url",
        ),
    )
    group.add_argument(
        "--judge-model", help=setting_help("model name at that endpoint", "evaluation.judge.model")
    )
    group.add_argument(
        "--judge-api-key",
        help=setting_help(
            "API key, better kept in the environment than on a command line (or OPENAI_API_KEY)",
            "evaluation.judge.api_key",
        ),
    )
    if online:
        group.add_argument(
            "--judge-rate",
            type=float,
            help=setting_help(
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
        help=setting_help(f"budget of judge calls; {past}", "evaluation.judge.calls_per_minute"),
    )
    group.add_argument(
        "--judge-tokens-per-minute",
        type=int,
        help=setting_help(f"budget of judge tokens; {past}", "evaluation.judge.tokens_per_minute"),
    )


def evaluation_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
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


def sink_overrides(values: dict[str, Any]) -> dict[str, Any] | None:
    """Flags that set sinks' options, ``{"jsonl.path": value}``, as ``sinks`` takes them;
    a flag not given is left out (so that it never hides the file's or a variable's value)."""
    sinks: dict[str, dict[str, Any]] = {}
    for option, value in values.items():
        if value is not None:
            sink, _, key = option.partition(".")
            sinks.setdefault(sink, {})[key] = value
    return sinks or None


def kafka_overrides(args: argparse.Namespace) -> dict[str, Any] | None:
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


def quiet_abandoned_tasks() -> None:
    """After an interrupt, in-flight judge calls are abandoned on purpose: asyncio's
    "Task was destroyed but it is pending" at exit would read as a crash. So would
    Python's "coroutine ... was never awaited" for a batch of calls the interrupt
    caught between being made and being handed to the judge client's loop."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", r"coroutine .* was never awaited", RuntimeWarning)


def stdout() -> Console:
    return Console(width=None if sys.stdout.isatty() else 160, emoji=False)


def table(title: str, header: list[str], rows: list[list[str]]) -> Table:
    table = Table(title=title)
    for i, col in enumerate(header):
        table.add_column(col, justify="left" if i == 0 or col in ("question", "rule") else "right")
    for row in rows:
        table.add_row(*row)
    return table


def print_summary(rows: list[dict[str, Any]], title: str) -> None:
    table = Table(title=title)
    for col in ("evaluator", "scored", "mean", "p50", "not_applicable", "errors"):
        table.add_column(col, justify="left" if col == "evaluator" else "right")
    for row in rows:
        table.add_row(*(fmt(row[c]) for c in row))
    stdout().print(table)


def fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
