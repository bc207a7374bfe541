"""One conversation of three turns traced by ragpulse's decorators, recorded rather than
sent, so that a test can hand its traces to a tool or a collector in any order; and the
check that every turn's history and evidence hold only the turns that started before it.

Each turn retrieves a passage of its own, so a later turn joined by mistake shows in an
earlier turn's evidence (``documents`` of kind ``history``) as well as in its history.
The spans carry ``session.id`` (the decorators' ``conversation_id=``) and no history: the
collector numbers the turns and joins the earlier ones.
"""

from __future__ import annotations

import time
from typing import Any

from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import ragpulse

TURNS = (
    ("When was the Harbour lighthouse built?", "It was built in 1857.",
     "The Harbour lighthouse was built in 1857 on the north pier."),
    ("How tall is the Harbour lighthouse?", "It is 40 metres tall.",
     "The Harbour lighthouse is 40 metres tall, the tallest on the coast."),
    ("How many keepers live in the Harbour lighthouse?", "Two keepers live there.",
     "Two keepers live in the Harbour lighthouse all year round."),
)  # fmt: skip
"""(question, answer, the passage its retrieval finds), in the order the user asked."""
_BY_QUESTION = {q: (a, p) for q, a, p in TURNS}


@ragpulse.retrieval(data_source="handbook")
def _find(query: str) -> list[dict[str, str]]:
    return [{"id": f"p{len(query)}", "content": _BY_QUESTION[query][1]}]


@ragpulse.generation(model="test-model")
def _answer(question: str) -> str:
    return _BY_QUESTION[question][0]


@ragpulse.pipeline(route="/chat", conversation_id="session")
def _chat(question: str, session: str) -> str:
    _find(question)
    return _answer(question)


def record_conversation(
    session: str, service: str = "chat-app", project: str | None = None
) -> list[list[ReadableSpan]]:
    """The spans of each turn of one conversation, turn by turn in the order they were
    taken (each started after the one before ended)."""
    attributes = {"service.name": service}
    if project is not None:
        attributes["openinference.project.name"] = project
    provider = TracerProvider(resource=Resource.create(attributes))
    recorded = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(recorded))
    ragpulse.configure(exporter="none", tracer_provider=provider)
    try:
        for question, _, _ in TURNS:
            _chat(question, session)
            # The next turn starts in a later millisecond (the tools keep milliseconds),
            # as a user's next question does.
            ended_ms = time.time_ns() // 1_000_000
            while time.time_ns() // 1_000_000 <= ended_ms + 1:
                time.sleep(0.001)
    finally:
        ragpulse.shutdown()
    by_trace: dict[int, list[ReadableSpan]] = {}
    for span in recorded.get_finished_spans():
        by_trace.setdefault(span.context.trace_id, []).append(span)
    return sorted(by_trace.values(), key=lambda spans: min(s.start_time or 0 for s in spans))


def trace_id(spans: list[ReadableSpan]) -> str:
    return format(spans[0].context.trace_id, "032x")


def turn_lines(lines: list[dict[str, Any]], session: str) -> list[dict[str, Any]]:
    """The turn records (first exports, not updates) of ``session`` in results lines."""
    return [
        line
        for line in lines
        if line.get("conversation_id") == session and "update" not in line and "question" in line
    ]


def conversation_records(lines: list[dict[str, Any]], session: str) -> list[dict[str, Any]]:
    return [
        line["conversation"]
        for line in lines
        if line.get("conversation", {}).get("conversation_id") == session
    ]


def check_only_earlier_turns(
    lines: list[dict[str, Any]], session: str, taken: list[str], *, in_order: bool
) -> None:
    """Every turn record of ``session`` (``taken``: its trace ids in the order the turns
    were taken) holds in its history and evidence only turns taken before it; the last
    conversation record lists the turns in that order, numbered 1, 2, 3. ``in_order``:
    the turns were evaluated in the order taken, so each is numbered by its place and
    holds every turn before it."""
    records = {line["trace_id"]: line for line in turn_lines(lines, session)}
    assert sorted(records) == sorted(taken), f"turn records: {sorted(records)}"
    for place, tid in enumerate(taken):
        line = records[tid]
        before = TURNS[:place]
        said = {q for q, _, _ in before} | {a for _, a, _ in before}
        passages = {p for _, _, p in before}
        history = [m["content"] for m in line["history"]]
        carried = [
            d["content"]
            for d in line["documents"]
            if (d.get("source") or {}).get("kind") == "history"
        ]
        where = f"turn {place + 1} ({tid})"
        assert set(history) <= said, f"{where} has a later turn in its history: {history}"
        assert set(carried) <= passages, f"{where} has a later turn's passage: {carried}"
        if in_order:
            assert line["turn"] == place + 1, f"{where} numbered {line['turn']}"
            users = [m["content"] for m in line["history"] if m["role"] == "user"]
            assert users == [q for q, _, _ in before], f"{where} history: {users}"
            assert sorted(carried) == sorted(passages), f"{where} evidence: {carried}"
    *_, conversation = conversation_records(lines, session)
    assert [(t["turn"], t["trace_id"]) for t in conversation["turns"]] == [
        (place, tid) for place, tid in enumerate(taken, 1)
    ]
