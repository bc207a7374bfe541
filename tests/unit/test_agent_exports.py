"""Where an agent turn's results land in Phoenix and MLflow: the request each sink sends.

The tools themselves run in tests/live/test_tracing_backends.py (an agent trace there
too); here a local HTTP server keeps what the sinks post and answers 200, so that every
case (a retriever inside the turn, documents from several tools, a tool span that lists
no documents) is checked without starting Phoenix or MLflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from support.agent_records import agent_results, agent_turn, expected_spans
from support.sink_recorder import Recorder, delivered, sink_posting_to

from ragpulse.exporters.phoenix import document_positions, record_key
from ragpulse.exporters.support.targets import Target, evaluated_span
from ragpulse.record import Document, DocumentSource, EvalResult, ExportItem, RagRecord


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with Recorder() as server:
        yield server


def export(sink_name: str, url: str, record: RagRecord, results: list[EvalResult]) -> None:
    sink, context = sink_posting_to(sink_name, url)
    sink.export(ExportItem(record, results))
    sink.shutdown()
    count = delivered(context, sink_name)
    assert count and count > 0


def posted(recorder: Recorder, path: str) -> list[dict[str, Any]]:
    return [item for p, body in recorder.posts if p == path for item in body["data"]]


def test_phoenix_annotations_on_the_spans_an_agent_turns_results_judge(
    recorder: Recorder,
) -> None:
    turn = agent_turn()
    export("phoenix", recorder.url, turn.record, agent_results(turn))
    spans = posted(recorder, "/v1/span_annotations")
    assert {a["name"]: a["span_id"] for a in spans} == expected_spans(turn)
    # ragpulse.<method>.<record key>: the record's own, so a revision can take it back.
    methods = {a["identifier"].rsplit(".", 1)[0] for a in spans}
    assert methods >= {"ragpulse.rules", "ragpulse.lexical"}
    assert {a["identifier"].rsplit(".", 1)[1] for a in spans} == {record_key(turn.record)}
    # Documents from several tools: no position is certain, no document annotation.
    assert posted(recorder, "/v1/document_annotations") == []


def test_phoenix_document_annotations_on_a_retriever_inside_the_turn(recorder: Recorder) -> None:
    """Every document from one retriever span: one annotation per scored document, at
    the document's position among that retriever's documents."""
    turn = agent_turn(retriever=True, inbox=False)
    export("phoenix", recorder.url, turn.record, agent_results(turn))
    documents = posted(recorder, "/v1/document_annotations")
    assert [(a["span_id"], a["document_position"], a["result"]["score"]) for a in documents] == [
        (turn.search, 0, 0.5),
        (turn.search, 1, 0.0),
    ]
    assert {a["name"] for a in documents} == {"context_relevance/lexical"}


def test_phoenix_writes_no_document_annotation_on_a_tool_span(recorder: Recorder) -> None:
    """A tool's span lists no documents in Phoenix, which would drop the annotations (or
    refuse them): the span annotation only."""
    turn = agent_turn(inbox=False)
    export("phoenix", recorder.url, turn.record, agent_results(turn))
    assert posted(recorder, "/v1/document_annotations") == []
    names = {a["name"] for a in posted(recorder, "/v1/span_annotations")}
    assert "context_relevance" in names


def test_document_positions() -> None:
    """The scored documents' positions on the one span they came from, or None."""
    span = "a" * 16
    rag = RagRecord(documents=[Document(content=c) for c in "xyz"])
    assert document_positions(rag, {}, span) == [0, 1, 2]
    assert document_positions(rag, {"document_indices": [0, 2]}, span) == [0, 2]
    assert document_positions(rag, {"document_indices": [0, 5]}, span) is None
    assert document_positions(rag, {"document_indices": "0"}, span) is None

    def retrieved(index: int, span_id: str = span, kind: str = "retriever") -> Document:
        source = DocumentSource(kind=kind, tool="kb", span_id=span_id, index=index)  # type: ignore[arg-type]
        return Document(content="x", source=source)

    # Positions are the retriever's, not the record's (a tool call ran before it).
    agent = RagRecord(kind="agent", documents=[retrieved(3), retrieved(4)])
    assert document_positions(agent, {}, span) == [3, 4]
    other = RagRecord(kind="agent", documents=[retrieved(0), retrieved(1, "b" * 16)])
    assert document_positions(other, {}, span) is None
    seen_by_model = RagRecord(kind="agent", documents=[retrieved(0, kind="message")])
    assert document_positions(seen_by_model, {}, span) is None


def test_mlflow_assessments_on_the_spans_an_agent_turns_results_judge(
    recorder: Recorder,
) -> None:
    turn = agent_turn()
    export("mlflow", recorder.url, turn.record, agent_results(turn))
    path = f"/api/3.0/mlflow/traces/tr-{turn.record.trace_id}/assessments"
    assessments = [body["assessment"] for p, body in recorder.posts if p == path]
    assert {a["assessment_name"]: a["span_id"] for a in assessments} == expected_spans(turn)
    tool_error = next(a for a in assessments if a["assessment_name"] == "tool_error")
    assert tool_error["source"] == {"source_type": "CODE", "source_id": "ragpulse.rules"}
    assert tool_error["metadata"]["label"] == "tool_error"


@pytest.mark.parametrize(
    ("details", "expected"),
    [
        # the riskiest finding decides: the question -> the agent's span
        ({"findings": [{"where": "question", "risk": 0.9},
                       {"where": "document:2", "risk": 0.5}]}, "root"),
        # a document the record cannot place (out of range): the retrieval span
        ({"findings": [{"where": "document:9", "risk": 0.9}]}, "search"),
        ({"findings": "document:2"}, "root"),
    ],
)  # fmt: skip
def test_where_an_injection_lands(details: dict[str, Any], expected: str) -> None:
    turn = agent_turn()
    result = EvalResult(metric="injection", method="rules", score=0.9, details=details)
    target = evaluated_span(turn.record, result)
    assert target.span_id == getattr(turn, expected)


def test_a_named_span_wins_over_the_metric() -> None:
    turn = agent_turn()
    hijack = EvalResult(
        metric="injection_followed",
        method="agent",
        score=1.0,
        details={"target_span_id": turn.send.upper()},  # hex in any case
    )
    assert evaluated_span(turn.record, hijack).span_id == turn.send
    assert evaluated_span(turn.record, hijack).target is Target.NAMED
    on_answer = EvalResult(
        metric="tool_loop", method="rules", score=0.5, details={"target_span_id": turn.final_chat}
    )
    # Naming the final model call keeps its completion id.
    assert evaluated_span(turn.record, on_answer).response_id == "chatcmpl-final"
