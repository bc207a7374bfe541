"""``ragpulse serve`` (the collector) and ``ragpulse rekey`` (Kafka re-keying)."""

from __future__ import annotations

import argparse
import logging
import signal
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragpulse.cli.common import (
    csv_list,
    evaluation_overrides,
    judge_flags,
    kafka_flags,
    kafka_overrides,
    load_settings,
    setting_help,
    sink_overrides,
    spoken,
)
from ragpulse.plugin_index import SOURCE_GROUP, group, source_urls

if TYPE_CHECKING:
    from ragpulse.collector.service import Collector


def add_parsers(sub: Any, common: argparse.ArgumentParser) -> None:
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
        "--host", help=setting_help("bind address of the receiver and /metrics", "host")
    )
    serve.add_argument(
        "--otlp-http-port",
        type=int,
        help=setting_help("OTLP/HTTP receiver port", "otlp_http_port"),
    )
    serve.add_argument(
        "--otlp-grpc-port",
        type=int,
        help=setting_help("OTLP/gRPC receiver port, 0 = off", "otlp_grpc_port"),
    )
    serve.add_argument(
        "--metrics-port", type=int, help=setting_help("Prometheus /metrics port", "metrics_port")
    )
    serve.add_argument(
        "--results-jsonl",
        type=Path,
        help=setting_help("append one line per evaluated record", "sinks.jsonl.path"),
    )
    serve.add_argument(
        "--otlp-export-endpoint",
        help=setting_help(
            "OTLP/HTTP base URL for evaluation events and spans", "sinks.otel.endpoint"
        ),
    )
    serve.add_argument(
        "--evaluators",
        type=csv_list,
        help=setting_help(
            "comma-separated metric or metric/method names; unset: the default set",
            "evaluation.evaluators",
        ),
    )
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        help=setting_help("OTLP body limit after decompression", "max_body_bytes"),
    )
    # The registered sources (ragpulse.sources), and those that follow a tool's stored
    # traces with the shape of each one's URL: read without importing a source.
    tools = source_urls()
    serve.add_argument(
        "--source",
        choices=sorted(group(SOURCE_GROUP)),
        help=setting_help(
            f"where spans come from; {', '.join(tools)}: follow the traces that tool "
            "stores (--source-url)",
            "source",
        ),
    )
    serve.add_argument(
        "--source-url",
        metavar="URL",
        help=setting_help(
            f"with --source {'|'.join(tools)}: {spoken(list(tools.values()))} (+https for "
            "TLS); new traces are read every stored_traces.poll_s and the results go back to "
            "the tool; credentials from stored_traces or the tool's environment variables",
            "stored_traces.url",
        ),
    )
    kafka_flags(serve, "kafka.group")
    judge_flags(serve, online=True)

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
    rekey.add_argument("--host", help=setting_help("bind address of /metrics", "host"))
    rekey.add_argument(
        "--metrics-port", type=int, help=setting_help("Prometheus /metrics port", "metrics_port")
    )
    rekey.add_argument(
        "--kafka-input-topic",
        help=setting_help("unkeyed batches to split", "kafka.rekey_input_topic"),
    )
    kafka_flags(rekey, "kafka.rekey_group")


def serve_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The settings ``serve``'s flags give (None: not given)."""
    return {
        "host": args.host,
        "otlp_http_port": args.otlp_http_port,
        "otlp_grpc_port": args.otlp_grpc_port,
        "metrics_port": args.metrics_port,
        "sinks": sink_overrides(
            {"jsonl.path": args.results_jsonl, "otel.endpoint": args.otlp_export_endpoint}
        ),
        "max_body_bytes": args.max_body_bytes,
        "evaluation": evaluation_overrides(args),
        "source": args.source,
        "kafka": kafka_overrides(args),
        "stored_traces": {"url": args.source_url} if args.source_url else None,
    }


def started_lines(collector: Collector) -> list[str]:
    """What a started collector logs: every address it listens on (each receiver, the
    metrics endpoint) or the topic it consumes, then its evaluators and sinks."""
    lines = collector.source.describe() if collector.source is not None else []
    if collector.metrics_url is not None:
        lines.append(f"Prometheus metrics on {collector.metrics_url}")
    lines.append("evaluators: " + ", ".join(e.name for e in collector.pipeline.evaluators))
    lines.append("sinks: " + ", ".join(s.name for s in collector.sinks))
    return lines


def run_serve(args: argparse.Namespace) -> int:
    import time

    from ragpulse.collector.service import Collector
    from ragpulse.plugins import source_class
    from ragpulse.runtime import tune_for_throughput

    settings = load_settings(args.config, **serve_overrides(args))
    settings = source_class(settings.source).run_settings(settings)
    collector = Collector(settings)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    collector.start()
    tune_for_throughput()
    log = logging.getLogger("ragpulse")
    for line in started_lines(collector):
        log.info("%s", line)
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


def run_rekey(args: argparse.Namespace) -> int:
    from prometheus_client import CollectorRegistry

    from ragpulse.collector.intake.rekey import Rekeyer
    from ragpulse.collector.service import start_metrics_server

    settings = load_settings(
        args.config, host=args.host, metrics_port=args.metrics_port, kafka=kafka_overrides(args)
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
