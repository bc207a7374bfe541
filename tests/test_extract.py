"""Extraction from spans that ragpulse's decorators did not write: OpenInference
(LlamaIndex / LangChain shapes) and OTel GenAI conventions."""

from __future__ import annotations

import json

from helpers import make_span, new_span_id, new_trace_id

from ragpulse.collector.extract import NO_RAG_SHAPE, extract_records
from ragpulse.record import SpanStatus

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
    assert r.question == "reset password"  # the agent span has no input: the retriever query
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

    from ragpulse.collector.assembly import CompletedTrace
    from ragpulse.collector.pipeline import Pipeline
    from ragpulse.evaluators.lexical import LexicalFaithfulness
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
    pipeline = Pipeline([LexicalFaithfulness()], [], CollectorMetrics(registry))
    pipeline.process([CompletedTrace(t, spans, "quiet", first_seen=0.0)])
    assert registry.get_sample_value(
        "ragpulse_coerced_values_total", {"field": "document.score"}
    ) == 2
