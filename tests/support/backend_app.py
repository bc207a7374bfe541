"""A decorated RAG app that sends its traces to a tracing tool, and to ragpulse when asked.

``python tests/support/backend_app.py [--ragpulse URL] --backend URL [--header K=V] --count N``
answers N questions with ragpulse's demo app (``@ragpulse.pipeline``, ``.retrieval``,
``.generation``), exporting every span over OTLP/HTTP to the tool, and to ragpulse too with
``--ragpulse``, as a team that adopts ragpulse next to its tracing tool would; without it the
app is traced to the tool only, as a team that lets ragpulse read the tool's traces
(``ragpulse eval --from``) would. It prints one JSON line per trace: the
trace id, its root span's start and end (ns), and the ids of its chat and retrieval
spans, which the live tests compare with what the tool shows.
"""

from __future__ import annotations

import argparse
import json

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragpulse
from ragpulse.cli import demo_app


def app_arguments(
    description: str | None, ragpulse_help: str, count: int, *, ragpulse_required: bool = False
) -> argparse.Namespace:
    """The flags both test apps take (this one and agent_backend_app.py)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--ragpulse", required=ragpulse_required, help=ragpulse_help)
    parser.add_argument("--backend", required=True, help="the tool's OTLP/HTTP base URL")
    parser.add_argument("--header", action="append", default=[], help="K=V to the tool")
    parser.add_argument("--count", type=int, default=count)
    parser.add_argument("--service", default="rag-app")
    parser.add_argument("--project", default="rag-app", help="openinference.project.name")
    return parser.parse_args()


def tool_provider(args: argparse.Namespace) -> tuple[TracerProvider, InMemorySpanExporter]:
    """A provider exporting to the tool (with ``--header``s), and a recorder of its spans
    (the ids the apps print)."""
    resource = Resource.create(
        {"service.name": args.service, "openinference.project.name": args.project}
    )
    provider = TracerProvider(resource=resource)
    headers = dict(h.split("=", 1) for h in args.header)
    backend = OTLPSpanExporter(f"{args.backend.rstrip('/')}/v1/traces", headers=headers)
    provider.add_span_processor(BatchSpanProcessor(backend))
    recorded = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(recorded))
    return provider, recorded


def main() -> None:
    args = app_arguments(__doc__, "ragpulse's OTLP/HTTP base URL; unset: the tool only", 20)
    provider, recorded = tool_provider(args)
    if args.ragpulse:
        ragpulse.configure(endpoint=args.ragpulse, tracer_provider=provider)
    else:  # the decorators' spans, exported by the app's own processor only
        ragpulse.configure(exporter="none", tracer_provider=provider)

    questions = demo_app.corpus()["questions"]
    for i in range(args.count):
        demo_app.answer(questions[i % len(questions)]["question"], ungrounded_rate=0.25)
    ragpulse.shutdown()
    provider.shutdown()  # flushes the export to the tool

    traces: dict[str, dict[str, object]] = {}
    for span in recorded.get_finished_spans():
        trace_id = format(span.context.trace_id, "032x")
        row = traces.setdefault(trace_id, {"trace_id": trace_id})
        span_id = format(span.context.span_id, "016x")
        if span.parent is None:
            row.update(root=span_id, start_ns=span.start_time, end_ns=span.end_time)
        elif span.name.startswith("chat "):
            row["chat"] = span_id
        elif span.name.startswith("retrieval "):
            row["retrieval"] = span_id
    for row in traces.values():
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
