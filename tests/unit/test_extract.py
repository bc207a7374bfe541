"""Extraction from spans that ragpulse's decorators did not write: OpenInference
(LlamaIndex / LangChain shapes) and OTel GenAI conventions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from support.helpers import make_span, new_span_id, new_trace_id

from ragpulse.collector.extract.conventions import READERS, ROLE_RULES
from ragpulse.collector.extract.records import NO_RAG_SHAPE, extract_records
from ragpulse.record import Span, SpanEvent, SpanStatus

DOCS = {
    "retrieval.documents.0.document.id": "doc-a",
    "retrieval.documents.0.document.content": "Paris is the capital of France.",
    "retrieval.documents.0.document.score": 0.91,
    "retrieval.documents.0.document.metadata": json.dumps({"source": "wiki"}),
    "retrieval.documents.1.document.id": "doc-b",
    "retrieval.documents.1.document.content": "France is in Western Europe.",
    "retrieval.documents.1.document.score": 0.5,
}


def test_llamaindex_shape_chain_retriever_llm() -> None:
    t, root = new_trace_id(), new_span_id()
    spans = [
        make_span(
            t,
            "query",
            {
                "openinference.span.kind": "CHAIN",
                "input.value": "What is the capital of France?",
                "output.value": "The capital of France is Paris.",
            },
            span_id=root,
            start=0,
            end=100,
        ),
        make_span(
            t,
            "retrieve",
            {"openinference.span.kind": "RETRIEVER", "input.value": "capital of France", **DOCS},
            parent=root,
            start=10,
            end=20,
        ),
        make_span(
            t,
            "llm",
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o-mini",
                "llm.token_count.prompt": 120,
                "llm.token_count.completion": 9,
                "llm.output_messages.0.message.role": "assistant",
                "llm.output_messages.0.message.content": "The capital of France is Paris.",
            },
            parent=root,
            start=30,
            end=90,
        ),
    ]
    records, reason = extract_records(spans)
    assert reason is None
    [r] = records
    assert r.trace_id == t and r.span_id == root
    assert r.question == "What is the capital of France?"
    assert r.answer == "The capital of France is Paris."
    assert [d.id for d in r.documents] == ["doc-a", "doc-b"]
    assert r.documents[0].score == 0.91 and r.documents[0].metadata == {"source": "wiki"}
    assert r.model == "gpt-4o-mini" and r.input_tokens == 120 and r.output_tokens == 9
    assert r.service == "svc" and r.route == "query"


def test_langchain_shape_nested_chains_and_json_io() -> None:
    t, root, inner = new_trace_id(), new_span_id(), new_span_id()
    spans = [
        make_span(
            t,
            "RunnableSequence",
            {
                "openinference.span.kind": "CHAIN",
                "input.value": json.dumps({"question": "Where is France?"}),
                "input.mime_type": "application/json",
                "output.value": json.dumps({"answer": "In Western Europe.", "context": []}),
                "output.mime_type": "application/json",
            },
            span_id=root,
            start=0,
            end=100,
        ),
        make_span(
            t,
            "RunnableParallel",
            {"openinference.span.kind": "CHAIN", "input.value": "{}"},
            span_id=inner,
            parent=root,
            start=1,
            end=30,
        ),
        make_span(
            t,
            "VectorStoreRetriever",
            {"openinference.span.kind": "RETRIEVER", "input.value": "Where is France?", **DOCS},
            parent=inner,
            start=2,
            end=20,
        ),
        make_span(
            t,
            "ChatOpenAI",
            {
                "openinference.span.kind": "LLM",
                "llm.model_name": "gpt-4o",
                "llm.input_messages.0.message.role": "system",
                "llm.input_messages.0.message.content": "Answer from context.",
                "llm.input_messages.1.message.role": "user",
                "llm.input_messages.1.message.content": "Context: ... Question: Where is France?",
                "output.value": json.dumps({"generations": [[{"text": "In Western Europe."}]]}),
            },
            parent=root,
            start=40,
            end=90,
        ),
    ]
    [r], _ = extract_records(spans)
    assert r.span_id == root  # the top-most chain, not the inner one
    assert r.question == "Where is France?"
    assert r.answer == "In Western Europe."
    assert len(r.documents) == 2 and r.model == "gpt-4o"


def test_genai_conventions_only() -> None:
    t, root = new_trace_id(), new_span_id()
    spans = [
        make_span(
            t,
            "invoke_agent support",
            {"gen_ai.operation.name": "invoke_agent"},
            span_id=root,
            start=0,
            end=100,
        ),
        make_span(
            t,
            "retrieval kb",
            {
                "gen_ai.operation.name": "retrieval",
                "gen_ai.data_source.id": "kb",
                "input.value": "reset password",
                **DOCS,
            },
            parent=root,
            start=5,
            end=10,
        ),
        make_span(
            t,
            "chat gpt-4o",
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "gpt-4o",
                "gen_ai.response.model": "gpt-4o-2024-08-06",
                "gen_ai.usage.input_tokens": 50,
                "gen_ai.usage.output_tokens": 7,
                "gen_ai.input.messages": json.dumps(
                    [
                        {"role": "system", "parts": [{"type": "text", "content": "Be brief"}]},
                        {"role": "user", "parts": [{"type": "text", "content": "How to reset?"}]},
                    ]
                ),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": "Use the reset link."}],
                            "finish_reason": "stop",
                        }
                    ]
                ),
            },
            parent=root,
            start=20,
            end=90,
        ),
    ]
    [r], _ = extract_records(spans)
    assert r.span_id == root
    # An agent turn: the user's words are the question, what it searched for the query.
    assert r.kind == "agent" and r.question == "How to reset?"
    assert {d.query for d in r.documents} == {"reset password"}
    assert r.documents[0].source is not None and r.documents[0].source.kind == "retriever"
    assert r.answer == "Use the reset link."
    assert r.model == "gpt-4o-2024-08-06" and r.input_tokens == 50 and r.output_tokens == 7


def test_retriever_and_llm_without_chain_root_at_trace_root() -> None:
    t, root = new_trace_id(), new_span_id()
    spans = [
        make_span(t, "POST /chat", {"http.route": "/chat"}, span_id=root, kind="server"),
        make_span(
            t,
            "retrieve",
            {"openinference.span.kind": "RETRIEVER", "input.value": "capital?", **DOCS},
            parent=root,
        ),
        make_span(
            t,
            "llm",
            {"openinference.span.kind": "LLM", "output.value": "Paris."},
            parent=root,
        ),
    ]
    [r], _ = extract_records(spans)
    assert (r.span_id, r.route, r.question, r.answer) == (root, "/chat", "capital?", "Paris.")


def test_pipeline_with_remote_parent_and_error_status() -> None:
    t, root = new_trace_id(), new_span_id()
    spans = [
        make_span(
            t,
            "answer",
            {
                "ragpulse.role": "pipeline",
                "openinference.span.kind": "CHAIN",
                "input.value": "q?",
                "input.mime_type": "text/plain",
                "output.value": '"quoted" answer',
                "output.mime_type": "text/plain",
                "ragpulse.route": "/ask",
            },
            span_id=root,
            parent=new_span_id(),  # remote parent never seen by the collector
            status=SpanStatus.ERROR,
        ),
    ]
    [r], _ = extract_records(spans)
    assert r.answer == '"quoted" answer'  # text/plain is never JSON-decoded
    assert r.route == "/ask" and r.error and r.documents == []


def test_non_rag_traces_are_skipped_with_reason() -> None:
    t = new_trace_id()
    llm_only = [make_span(t, "chat", {"openinference.span.kind": "LLM", "output.value": "hi"})]
    assert extract_records(llm_only) == ([], NO_RAG_SHAPE)
    http_only = [make_span(t, "GET /", {"http.route": "/"})]
    assert extract_records(http_only) == ([], NO_RAG_SHAPE)
    assert extract_records([]) == ([], NO_RAG_SHAPE)


def test_reranker_output_replaces_retrieved_documents() -> None:
    t, root = new_trace_id(), new_span_id()
    spans = [
        make_span(t, "q", {"openinference.span.kind": "CHAIN", "input.value": "q"}, span_id=root),
        make_span(t, "r", {"openinference.span.kind": "RETRIEVER", **DOCS}, parent=root),
        make_span(
            t,
            "rerank",
            {
                "openinference.span.kind": "RERANKER",
                "reranker.output_documents.0.document.id": "doc-b",
                "reranker.output_documents.0.document.content": "France is in Western Europe.",
            },
            parent=root,
        ),
    ]
    [r], _ = extract_records(spans)
    assert [d.id for d in r.documents] == ["doc-b"]


def test_hostile_attribute_values_do_not_break_extraction() -> None:
    t, root = new_trace_id(), new_span_id()
    spans = [
        make_span(
            t,
            "q",
            {
                "openinference.span.kind": "CHAIN",
                "input.value": "{not json",
                "output.value": "[1, 2",
            },
            span_id=root,
        ),
        make_span(
            t,
            "r",
            {
                "openinference.span.kind": "RETRIEVER",
                "retrieval.documents.0.document.content": ["a", "list"],
                "retrieval.documents.0.document.score": "high",
                "retrieval.documents.0.document.metadata": "{bad",
                "retrieval.documents.x.document.content": "ignored index",
            },
            parent=root,
        ),
    ]
    [r], _ = extract_records(spans)
    assert r.question == "{not json" and r.answer == "[1, 2"
    assert r.documents[0].score is None and r.documents[0].metadata == {"raw": "{bad"}
    # Every conversion is reported on the record (and counted by the pipeline), not silent.
    assert r.attributes["ragpulse.coerced"] == [
        "document.content: list -> json text",
        "document.metadata: not JSON -> {raw}",
        "document.score: str dropped",
    ]


def test_coercions_are_counted_by_field() -> None:
    """The pipeline counts each conversion in ragpulse_coerced_values_total{field}."""
    from prometheus_client import CollectorRegistry

    from ragpulse.collector.assembly.assembler import CompletedTrace
    from ragpulse.collector.evaluate.exports import Exports
    from ragpulse.collector.evaluate.pipeline import Pipeline
    from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
    from ragpulse.telemetry import CollectorMetrics

    t, root = new_trace_id(), new_span_id()
    spans = [
        make_span(t, "q", {"openinference.span.kind": "CHAIN", "input.value": "Where?",
                           "output.value": "Paris."}, span_id=root),
        make_span(t, "r", {"openinference.span.kind": "RETRIEVER",
                           "retrieval.documents.0.document.content": "Paris.",
                           "retrieval.documents.0.document.score": "high",
                           "retrieval.documents.1.document.content": "Lyon.",
                           "retrieval.documents.1.document.score": "low"}, parent=root),
    ]  # fmt: skip
    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    pipeline = Pipeline([LexicalFaithfulness()], Exports([], metrics), metrics)
    pipeline.process([CompletedTrace(t, spans, "quiet", first_seen=0.0)])
    assert (
        registry.get_sample_value("ragpulse_coerced_values_total", {"field": "document.score"}) == 2
    )


# --- traces captured from the real instrumentations (tests/support/instrumentations/capture.py) ---

FIXTURES = Path(__file__).resolve().parents[1] / "support" / "instrumentations" / "fixtures"
QUESTIONS = {
    "How much does the Nimbus Pro plan cost per month?": (["kb-1", "kb-3"], "costs 6 dollars"),
    "How many notes does offline mode keep on the device?": (["kb-2", "kb-1"], "500 most"),
}
#: fixture -> (document ids recorded, model, tokens recorded, response id recorded)
CAPTURED = {
    "openinference_llama_index": (True, "fake-rag-model", False, False),
    "openinference_langchain": (True, "fake-rag-model", True, False),
    "openllmetry_langchain": (False, None, True, False),  # drops Document.id; model "unknown"
    "openlit_langchain": (True, "FakeChatModel", True, False),
    "genai_openai_events": (True, "fake-rag-model", True, True),
    "genai_openai_latest": (True, "fake-rag-model", True, True),
}


def _traces(name: str) -> list[list[Span]]:
    spans = [Span.model_validate(d) for d in json.loads((FIXTURES / f"{name}.json").read_text())]
    by_trace: dict[str, list[Span]] = {}
    for span in spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    return list(by_trace.values())


@pytest.mark.parametrize("name", sorted(CAPTURED))
def test_captured_instrumentation_traces(name: str) -> None:
    with_ids, model, tokens, response_id = CAPTURED[name]
    traces = _traces(name)
    assert len(traces) == len(QUESTIONS)
    seen = set()
    for spans in traces:
        records, skipped = extract_records(spans)
        assert skipped is None and len(records) == 1, (name, skipped, records)
        [r] = records
        ids, answer = QUESTIONS[r.question]
        seen.add(r.question)
        assert answer in r.answer
        assert len(r.documents) == 2 and all("Nimbus" in d.content or "notes" in d.content
                                             for d in r.documents)  # fmt: skip
        assert [d.id for d in r.documents] == (ids if with_ids else [None, None])
        assert r.model == model
        assert (r.input_tokens is not None and r.output_tokens is not None) == tokens
        assert (r.response_id or "").startswith("chatcmpl-") == response_id
        assert r.generation_span_id and r.retrieval_span_ids
    assert seen == set(QUESTIONS)


def _genai_trace(chat_attrs: dict[str, Any], events: list[SpanEvent]) -> list[Span]:
    t, root = new_trace_id(), new_span_id()
    retrieval = {
        "gen_ai.operation.name": "retrieval",
        "gen_ai.retrieval.query.text": "reset password",
        "gen_ai.retrieval.documents": [
            {"id": "d1", "score": 0.9, "content": "Use the reset link on the login page."}
        ],
    }
    return [
        make_span(t, "POST /ask", {"http.route": "/ask"}, span_id=root, start=0, end=100),
        make_span(t, "retrieval kb", retrieval, parent=root, start=5, end=10),
        make_span(t, "chat m", {"gen_ai.operation.name": "chat", **chat_attrs}, parent=root,
                  start=20, end=90, events=events),
    ]  # fmt: skip


def test_genai_content_in_span_events_and_structured_documents() -> None:
    """Span events (not log records): attributes only, messages as JSON text; the
    retrieval documents as a structured array."""
    details = SpanEvent(
        name="gen_ai.client.inference.operation.details",
        attributes={
            "gen_ai.input.messages": json.dumps(
                [{"role": "user", "parts": [{"type": "text", "content": "How do I reset?"}]}]
            ),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "Use the link."}]}]
            ),
            "gen_ai.response.id": "resp-7",
        },
    )
    [r], _ = extract_records(_genai_trace({"gen_ai.request.model": "m1"}, [details]))
    assert (r.question, r.answer, r.response_id, r.model) == (
        "reset password", "Use the link.", "resp-7", "m1"
    )  # fmt: skip
    assert [(d.id, d.score) for d in r.documents] == [("d1", 0.9)]
    assert r.route == "/ask"


def test_genai_older_log_events_user_message_and_choice() -> None:
    events = [
        SpanEvent(name="gen_ai.system.message", body={"content": "Be brief."}, source="log"),
        SpanEvent(name="gen_ai.user.message", body={"content": "How do I reset?"}, source="log"),
        SpanEvent(name="gen_ai.choice", source="log",
                  body={"index": 0, "message": {"role": "assistant", "content": "The link."}}),
    ]  # fmt: skip
    spans = _genai_trace({"gen_ai.response.id": "chatcmpl-1"}, events)
    # No retriever query: the question comes from the user message event.
    spans[1] = spans[1].model_copy(update={"attributes": {"gen_ai.operation.name": "retrieval"}})
    [r], _ = extract_records(spans)
    assert (r.question, r.answer, r.response_id) == ("How do I reset?", "The link.", "chatcmpl-1")


def test_openllmetry_older_indexed_prompts_and_openlit_content_events() -> None:
    indexed = {
        "gen_ai.prompt.0.role": "system", "gen_ai.prompt.0.content": "Be brief.",
        "gen_ai.prompt.1.role": "user", "gen_ai.prompt.1.content": "How do I reset?",
        "gen_ai.completion.0.role": "assistant", "gen_ai.completion.0.content": "The link.",
        "gen_ai.usage.prompt_tokens": 12, "gen_ai.usage.completion_tokens": 3,
    }  # fmt: skip
    spans = _genai_trace(indexed, [])
    spans[1] = spans[1].model_copy(update={"attributes": {"gen_ai.operation.name": "retrieval"}})
    [r], _ = extract_records(spans)
    assert (r.question, r.answer, r.input_tokens, r.output_tokens) == (
        "How do I reset?", "The link.", 12, 3
    )  # fmt: skip
    openlit = [
        SpanEvent(name="gen_ai.content.prompt", attributes={"gen_ai.prompt": "user: hi?"}),
        SpanEvent(name="gen_ai.content.completion", attributes={"gen_ai.completion": "Hello."}),
    ]
    spans = _genai_trace({}, openlit)
    spans[1] = spans[1].model_copy(update={"attributes": {"gen_ai.operation.name": "retrieval"}})
    [r], _ = extract_records(spans)
    assert (r.question, r.answer) == ("user: hi?", "Hello.")


def test_data_source_id_alone_is_not_a_retriever() -> None:
    """The spec puts gen_ai.data_source.id on agent spans too: no retrieval shape."""
    t = new_trace_id()
    spans = [
        make_span(t, "invoke_agent a", {"gen_ai.operation.name": "invoke_agent",
                                        "gen_ai.data_source.id": "kb"}),
        make_span(t, "tool", {"gen_ai.data_source.id": "kb", "input.value": "q"}),
    ]  # fmt: skip
    assert extract_records(spans) == ([], NO_RAG_SHAPE)


def test_the_table_names_the_five_conventions() -> None:
    """Each row says whose convention it reads; no stray names."""
    conventions = {r.convention for r in READERS} | {r.convention for r in ROLE_RULES}
    assert conventions == {"ragpulse", "openinference", "genai", "openllmetry", "openlit"}


def test_hostile_values_in_the_newer_conventions_do_not_break_extraction() -> None:
    """Garbage where JSON, messages, documents or event bodies are expected: the record
    keeps what is readable, nothing raises."""
    t, root = new_trace_id(), new_span_id()
    odd_events = [
        SpanEvent(name="gen_ai.choice", body=["not", "a", "dict"], source="log"),
        SpanEvent(name="gen_ai.choice", body=7, source="log"),
        SpanEvent(name="gen_ai.client.inference.operation.details",
                  attributes={"gen_ai.output.messages": "{not json", "gen_ai.response.id": 5}),
        SpanEvent(name="gen_ai.user.message", body={"content": {"nested": ["x"]}}, source="log"),
    ]  # fmt: skip
    spans = [
        make_span(t, "workflow", {"traceloop.span.kind": "workflow",
                                  "traceloop.entity.input": "{broken",
                                  "traceloop.entity.output": json.dumps({"outputs": 3})},
                  span_id=root, start=0, end=100),
        make_span(t, "retrieve", {"gen_ai.operation.name": "vector_db_retrieve",
                                  "traceloop.entity.input": json.dumps({"query": "reset?"}),
                                  "traceloop.entity.output": json.dumps(
                                      {"documents": [1, None, {"page_content": 5}, "text doc"]})},
                  parent=root, start=5, end=10),
        make_span(t, "retrieval", {"gen_ai.operation.name": "retrieval",
                                   "gen_ai.retrieval.documents": "[1, 2"},
                  parent=root, start=11, end=12),
        make_span(t, "chat", {"gen_ai.operation.name": "chat", "gen_ai.prompt.0.role": 3,
                              "gen_ai.input.messages": json.dumps([{"role": "user", "parts": 4}])},
                  parent=root, start=20, end=90, events=odd_events),
    ]  # fmt: skip
    [r], skipped = extract_records(spans)
    assert skipped is None
    assert r.question == "{broken"  # not JSON: taken as the text it is
    assert r.response_id == "5"
    assert [d.content for d in r.documents] == ["1", "", "5", "text doc"]
    assert r.attributes["ragpulse.coerced"] == ["document.content: int -> json text"] * 2
