"""App-side instrumentation: decorators, ``with`` forms, configure()/shutdown().

Every test gets a fresh InMemorySpanExporter on a fresh SDK TracerProvider, so no
global state leaks between tests (nor from other test modules that set a global
provider).
"""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import socket
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult
from opentelemetry.trace import StatusCode
from pydantic import BaseModel

import ragpulse
from ragpulse import semconv as sc
from ragpulse.errors import ConfigError
from ragpulse.sdk import instrument
from ragpulse.sdk import provider as _provider

ENV_VARS = (
    "RAGPULSE_SERVICE_NAME",
    "OTEL_SERVICE_NAME",
    "RAGPULSE_ENDPOINT",
    "RAGPULSE_API_TOKEN",
    "RAGPULSE_EXPORTER",
    "RAGPULSE_EXPORT_TIMEOUT",
    "RAGPULSE_CAPTURE_CONTENT",
    "RAGPULSE_MAX_TEXT_CHARS",
    "RAGPULSE_MAX_DOCUMENTS",
)


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    yield
    ragpulse.shutdown()


Setup = Callable[..., InMemorySpanExporter]


@pytest.fixture
def setup() -> Setup:
    """``setup(**configure_kwargs)`` -> a fresh exporter on a fresh provider."""

    def _setup(**kwargs: Any) -> InMemorySpanExporter:
        exporter = InMemorySpanExporter()
        kwargs.setdefault("tracer_provider", TracerProvider())
        ragpulse.configure(exporter=exporter, **kwargs)
        return exporter

    return _setup


@pytest.fixture
def exporter(setup: Setup) -> InMemorySpanExporter:
    return setup()


def only_span(exporter: InMemorySpanExporter) -> ReadableSpan:
    spans = exporter.get_finished_spans()
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def attrs(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def by_name(exporter: InMemorySpanExporter) -> dict[str, ReadableSpan]:
    return {span.name: span for span in exporter.get_finished_spans()}


# --- Decorator forms ------------------------------------------------------------------


def test_bare_and_called_decorators_write_the_same_span(exporter: InMemorySpanExporter) -> None:
    @ragpulse.pipeline
    def bare(question: str) -> str:
        return "an answer"

    @ragpulse.pipeline(name="answer", route="/ask")
    def called(question: str) -> str:
        return "an answer"

    @ragpulse.pipeline()
    def empty_call(question: str) -> str:
        return "an answer"

    assert bare("q?") == called("q?") == empty_call("q?") == "an answer"
    spans = by_name(exporter)
    assert set(spans) == {"bare", "answer", "empty_call"}
    for span in spans.values():
        a = attrs(span)
        assert a[sc.OPENINFERENCE_SPAN_KIND] == sc.KIND_CHAIN
        assert a[sc.RAGPULSE_ROLE] == sc.ROLE_PIPELINE
        assert a[sc.INPUT_VALUE] == "q?"
        assert a[sc.INPUT_MIME_TYPE] == sc.MIME_TEXT
        assert a[sc.OUTPUT_VALUE] == "an answer"
        assert a[sc.OUTPUT_MIME_TYPE] == sc.MIME_TEXT
        assert a[sc.RAGPULSE_CONTENT_CAPTURED] is True
        assert span.kind is trace.SpanKind.INTERNAL
    assert attrs(spans["answer"])[sc.RAGPULSE_ROUTE] == "/ask"
    assert sc.RAGPULSE_ROUTE not in attrs(spans["bare"])


def test_decorators_reject_positional_strings() -> None:
    with pytest.raises(TypeError, match="keyword"):
        ragpulse.pipeline("answer")  # type: ignore[call-overload]


def test_wrappers_keep_name_signature_and_function_kind() -> None:
    @ragpulse.retrieval
    def sync(query: str, k: int = 3) -> list[str]:
        """Doc."""
        return []

    @ragpulse.generation(model="m")
    async def coro(prompt: str) -> str:
        return ""

    @ragpulse.pipeline
    def gen(question: str) -> Iterator[str]:
        yield ""

    @ragpulse.pipeline
    async def agen(question: str) -> AsyncIterator[str]:
        yield ""

    assert sync.__name__ == "sync" and sync.__doc__ == "Doc."
    assert str(inspect.signature(sync)) == "(query: 'str', k: 'int' = 3) -> 'list[str]'"
    assert inspect.iscoroutinefunction(coro)
    assert inspect.isgeneratorfunction(gen)
    assert inspect.isasyncgenfunction(agen)


def test_question_from_keywords_and_methods(exporter: InMemorySpanExporter) -> None:
    class Rag:
        @ragpulse.pipeline(name="method")
        def answer(self, question: str) -> str:
            return "m"

        @classmethod
        @ragpulse.pipeline(name="classmethod")
        def build(cls, question: str) -> str:
            return "c"

    @ragpulse.pipeline(name="by_keyword")
    def ask(*, question: str) -> str:
        return "k"

    @ragpulse.retrieval(name="first_param_as_keyword")
    def search(text: str) -> list[str]:
        return []

    assert Rag().answer("via self") == "m"
    assert Rag.build("via cls") == "c"
    assert ask(question="via kw") == "k"
    assert search(text="via name") == []
    spans = by_name(exporter)
    assert attrs(spans["method"])[sc.INPUT_VALUE] == "via self"
    assert attrs(spans["classmethod"])[sc.INPUT_VALUE] == "via cls"
    assert attrs(spans["by_keyword"])[sc.INPUT_VALUE] == "via kw"
    assert attrs(spans["first_param_as_keyword"])[sc.INPUT_VALUE] == "via name"


@dataclass
class Answer:
    answer: str
    sources: list[str] = field(default_factory=list)


class AnswerModel(BaseModel):
    answer: str


@pytest.mark.parametrize(
    "result", [{"answer": "dict"}, Answer("dataclass"), AnswerModel(answer="pydantic")]
)
def test_answer_shapes_and_return_identity(exporter: InMemorySpanExporter, result: Any) -> None:
    @ragpulse.pipeline
    def run(question: str) -> Any:
        return result

    assert run("q") is result
    expected = result["answer"] if isinstance(result, dict) else result.answer
    assert attrs(only_span(exporter))[sc.OUTPUT_VALUE] == expected


# --- Sync, async and streaming ---------------------------------------------------------------


async def test_async_function(exporter: InMemorySpanExporter) -> None:
    @ragpulse.pipeline
    async def run(question: str) -> str:
        await asyncio.sleep(0)
        return "async answer"

    assert await run("q") == "async answer"
    assert attrs(only_span(exporter))[sc.OUTPUT_VALUE] == "async answer"


def test_generator_function_streams_and_span_waits(exporter: InMemorySpanExporter) -> None:
    @ragpulse.pipeline
    def run(question: str) -> Iterator[str]:
        yield "Hello"
        yield ", "
        yield "world"

    stream = run("q")
    assert next(stream) == "Hello"
    assert exporter.get_finished_spans() == ()  # still open mid-stream
    assert list(stream) == [", ", "world"]
    a = attrs(only_span(exporter))
    assert a[sc.OUTPUT_VALUE] == "Hello, world"
    assert sc.RAGPULSE_STREAM_CLOSED_EARLY not in a


def test_generator_return_value_and_send(exporter: InMemorySpanExporter) -> None:
    @ragpulse.pipeline
    def run(question: str) -> Any:
        received = yield "a"
        yield f"got {received}"
        return "done"

    stream = run("q")
    assert next(stream) == "a"
    assert stream.send("x") == "got x"
    with pytest.raises(StopIteration) as stop:
        next(stream)
    assert stop.value.value == "done"
    assert attrs(only_span(exporter))[sc.OUTPUT_VALUE] == "agot x"


async def test_async_generator_function(exporter: InMemorySpanExporter) -> None:
    @ragpulse.pipeline
    async def run(question: str) -> AsyncIterator[str]:
        for chunk in ("a", "b", "c"):
            await asyncio.sleep(0)
            yield chunk

    chunks = [chunk async for chunk in run("q")]
    assert chunks == ["a", "b", "c"]
    assert attrs(only_span(exporter))[sc.OUTPUT_VALUE] == "abc"


def test_function_returning_an_iterator(exporter: InMemorySpanExporter) -> None:
    chunks = ["x", "y", "z"]

    @ragpulse.pipeline
    def run(question: str) -> Iterator[str]:
        return iter(chunks)

    stream = run("q")
    assert exporter.get_finished_spans() == ()
    assert list(stream) == chunks
    assert attrs(only_span(exporter))[sc.OUTPUT_VALUE] == "xyz"


async def test_async_function_returning_an_async_iterator(
    exporter: InMemorySpanExporter,
) -> None:
    async def tokens() -> AsyncIterator[str]:
        yield "one "
        yield "two"

    @ragpulse.generation(model="m")
    async def run(prompt: str) -> AsyncIterator[str]:
        return tokens()

    stream = await run("p")
    assert exporter.get_finished_spans() == ()
    assert [c async for c in stream] == ["one ", "two"]
    assert attrs(only_span(exporter))[sc.OUTPUT_VALUE] == "one two"


def test_stream_closed_early_records_partial_answer(exporter: InMemorySpanExporter) -> None:
    @ragpulse.pipeline
    def run(question: str) -> Generator[str, None, None]:
        yield "part"
        yield "never"

    stream = run("q")
    assert next(stream) == "part"
    stream.close()
    a = attrs(only_span(exporter))
    assert a[sc.OUTPUT_VALUE] == "part"
    assert a[sc.RAGPULSE_STREAM_CLOSED_EARLY] is True


def test_abandoned_returned_stream_ends_its_span(exporter: InMemorySpanExporter) -> None:
    @ragpulse.pipeline
    def run(question: str) -> Iterator[str]:
        return iter(["a", "b"])

    stream = run("q")
    next(stream)
    del stream
    gc.collect()
    assert attrs(only_span(exporter))[sc.RAGPULSE_STREAM_CLOSED_EARLY] is True


def test_openai_like_stream_chunks(exporter: InMemorySpanExporter) -> None:
    @dataclass
    class Delta:
        content: str | None

    @dataclass
    class Choice:
        delta: Delta

    @dataclass
    class Usage:
        prompt_tokens: int
        completion_tokens: int

    @dataclass
    class Chunk:
        choices: list[Choice]
        model: str = "gpt-x-2024"
        usage: Usage | None = None

    chunks = [
        Chunk([Choice(Delta("Hi"))]),
        Chunk([Choice(Delta(" there"))]),
        Chunk([], usage=Usage(7, 2)),
    ]

    @ragpulse.generation(system="openai")
    def run(prompt: str) -> Iterator[Chunk]:
        return iter(chunks)

    assert list(run("p")) == chunks  # same objects pass through
    a = attrs(only_span(exporter))
    assert a[sc.OUTPUT_VALUE] == "Hi there"
    assert a[sc.GEN_AI_USAGE_INPUT_TOKENS] == 7
    assert a[sc.LLM_TOKEN_COUNT_COMPLETION] == 2
    assert a[sc.GEN_AI_RESPONSE_MODEL] == "gpt-x-2024"
    assert a[sc.LLM_MODEL_NAME] == "gpt-x-2024"
    assert a[sc.GEN_AI_PROVIDER_NAME] == "openai"


# --- Trace structure ---------------------------------------------------------------------


def test_children_nest_under_the_pipeline(exporter: InMemorySpanExporter) -> None:
    @ragpulse.retrieval
    def retrieve(query: str) -> list[str]:
        return ["doc"]

    @ragpulse.generation(model="m")
    def generate(prompt: str) -> str:
        return "answer"

    @ragpulse.pipeline
    def run(question: str) -> str:
        retrieve(question)
        return generate(question)

    run("q")
    spans = by_name(exporter)
    root = spans["run"]
    assert root.parent is None
    for child in (spans["retrieval"], spans["chat m"]):
        assert child.parent is not None
        assert child.parent.span_id == root.context.span_id
        assert child.context.trace_id == root.context.trace_id


async def test_children_nest_in_async_and_streaming_pipelines(
    exporter: InMemorySpanExporter,
) -> None:
    @ragpulse.retrieval
    async def retrieve(query: str) -> list[str]:
        return ["doc"]

    @ragpulse.generation(model="m")
    async def generate(prompt: str) -> AsyncIterator[str]:
        yield "an"
        yield "swer"

    @ragpulse.pipeline
    async def run(question: str) -> AsyncIterator[str]:
        await retrieve(question)
        async for chunk in generate(question):
            yield chunk

    assert [c async for c in run("q")] == ["an", "swer"]
    spans = by_name(exporter)
    root = spans["run"]
    assert attrs(root)[sc.OUTPUT_VALUE] == "answer"
    for child in (spans["retrieval"], spans["chat m"]):
        assert child.parent is not None and child.parent.span_id == root.context.span_id


def test_stream_span_is_not_current_between_items(exporter: InMemorySpanExporter) -> None:
    @ragpulse.pipeline
    def run(question: str) -> Iterator[str]:
        yield "a"
        yield "b"

    with ragpulse.pipeline_span("outer", name="outer"):
        for _ in run("q"):
            with ragpulse.retrieval_span("between", name="between"):
                pass
    spans = by_name(exporter)
    assert spans["between"].parent is not None
    assert spans["between"].parent.span_id == spans["outer"].context.span_id
    assert spans["run"].parent is not None
    assert spans["run"].parent.span_id == spans["outer"].context.span_id


def test_context_manager_forms(exporter: InMemorySpanExporter) -> None:
    with ragpulse.pipeline_span("q?", route="/r") as p:
        with ragpulse.retrieval_span("q?", data_source="kb") as r:
            r.set_documents([ragpulse.Document(id="d1", content="text", score=0.5)])
        with ragpulse.generation_span(model="m", prompt="prompt", system="openai") as g:
            g.set_answer("A", input_tokens=3, output_tokens=1)
        p.set_answer("A")
    spans = by_name(exporter)
    assert set(spans) == {"pipeline", "retrieval kb", "chat m"}
    assert attrs(spans["pipeline"])[sc.RAGPULSE_ROUTE] == "/r"
    assert attrs(spans["retrieval kb"])[sc.GEN_AI_DATA_SOURCE_ID] == "kb"
    assert attrs(spans["chat m"])[sc.LLM_TOKEN_COUNT_PROMPT] == 3
    for child in ("retrieval kb", "chat m"):
        parent = spans[child].parent
        assert parent is not None and parent.span_id == spans["pipeline"].context.span_id


async def test_context_manager_inside_async_code(exporter: InMemorySpanExporter) -> None:
    async def inner() -> None:
        with ragpulse.retrieval_span("q") as r:
            await asyncio.sleep(0)
            r.set_documents(["a"])

    with ragpulse.pipeline_span("q") as p:
        await asyncio.gather(inner(), inner())
        p.set_answer("done")
    spans = exporter.get_finished_spans()
    root = next(s for s in spans if s.name == "pipeline")
    children = [s for s in spans if s.name == "retrieval"]
    assert len(children) == 2
    assert all(c.parent is not None and c.parent.span_id == root.context.span_id for c in children)


def test_context_manager_records_and_propagates_exceptions(
    exporter: InMemorySpanExporter,
) -> None:
    boom = ValueError("boom")
    with pytest.raises(ValueError) as caught, ragpulse.pipeline_span("q"):
        raise boom
    assert caught.value is boom
    span = only_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[sc.ERROR_TYPE] == "ValueError"


# --- Documents -----------------------------------------------------------------------------


@dataclass
class LangChainDoc:
    page_content: str
    metadata: dict[str, Any]
    id: str | None = None


@dataclass
class Node:
    text: str
    node_id: str
    metadata: dict[str, Any]


@dataclass
class NodeWithScore:
    node: Node
    score: float


DOCUMENT_SHAPES: dict[str, tuple[Any, dict[str, Any]]] = {
    "str": ("plain text", {"content": "plain text"}),
    "dict-content": (
        {"id": "d1", "content": "c", "score": 0.9, "metadata": {"src": "a"}},
        {"id": "d1", "content": "c", "score": 0.9, "metadata": {"src": "a"}},
    ),
    "dict-text": ({"id": 7, "text": "t"}, {"id": "7", "content": "t"}),
    "dict-page_content": ({"page_content": "p", "score": 1}, {"content": "p", "score": 1.0}),
    "Document": (
        ragpulse.Document(id="d2", content="doc", score=0.1, metadata={"k": 1}),
        {"id": "d2", "content": "doc", "score": 0.1, "metadata": {"k": 1}},
    ),
    "langchain": (
        LangChainDoc("lc", {"source": "s"}, id="l1"),
        {"id": "l1", "content": "lc", "metadata": {"source": "s"}},
    ),
    "langchain-with-score": (
        (LangChainDoc("lc", {}), 0.25),
        {"content": "lc", "score": 0.25},
    ),
    "llamaindex": (
        NodeWithScore(Node("li", "n1", {"page": 2}), 0.75),
        {"id": "n1", "content": "li", "score": 0.75, "metadata": {"page": 2}},
    ),
}


@pytest.mark.parametrize("shape", list(DOCUMENT_SHAPES))
def test_document_shapes(exporter: InMemorySpanExporter, shape: str) -> None:
    item, expected = DOCUMENT_SHAPES[shape]
    result = [item, item]

    @ragpulse.retrieval(data_source="kb")
    def retrieve(query: str) -> list[Any]:
        return result

    assert retrieve("q") is result
    a = attrs(only_span(exporter))
    assert a[sc.OPENINFERENCE_SPAN_KIND] == sc.KIND_RETRIEVER
    assert a[sc.RAGPULSE_ROLE] == sc.ROLE_RETRIEVAL
    assert a[sc.GEN_AI_OPERATION_NAME] == sc.GEN_AI_OP_RETRIEVAL
    assert a[sc.GEN_AI_DATA_SOURCE_ID] == "kb"
    assert a[sc.INPUT_VALUE] == "q"
    assert a[sc.RAGPULSE_DOCUMENT_COUNT] == 2
    for index in (0, 1):
        fields = {
            "id": a.get(sc.document_attr(index, sc.DOCUMENT_ID)),
            "content": a.get(sc.document_attr(index, sc.DOCUMENT_CONTENT)),
            "score": a.get(sc.document_attr(index, sc.DOCUMENT_SCORE)),
            "metadata": a.get(sc.document_attr(index, sc.DOCUMENT_METADATA)),
        }
        if fields["metadata"] is not None:
            fields["metadata"] = json.loads(fields["metadata"])
        assert {k: v for k, v in fields.items() if v is not None} == expected


def test_streamed_documents_and_document_cap(setup: Setup) -> None:
    exporter = setup(max_documents=2)

    @ragpulse.retrieval
    def retrieve(query: str) -> Iterator[str]:
        yield from ("a", "b", "c")

    assert list(retrieve("q")) == ["a", "b", "c"]
    a = attrs(only_span(exporter))
    assert a[sc.RAGPULSE_DOCUMENT_COUNT] == 3
    assert a[sc.document_attr(1, sc.DOCUMENT_CONTENT)] == "b"
    assert sc.document_attr(2, sc.DOCUMENT_CONTENT) not in a
    assert a[sc.RAGPULSE_TRUNCATED] is True


def test_unserialisable_metadata_falls_back_to_repr(exporter: InMemorySpanExporter) -> None:
    class Opaque:
        def __repr__(self) -> str:
            return "<opaque>"

    circular: dict[str, Any] = {}
    circular["self"] = circular

    @ragpulse.retrieval
    def retrieve(query: str) -> list[dict[str, Any]]:
        return [
            {"content": "a", "metadata": {"obj": Opaque()}},
            {"content": "b", "metadata": circular},
        ]

    retrieve("q")
    a = attrs(only_span(exporter))
    assert json.loads(a[sc.document_attr(0, sc.DOCUMENT_METADATA)]) == {"obj": "<opaque>"}
    assert a[sc.document_attr(1, sc.DOCUMENT_METADATA)] == "{'self': {...}}"


# --- Generation ---------------------------------------------------------------------------------


def test_generation_with_chat_messages_and_completion_object(
    exporter: InMemorySpanExporter,
) -> None:
    @dataclass
    class Message:
        content: str

    @dataclass
    class Choice:
        message: Message

    @dataclass
    class Usage:
        prompt_tokens: int
        completion_tokens: int

    @dataclass
    class ChatCompletion:
        choices: list[Choice]
        usage: Usage
        model: str

    completion = ChatCompletion([Choice(Message("It is 4."))], Usage(12, 4), "gpt-x-0613")
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]

    @ragpulse.generation(model="gpt-x", system="openai")
    def chat(messages: list[dict[str, str]]) -> ChatCompletion:
        return completion

    assert chat(messages) is completion
    a = attrs(only_span(exporter))
    assert a[sc.OPENINFERENCE_SPAN_KIND] == sc.KIND_LLM
    assert a[sc.RAGPULSE_ROLE] == sc.ROLE_GENERATION
    assert a[sc.GEN_AI_OPERATION_NAME] == sc.GEN_AI_OP_CHAT
    assert a[sc.LLM_MODEL_NAME] == a[sc.GEN_AI_REQUEST_MODEL] == "gpt-x"
    assert a[sc.GEN_AI_RESPONSE_MODEL] == "gpt-x-0613"
    assert a[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert json.loads(a[sc.INPUT_VALUE]) == messages
    assert a[sc.INPUT_MIME_TYPE] == sc.MIME_JSON
    assert a[sc.OUTPUT_VALUE] == "It is 4."
    assert a[sc.LLM_TOKEN_COUNT_PROMPT] == a[sc.GEN_AI_USAGE_INPUT_TOKENS] == 12
    assert a[sc.LLM_TOKEN_COUNT_COMPLETION] == a[sc.GEN_AI_USAGE_OUTPUT_TOKENS] == 4


def test_generation_plain_strings(exporter: InMemorySpanExporter) -> None:
    @ragpulse.generation
    def complete(prompt: str) -> str:
        return "done"

    complete("Say done")
    a = attrs(only_span(exporter))
    assert a[sc.INPUT_VALUE] == "Say done"
    assert a[sc.INPUT_MIME_TYPE] == sc.MIME_TEXT
    assert a[sc.OUTPUT_VALUE] == "done"
    assert sc.LLM_MODEL_NAME not in a
    assert sc.LLM_TOKEN_COUNT_PROMPT not in a


# --- Tools (agents) ----------------------------------------------------------------------------


def test_tool_span_writes_the_genai_and_openinference_attributes(
    exporter: InMemorySpanExporter,
) -> None:
    @ragpulse.tool(retrieval=True)
    def search_docs(query: str, k: int = 2) -> list[dict[str, Any]]:
        return [{"id": "hb-7", "content": "25 vacation days.", "score": 0.9}, "Carry over."][:k]

    @ragpulse.tool(name="weather")
    async def get_weather(self_city: str, **options: Any) -> dict[str, Any]:
        return {"city": self_city, "degrees": 12}

    result = search_docs("vacation days")
    assert result[0]["id"] == "hb-7"  # the very same value
    assert asyncio.run(get_weather("Oslo", unit="C")) == {"city": "Oslo", "degrees": 12}
    spans = by_name(exporter)
    assert set(spans) == {"execute_tool search_docs", "execute_tool weather"}
    search, weather = attrs(spans["execute_tool search_docs"]), attrs(spans["execute_tool weather"])
    assert spans["execute_tool search_docs"].kind is trace.SpanKind.INTERNAL
    assert {k: search[k] for k in (sc.GEN_AI_OPERATION_NAME, sc.GEN_AI_TOOL_NAME,
                                   sc.GEN_AI_TOOL_TYPE, sc.TOOL_NAME, sc.OPENINFERENCE_SPAN_KIND,
                                   sc.RAGPULSE_ROLE)} == {
        sc.GEN_AI_OPERATION_NAME: sc.GEN_AI_OP_EXECUTE_TOOL, sc.GEN_AI_TOOL_NAME: "search_docs",
        sc.GEN_AI_TOOL_TYPE: sc.GEN_AI_TOOL_TYPE_DATASTORE, sc.TOOL_NAME: "search_docs",
        sc.OPENINFERENCE_SPAN_KIND: sc.KIND_TOOL, sc.RAGPULSE_ROLE: sc.ROLE_TOOL,
    }  # fmt: skip
    # Arguments by parameter name, as the call passed them; a list of documents as passages.
    assert json.loads(search[sc.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"query": "vacation days"}
    assert search[sc.INPUT_VALUE] == search[sc.GEN_AI_TOOL_CALL_ARGUMENTS]
    assert json.loads(search[sc.GEN_AI_TOOL_CALL_RESULT]) == [
        {"content": "25 vacation days.", "id": "hb-7", "score": 0.9}, {"content": "Carry over."},
    ]  # fmt: skip
    assert search[sc.OUTPUT_VALUE] == search[sc.GEN_AI_TOOL_CALL_RESULT]
    assert search[sc.OUTPUT_MIME_TYPE] == sc.MIME_JSON
    assert sc.GEN_AI_TOOL_CALL_ID not in search
    # **kwargs spread; anything else JSON; typed function unless retrieval=True.
    assert json.loads(weather[sc.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"self_city": "Oslo", "unit": "C"}
    assert json.loads(weather[sc.GEN_AI_TOOL_CALL_RESULT]) == {"city": "Oslo", "degrees": 12}
    assert weather[sc.GEN_AI_TOOL_TYPE] == sc.GEN_AI_TOOL_TYPE_FUNCTION


def test_tool_span_form_methods_streams_and_failures(exporter: InMemorySpanExporter) -> None:
    class Tools:
        @ragpulse.tool
        def lookup(self, term: str) -> str:
            return f"{term}: a definition"

        @ragpulse.tool
        def passages(self, topic: str) -> Iterator[str]:
            yield from ("first passage", "second passage")

    boom = ValueError("index down")
    with ragpulse.tool_span("search_docs", {"query": "q"}, call_id="call_7") as t:
        t.set_result("plain text result")
    with pytest.raises(ValueError) as caught, ragpulse.tool_span("search_docs", "q"):
        raise boom
    assert caught.value is boom
    assert Tools().lookup("RAG") == "RAG: a definition"
    assert list(Tools().passages("x")) == ["first passage", "second passage"]
    spans = exporter.get_finished_spans()
    ok, failed, lookup, streamed = (attrs(s) for s in spans)
    assert ok[sc.GEN_AI_TOOL_CALL_ID] == "call_7"
    assert ok[sc.GEN_AI_TOOL_CALL_RESULT] == "plain text result"
    assert ok[sc.OUTPUT_MIME_TYPE] == sc.MIME_TEXT
    assert failed[sc.INPUT_VALUE] == "q" and failed[sc.INPUT_MIME_TYPE] == sc.MIME_TEXT
    assert spans[1].status.status_code is StatusCode.ERROR
    assert json.loads(lookup[sc.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"term": "RAG"}  # no self
    assert json.loads(streamed[sc.GEN_AI_TOOL_CALL_RESULT]) == [
        {"content": "first passage"}, {"content": "second passage"},
    ]  # fmt: skip


def test_tool_results_are_bounded_per_passage(setup: Setup) -> None:
    exporter = setup(max_text_chars=10, max_documents=2)

    @ragpulse.tool
    def search(query: str) -> list[str]:
        return ["a passage longer than ten", "short", "a third one"]

    search("q")
    a = attrs(only_span(exporter))
    # Each passage cut on its own: the result stays JSON the collector can split.
    assert json.loads(a[sc.GEN_AI_TOOL_CALL_RESULT]) == [
        {"content": "a passage "}, {"content": "short"},
    ]  # fmt: skip
    assert a[sc.RAGPULSE_TRUNCATED] is True


def test_a_pipeline_with_tools_is_an_agent_turn_for_the_collector(
    exporter: InMemorySpanExporter,
) -> None:
    """The app's spans as ``serve`` receives them (OTLP protobuf, decoded by the
    collector), extracted as one agent turn whose documents are the tool results."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from ragpulse.collector.extract.records import extract_records
    from ragpulse.collector.intake.otlp import decode_request

    @ragpulse.tool(retrieval=True)
    def search_docs(query: str) -> list[dict[str, Any]]:
        return [{"id": "hb-7", "content": "Employees get 25 vacation days per year."},
                {"id": "hb-8", "content": "Unused days carry over."}]  # fmt: skip

    @ragpulse.tool
    def get_weather(city: str) -> str:
        return "12 degrees in Oslo"

    @ragpulse.generation(model="test-model")
    def generate(prompt: str) -> str:
        return "Employees get 25 vacation days per year."

    @ragpulse.pipeline(route="/agent")
    def agent(question: str) -> str:
        search_docs(query="vacation days")
        get_weather("Oslo")
        return generate(question)

    agent("How many vacation days do I get?")
    decoded = decode_request(encode_spans(exporter.get_finished_spans()))
    (record,), skipped = extract_records(decoded.spans)
    assert skipped is None and record.kind == "agent" and record.route == "/agent"
    assert record.question == "How many vacation days do I get?"
    assert record.answer == "Employees get 25 vacation days per year."
    assert [d.source.label for d in record.documents if d.source] == [
        "tool search_docs #1", "tool search_docs #2", "tool get_weather #1",
    ]  # fmt: skip
    assert [d.id for d in record.documents] == ["hb-7", "hb-8", None]
    search, weather = record.tool_calls
    assert (search.status, search.retrieval, search.documents) == ("ok", True, [0, 1])
    assert (weather.retrieval, weather.documents) == (False, [2])
    assert record.documents[0].query == "vacation days"  # what the agent searched for
    assert record.model_calls == 1 and record.model == "test-model"


# --- Conversations ----------------------------------------------------------------------------


def records_of(exporter: InMemorySpanExporter) -> list[Any]:
    """The app's spans as ``serve`` receives them (OTLP protobuf, decoded by the
    collector), extracted into records, in the order the turns started."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from ragpulse.collector.extract.records import extract_records
    from ragpulse.collector.intake.otlp import decode_request

    decoded = decode_request(encode_spans(exporter.get_finished_spans()))
    by_trace: dict[str, list[Any]] = {}
    for span in decoded.spans:
        by_trace.setdefault(span.trace_id, []).append(span)
    records = [r for spans in by_trace.values() for r in extract_records(spans)[0]]
    return sorted(records, key=lambda r: r.start_time_ns)


LIGHTHOUSE = "The Harbour lighthouse was built in 1857 and is 40 metres tall."


@ragpulse.retrieval
def find_passages(query: str) -> list[str]:
    return [LIGHTHOUSE] if "built" in query else []


@ragpulse.generation(model="test-model")
def write_answer(prompt: str) -> str:
    return "It was built in 1857." if "built" in prompt else "It is 40 metres tall."


def test_a_conversation_block_puts_every_turn_and_its_children_in_the_conversation(
    exporter: InMemorySpanExporter,
) -> None:
    @ragpulse.pipeline
    def answer(question: str) -> str:
        find_passages(question)
        return write_answer(question)

    with ragpulse.conversation("chat-1"):
        answer("When was the Harbour lighthouse built?")
        answer("And how tall is it?")
    answer("Outside any conversation?")
    first, second, outside = records_of(exporter)
    assert (first.conversation_id, second.conversation_id) == ("chat-1", "chat-1")
    assert outside.conversation_id is None
    spans = exporter.get_finished_spans()
    last = max((s for s in spans if s.name == "answer"), key=lambda s: s.start_time or 0)
    inside = [s for s in spans if s.context.trace_id != last.context.trace_id]
    # The pipeline spans and their children carry both conventions' keys; the turn
    # outside the block, none.
    assert sorted(s.name for s in inside) == sorted(["answer", "retrieval", "chat test-model"] * 2)
    for span in inside:
        assert attrs(span)[sc.GEN_AI_CONVERSATION_ID] == attrs(span)[sc.SESSION_ID] == "chat-1"
    assert all(sc.SESSION_ID not in attrs(s) for s in spans if s not in inside)


def test_conversation_id_names_the_pipelines_argument_and_wins_over_the_block(
    exporter: InMemorySpanExporter,
) -> None:
    @ragpulse.pipeline(conversation_id="session")
    def answer(question: str, session: str | None = None) -> str:
        return write_answer(question)

    class Bot:
        @ragpulse.pipeline(conversation_id="session")
        async def ask(self, question: str, *, session: int) -> str:
            return write_answer(question)

    with ragpulse.conversation("the-block"):
        answer("q1", "s-1")  # by position
        answer("q2", session="s-2")  # by keyword
        answer("q3")  # none given: the block's
        answer("q4", "   ")  # an empty id is no id: the block's
    asyncio.run(Bot().ask("q5", session=42))  # a number is written as text
    with ragpulse.pipeline_span("q6", conversation_id="s-6") as turn:
        turn.set_answer(write_answer("q6"))
    ids = [r.conversation_id for r in records_of(exporter)]
    assert ids == ["s-1", "s-2", "the-block", "the-block", "42", "s-6"]
    with pytest.raises(TypeError, match="no parameter 'session_id'"):

        @ragpulse.pipeline(conversation_id="session_id")
        def wrong(question: str) -> str:
            return ""


def test_the_end_of_a_conversation_is_marked_on_its_last_turn(
    exporter: InMemorySpanExporter,
) -> None:
    @ragpulse.pipeline
    def answer(question: str) -> str:
        return write_answer(question)

    with ragpulse.conversation("c-end") as chat:
        answer("q1")
        chat.end()  # between turns: the next turn is the last
        answer("q2")
    with ragpulse.conversation("c-during") as chat:

        @ragpulse.pipeline
        def goodbye(question: str) -> str:
            chat.end()  # during the turn: this one
            return "Bye!"

        goodbye("Thanks, bye")
    with ragpulse.conversation("c-flag", end=True):
        answer("q3")
    with ragpulse.pipeline_span("q4", conversation_id="c-span") as turn:
        turn.end_conversation()
    with ragpulse.conversation(""):  # no id: nothing to end
        ragpulse.conversation("").end()
        answer("q5")
    ended = {r.question: r.attributes.get(sc.RAGPULSE_CONVERSATION_END) for r in
             records_of(exporter)}  # fmt: skip
    assert ended == {"q1": None, "q2": True, "Thanks, bye": True, "q3": True, "q4": True,
                     "q5": None}  # fmt: skip


def test_conversations_decorate_functions_and_streams_and_never_raise(
    exporter: InMemorySpanExporter,
) -> None:
    @ragpulse.pipeline
    def answer(question: str) -> str:
        return write_answer(question)

    @ragpulse.conversation("c-sync")
    def sync_turn(question: str) -> str:
        return answer(question)

    @ragpulse.conversation("c-async")
    async def async_turn(question: str) -> str:
        return answer(question)

    @ragpulse.conversation("c-stream")
    def stream(question: str) -> Iterator[str]:
        yield answer(question)
        yield answer(question + "?")

    @ragpulse.conversation("c-astream")
    async def astream(question: str) -> AsyncIterator[str]:
        yield answer(question)

    async def drain() -> list[str]:
        return [x async for x in astream("q4")]

    assert sync_turn("q1") == write_answer("q1")
    assert asyncio.run(async_turn("q2")) == write_answer("q2")
    assert list(stream("q3")) == [write_answer("q3")] * 2
    assert asyncio.run(drain()) == [write_answer("q4")]
    answer("after")  # nothing leaked out of the decorated calls
    for odd in (BadStr(), object(), b"\xff", ["a"]):
        with ragpulse.conversation(odd):
            answer("odd")
    assert [r.conversation_id for r in records_of(exporter)] == [
        "c-sync", "c-async", "c-stream", "c-stream", "c-astream", None,  # "after"
        None, None, "\ufffd", None,  # bytes are read as UTF-8 text
    ]  # fmt: skip


def test_decorated_turns_become_a_conversation_with_the_earlier_turn_joined() -> None:
    """Through the collector's conversation stage, as ``serve`` runs it: two turns of one
    conversation id give two numbered turn records, the follow-up (whose spans carry no
    history) joined with the first turn, and a conversation record when it ends."""
    from ragpulse.collector.conversations.stage import ConversationStage
    from ragpulse.config import ConversationSettings
    from ragpulse.evaluation import evaluate_records
    from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
    from ragpulse.evaluators.user_frustration.rules import UserFrustration

    exporter = InMemorySpanExporter()
    ragpulse.configure(exporter=exporter, tracer_provider=TracerProvider())

    @ragpulse.pipeline(conversation_id="session")
    def answer(question: str, session: str) -> str:
        find_passages(question)
        return write_answer(question)

    closed: list[Any] = []
    stage = ConversationStage(
        ConversationSettings(),
        [UserFrustration()],
        lambda item: closed.append((item.record, list(item.results))),
    )
    faithfulness = LexicalFaithfulness()
    answer("When was the Harbour lighthouse built?", "chat-9")
    with ragpulse.conversation("chat-9", end=True):
        answer("And how tall is it?", "chat-9")
    turns = []
    for record in records_of(exporter):
        record = stage.prepare(record)
        [results] = evaluate_records([record], [faithfulness])
        stage.observe(record, results)
        turns.append((record, results))
    (first, _), (second, second_results) = turns
    assert (first.turn, second.turn) == (1, 2)
    assert [(m.role, m.content) for m in second.history] == [
        ("user", "When was the Harbour lighthouse built?"), ("assistant", "It was built in 1857."),
    ]  # fmt: skip
    # Answered from the first turn's passage, which the follow-up carries as evidence.
    assert [d.source.turn for d in second.documents if d.source] == [1]
    assert second_results[0].score is not None and second_results[0].score >= 0.7
    [(conversation, results)] = closed  # the end marker closed it at once
    assert conversation.conversation_id == "chat-9" and conversation.closed_by == "end"
    assert [t.turn for t in conversation.turns] == [1, 2]
    assert [r.name for r in results] == ["user_frustration/rules"]


# --- Errors and odd values -------------------------------------------------------------------


class AppError(Exception):
    pass


def test_exceptions_pass_through_unchanged_and_are_recorded(
    exporter: InMemorySpanExporter,
) -> None:
    error = AppError("no luck")

    @ragpulse.pipeline
    def run(question: str) -> str:
        raise error

    with pytest.raises(AppError) as caught:
        run("q")
    assert caught.value is error
    span = only_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert "no luck" in (span.status.description or "")
    assert attrs(span)[sc.ERROR_TYPE].endswith("AppError")
    assert [e.name for e in span.events] == ["exception"]


async def test_async_exceptions_pass_through(exporter: InMemorySpanExporter) -> None:
    error = AppError("async")

    @ragpulse.retrieval
    async def retrieve(query: str) -> list[str]:
        raise error

    with pytest.raises(AppError) as caught:
        await retrieve("q")
    assert caught.value is error
    assert only_span(exporter).status.status_code is StatusCode.ERROR


def test_generator_failing_midway(exporter: InMemorySpanExporter) -> None:
    error = AppError("midway")

    @ragpulse.pipeline
    def run(question: str) -> Iterator[str]:
        yield "before "
        raise error

    seen = []
    with pytest.raises(AppError) as caught:
        for chunk in run("q"):
            seen.append(chunk)
    assert caught.value is error
    assert seen == ["before "]
    span = only_span(exporter)
    assert span.status.status_code is StatusCode.ERROR
    assert attrs(span)[sc.OUTPUT_VALUE] == "before "


async def test_async_generator_failing_midway(exporter: InMemorySpanExporter) -> None:
    error = AppError("midway")

    @ragpulse.generation
    async def run(prompt: str) -> AsyncIterator[str]:
        yield "x"
        raise error

    with pytest.raises(AppError) as caught:
        async for _ in run("p"):
            pass
    assert caught.value is error
    assert only_span(exporter).status.status_code is StatusCode.ERROR


class BadStr:
    def __str__(self) -> str:
        raise RuntimeError("no str")

    __repr__ = __str__


class BadAttrs:
    @property
    def answer(self) -> str:
        raise RuntimeError("no answer")

    @property
    def choices(self) -> list[Any]:
        raise RuntimeError("no choices")


ODD_VALUES = [None, 42, 3.5, BadStr(), BadAttrs(), {"no": "answer"}, {"answer": 1}, [1, 2], b"\xff"]


@pytest.mark.parametrize("decorator", ["pipeline", "retrieval", "generation", "tool"])
@pytest.mark.parametrize("value", ODD_VALUES, ids=lambda v: type(v).__name__)
def test_odd_values_never_raise(exporter: InMemorySpanExporter, decorator: str, value: Any) -> None:
    deco: Callable[[Callable[..., Any]], Callable[..., Any]] = getattr(ragpulse, decorator)

    @deco
    def run(question: Any) -> Any:
        return value

    assert run(value) is value
    assert len(exporter.get_finished_spans()) == 1


def test_odd_documents_and_odd_exceptions_never_raise(exporter: InMemorySpanExporter) -> None:
    class BadError(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no str")

    error = BadError()

    @ragpulse.retrieval
    def retrieve(query: str) -> list[Any]:
        return [None, 5, BadStr(), BadAttrs(), {"metadata": {"a": 1}}, "ok"]

    @ragpulse.pipeline
    def fail(question: str) -> str:
        raise error

    assert retrieve("q")[-1] == "ok"
    with pytest.raises(BadError) as caught:
        fail("q")
    assert caught.value is error
    spans = by_name(exporter)
    assert attrs(spans["retrieval"])[sc.document_attr(5, sc.DOCUMENT_CONTENT)] == "ok"
    assert spans["fail"].status.status_code is StatusCode.ERROR


def test_recorders_used_directly_with_odd_input(exporter: InMemorySpanExporter) -> None:
    with ragpulse.retrieval_span(BadStr()) as r:
        r.set_documents(BadAttrs())  # type: ignore[arg-type]
        r.set_documents("a single text")
    with ragpulse.generation_span(prompt=BadStr()) as g:
        g.set_answer(BadAttrs(), input_tokens=-1, output_tokens=True)
    with ragpulse.tool_span(BadStr(), BadAttrs(), call_id=BadStr()) as t:  # type: ignore[arg-type]
        t.set_result([BadStr(), None])
        t.set_result(BadAttrs())
    assert len(exporter.get_finished_spans()) == 3


# --- Content capture, truncation, redaction -----------------------------------------------------


def run_full_pipeline() -> None:
    @ragpulse.retrieval
    def retrieve(query: str) -> list[dict[str, Any]]:
        return [{"id": "d1", "content": "secret doc", "score": 0.5, "metadata": {"u": "x"}}]

    @ragpulse.generation(model="m")
    def generate(prompt: str) -> str:
        return "secret answer"

    @ragpulse.tool(retrieval=True)
    def search_notes(query: str) -> list[dict[str, Any]]:
        return [{"id": "n1", "content": "secret note", "score": 0.7}]

    @ragpulse.pipeline
    def run(question: str) -> str:
        retrieve(question)
        search_notes(query=question)
        return generate(question)

    run("secret question")


def test_capture_off_keeps_ids_scores_and_counts(setup: Setup) -> None:
    exporter = setup(capture_content=False)
    run_full_pipeline()
    spans = by_name(exporter)
    for span in spans.values():
        a = attrs(span)
        assert a[sc.RAGPULSE_CONTENT_CAPTURED] is False
        assert not any("secret" in str(v) for v in a.values()), a
        assert sc.INPUT_VALUE not in a and sc.OUTPUT_VALUE not in a
    tool = attrs(spans["execute_tool search_notes"])
    assert sc.GEN_AI_TOOL_CALL_ARGUMENTS not in tool and sc.GEN_AI_TOOL_CALL_RESULT not in tool
    assert tool[sc.GEN_AI_TOOL_NAME] == "search_notes"
    r = attrs(spans["retrieval"])
    assert r[sc.document_attr(0, sc.DOCUMENT_ID)] == "d1"
    assert r[sc.document_attr(0, sc.DOCUMENT_SCORE)] == 0.5
    assert r[sc.RAGPULSE_DOCUMENT_COUNT] == 1
    assert sc.document_attr(0, sc.DOCUMENT_METADATA) not in r


def test_capture_off_from_env(setup: Setup, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGPULSE_CAPTURE_CONTENT", "false")
    exporter = setup()
    run_full_pipeline()
    assert all(
        attrs(s)[sc.RAGPULSE_CONTENT_CAPTURED] is False for s in exporter.get_finished_spans()
    )


def test_truncation(setup: Setup) -> None:
    exporter = setup(max_text_chars=6)
    run_full_pipeline()
    spans = by_name(exporter)
    assert attrs(spans["run"])[sc.INPUT_VALUE] == "secret"
    assert attrs(spans["run"])[sc.OUTPUT_VALUE] == "secret"
    assert attrs(spans["retrieval"])[sc.document_attr(0, sc.DOCUMENT_CONTENT)] == "secret"
    assert all(attrs(s)[sc.RAGPULSE_TRUNCATED] is True for s in spans.values())


def test_short_texts_are_not_marked_truncated(exporter: InMemorySpanExporter) -> None:
    run_full_pipeline()
    assert not any(sc.RAGPULSE_TRUNCATED in attrs(s) for s in exporter.get_finished_spans())


def test_redaction_rewrites_every_text(setup: Setup) -> None:
    exporter = setup(redact=lambda text: text.replace("secret", "[x]"))
    run_full_pipeline()
    spans = by_name(exporter)
    texts = [str(v) for s in spans.values() for v in attrs(s).values()]
    assert not any("secret" in t for t in texts)
    assert attrs(spans["run"])[sc.INPUT_VALUE] == "[x] question"
    assert attrs(spans["chat m"])[sc.INPUT_VALUE] == "[x] question"
    assert attrs(spans["chat m"])[sc.OUTPUT_VALUE] == "[x] answer"
    assert attrs(spans["retrieval"])[sc.document_attr(0, sc.DOCUMENT_CONTENT)] == "[x] doc"
    tool = attrs(spans["execute_tool search_notes"])
    assert json.loads(tool[sc.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"query": "[x] question"}
    assert json.loads(tool[sc.GEN_AI_TOOL_CALL_RESULT])[0]["content"] == "[x] note"


def test_raising_redactor_records_a_placeholder(setup: Setup) -> None:
    def redact(text: str) -> str:
        raise RuntimeError("redactor broke")

    exporter = setup(redact=redact)
    run_full_pipeline()
    spans = by_name(exporter)
    assert attrs(spans["run"])[sc.INPUT_VALUE] == instrument.REDACTION_FAILED
    assert attrs(spans["run"])[sc.OUTPUT_VALUE] == instrument.REDACTION_FAILED
    assert not any("secret" in str(v) for s in spans.values() for v in attrs(s).values())


# --- configure() / shutdown() ------------------------------------------------------------


def test_joins_a_provider_and_leaves_it_running() -> None:
    provider = TracerProvider()
    apps_exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(apps_exporter))
    ours = InMemorySpanExporter()
    ragpulse.configure(exporter=ours, tracer_provider=provider)

    @ragpulse.pipeline
    def run(question: str) -> str:
        return "a"

    run("q")
    assert len(ours.get_finished_spans()) == len(apps_exporter.get_finished_spans()) == 1
    ragpulse.shutdown()
    # Spans still reach the app's exporter through the joined provider, not ours.
    with provider.get_tracer("app").start_as_current_span("app span"):
        pass
    assert len(apps_exporter.get_finished_spans()) == 2
    assert len(ours.get_finished_spans()) == 1


@pytest.fixture
def fresh_globals(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset the global TracerProvider for one test (OTel has no public reset;
    this is what its own test utilities do)."""
    from opentelemetry.util._once import Once

    monkeypatch.setattr(trace, "_TRACER_PROVIDER", None)
    monkeypatch.setattr(trace, "_TRACER_PROVIDER_SET_ONCE", Once())


@pytest.mark.usefixtures("fresh_globals")
def test_joins_the_global_sdk_provider() -> None:
    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    ours = InMemorySpanExporter()
    ragpulse.configure(exporter=ours, service_name="ignored-when-joining")

    @ragpulse.pipeline
    def run(question: str) -> str:
        return "a"

    run("q")
    assert trace.get_tracer_provider() is provider
    assert len(ours.get_finished_spans()) == 1


@pytest.mark.usefixtures("fresh_globals")
def test_creates_and_sets_a_provider_when_none_is_set() -> None:
    ours = InMemorySpanExporter()
    resource = {"deployment.environment": "test"}
    ragpulse.configure("svc", exporter=ours, resource_attributes=resource)
    provider = trace.get_tracer_provider()
    assert isinstance(provider, TracerProvider)

    with trace.get_tracer("app").start_as_current_span("app"):
        pass
    [span] = ours.get_finished_spans()
    assert span.resource.attributes[sc.SERVICE_NAME] == "svc"
    assert span.resource.attributes["deployment.environment"] == "test"

    # Reconfiguring reuses our own global provider instead of joining it twice.
    again = InMemorySpanExporter()
    ragpulse.configure("svc", exporter=again, resource_attributes=resource)
    assert trace.get_tracer_provider() is provider
    with trace.get_tracer("app").start_as_current_span("app"):
        pass
    assert len(again.get_finished_spans()) == 1
    assert len(ours.get_finished_spans()) == 1


def test_reconfigure_detaches_the_previous_exporter(setup: Setup) -> None:
    provider = TracerProvider()
    first = setup(tracer_provider=provider)
    second = setup(tracer_provider=provider)

    @ragpulse.pipeline
    def run(question: str) -> str:
        return "a"

    run("q")
    assert len(first.get_finished_spans()) == 0
    assert len(second.get_finished_spans()) == 1


def test_decorators_work_without_configure() -> None:
    ragpulse.shutdown()

    @ragpulse.pipeline
    def run(question: str) -> Iterator[str]:
        yield "a"

    with ragpulse.generation_span(model="m") as g:
        g.set_answer("x")
    assert list(run("q")) == ["a"]


@pytest.fixture(params=["closed", "silent"])
def dead_port(request: pytest.FixtureRequest) -> Iterator[int]:
    """A port where nothing listens ("closed") or nothing ever answers ("silent")."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = int(sock.getsockname()[1])
        if request.param == "silent":
            sock.listen(16)  # the kernel accepts connections; nobody reads them
            yield port
            return
    yield port


def test_dead_endpoint_never_blocks_the_app(
    dead_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The app's calls never wait on the network: export runs on the batch processor's
    thread, never the app's, and shutdown returns (bounded by ``export_timeout_s``).
    How long the calls and the shutdown take is printed by bench/failure_latency.py."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exported_on: list[threading.Thread] = []
    export = OTLPSpanExporter.export

    def recording_export(self: OTLPSpanExporter, spans: Any) -> Any:
        exported_on.append(threading.current_thread())
        return export(self, spans)

    monkeypatch.setattr(OTLPSpanExporter, "export", recording_export)
    config = ragpulse.configure(
        "svc",
        f"http://127.0.0.1:{dead_port}",
        export_timeout_s=0.5,
        tracer_provider=TracerProvider(),
    )
    assert config.endpoint == f"http://127.0.0.1:{dead_port}/v1/traces"

    @ragpulse.pipeline
    def run(question: str) -> str:
        return "still fine"

    app = threading.current_thread()
    assert [run("q") for _ in range(20)] == ["still fine"] * 20
    assert app not in exported_on, "a span was exported on the app's thread"
    # shutdown flushes to the dead endpoint: it must give up and return, not raise.
    done = threading.Event()
    closer = threading.Thread(target=lambda: (ragpulse.shutdown(), done.set()), daemon=True)
    closer.start()
    assert done.wait(60), "ragpulse.shutdown() did not return within 60s (dead endpoint)"
    assert exported_on, "shutdown did not try to export the 20 pipeline spans"


def test_configuration_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    none: dict[str, Any] = {"exporter": "none", "tracer_provider": TracerProvider()}
    defaults = ragpulse.configure(**none)
    assert defaults.endpoint == "http://127.0.0.1:4318/v1/traces"
    assert defaults.capture_content is True
    assert defaults.max_text_chars == 16000
    assert defaults.export_timeout_s == 10.0
    assert defaults.service_name is None
    assert defaults.headers == {}

    monkeypatch.setenv("OTEL_SERVICE_NAME", "otel-svc")
    assert ragpulse.configure(**none).service_name == "otel-svc"
    monkeypatch.setenv("RAGPULSE_SERVICE_NAME", "rp-svc")
    monkeypatch.setenv("RAGPULSE_ENDPOINT", "https://rp.example:4318/")
    monkeypatch.setenv("RAGPULSE_CAPTURE_CONTENT", "False")
    monkeypatch.setenv("RAGPULSE_MAX_TEXT_CHARS", "100")
    monkeypatch.setenv("RAGPULSE_EXPORT_TIMEOUT", "2.5")
    monkeypatch.setenv("RAGPULSE_API_TOKEN", "tok")
    from_env = ragpulse.configure(**none)
    assert from_env.service_name == "rp-svc"
    assert from_env.endpoint == "https://rp.example:4318/v1/traces"
    assert from_env.capture_content is False
    assert from_env.max_text_chars == 100
    assert from_env.export_timeout_s == 2.5
    assert from_env.headers == {"Authorization": "Bearer tok"}
    assert "tok" not in repr(from_env)

    explicit = ragpulse.configure(
        "arg-svc",
        "http://collector:4318/v1/traces",
        headers={"authorization": "Basic abc"},
        capture_content=True,
        max_text_chars=5,
        export_timeout_s=1,
        **none,
    )
    assert explicit.service_name == "arg-svc"
    assert explicit.endpoint == "http://collector:4318/v1/traces"
    assert explicit.capture_content is True
    assert explicit.max_text_chars == 5
    assert explicit.export_timeout_s == 1.0
    assert explicit.headers == {"authorization": "Basic abc"}


@pytest.mark.parametrize(
    ("kwargs", "env", "message"),
    [
        ({"exporter": "zipkin"}, {}, "unknown exporter"),
        ({"endpoint": "127.0.0.1:4318"}, {}, "http"),
        ({"max_text_chars": 0}, {}, "max_text_chars"),
        ({}, {"RAGPULSE_CAPTURE_CONTENT": "maybe"}, "RAGPULSE_CAPTURE_CONTENT"),
        ({}, {"RAGPULSE_MAX_TEXT_CHARS": "lots"}, "RAGPULSE_MAX_TEXT_CHARS"),
        ({}, {"RAGPULSE_EXPORT_TIMEOUT": "-1"}, "RAGPULSE_EXPORT_TIMEOUT"),
    ],
)
def test_invalid_configuration_fails_fast(
    monkeypatch: pytest.MonkeyPatch, kwargs: dict[str, Any], env: dict[str, str], message: str
) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError, match=message):
        ragpulse.configure(tracer_provider=TracerProvider(), **kwargs)


def test_console_exporter_and_config_is_frozen() -> None:
    config = ragpulse.configure(exporter="console", tracer_provider=TracerProvider())
    assert config.exporter == "console"
    with pytest.raises(AttributeError):
        config.max_text_chars = 1  # type: ignore[misc]


async def test_sync_function_returning_a_coroutine(exporter: InMemorySpanExporter) -> None:
    async def work() -> str:
        with ragpulse.retrieval_span("inner"):
            pass
        return "later"

    @ragpulse.pipeline
    def run(question: str) -> Any:
        return work()

    pending = run("q")
    assert exporter.get_finished_spans() == ()
    assert await pending == "later"
    spans = by_name(exporter)
    assert attrs(spans["run"])[sc.OUTPUT_VALUE] == "later"
    assert spans["retrieval"].parent is not None
    assert spans["retrieval"].parent.span_id == spans["run"].context.span_id


def test_returned_stream_keeps_the_inner_streams_attributes(
    exporter: InMemorySpanExporter,
) -> None:
    class Stream:
        response = "raw http response"

        def __init__(self) -> None:
            self._chunks = iter(["a", "b"])

        def __iter__(self) -> Stream:
            return self

        def __next__(self) -> str:
            return next(self._chunks)

    @ragpulse.generation
    def run(prompt: str) -> Stream:
        return Stream()

    with run("p") as stream:  # type: ignore[attr-defined]
        assert stream.response == "raw http response"
        assert next(stream) == "a"
    a = attrs(only_span(exporter))
    assert a[sc.OUTPUT_VALUE] == "a"
    assert a[sc.RAGPULSE_STREAM_CLOSED_EARLY] is True


def test_question_from_a_request_object(exporter: InMemorySpanExporter) -> None:
    class Request(BaseModel):
        question: str
        user: str = "u"

    @ragpulse.pipeline
    def run(request: Request) -> str:
        return "a"

    run(Request(question="from a model"))
    assert attrs(only_span(exporter))[sc.INPUT_VALUE] == "from a model"


def test_invalid_env_without_configure_fails_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGPULSE_MAX_TEXT_CHARS", "many")
    ragpulse.shutdown()  # unconfigured: settings are read from the environment again
    config, _ = _provider._current()
    assert config.capture_content is False  # a broken setting never turns capture on


# --- GenAI conventions: span names, kinds, provider, response id ---------------------------


class RecordingSampler(Sampler):
    """Keeps the attributes each span had at creation time (what samplers get to see)."""

    def __init__(self) -> None:
        self.seen: dict[str, dict[str, Any]] = {}

    def should_sample(
        self,
        parent_context: Any,
        trace_id: int,
        name: str,
        kind: trace.SpanKind | None = None,
        attributes: Any = None,
        links: Any = None,
        trace_state: Any = None,
    ) -> SamplingResult:
        self.seen[name] = dict(attributes or {})
        return SamplingResult(Decision.RECORD_AND_SAMPLE, attributes)

    def get_description(self) -> str:
        return "RecordingSampler"


def test_genai_span_names_kinds_and_provider(setup: Setup) -> None:
    sampler = RecordingSampler()
    exporter = setup(tracer_provider=TracerProvider(sampler=sampler))

    @ragpulse.retrieval(data_source="kb")
    def search(query: str) -> list[str]:
        return ["doc"]

    @ragpulse.retrieval(in_process=True)
    def bm25(query: str) -> list[str]:
        return ["doc"]

    @ragpulse.retrieval(data_source="vs_1", provider="openai")
    def hosted(query: str) -> list[str]:
        return ["doc"]

    @ragpulse.generation(model="gpt-4o-mini")
    def openai_model(prompt: str) -> str:
        return "a"

    @ragpulse.generation(model="claude-sonnet-4")
    def anthropic_model(prompt: str) -> str:
        return "a"

    @ragpulse.generation(model="llama3", in_process=True)
    def local(prompt: str) -> str:
        return "a"

    @ragpulse.generation(model="gpt-4o", provider="azure.ai.openai", name="custom")
    def azure(prompt: str) -> str:
        return "a"

    @ragpulse.generation(system="ragpulse-demo")
    def legacy(prompt: str) -> str:
        return "a"

    for fn in (search, bm25, hosted, openai_model, anthropic_model, local, azure, legacy):
        fn("q")
    spans = by_name(exporter)
    client, internal = trace.SpanKind.CLIENT, trace.SpanKind.INTERNAL
    expected = {
        # name: (kind, gen_ai.operation.name, gen_ai.provider.name)
        "retrieval kb": (client, "retrieval", None),
        "retrieval": (internal, "retrieval", None),
        "retrieval vs_1": (client, "retrieval", "openai"),
        "chat gpt-4o-mini": (client, "chat", "openai"),
        "chat claude-sonnet-4": (client, "chat", "anthropic"),
        "chat llama3": (internal, "chat", "unknown"),
        "custom": (client, "chat", "azure.ai.openai"),
        "chat": (client, "chat", "ragpulse-demo"),
    }
    assert set(spans) == set(expected)
    for name, (kind, operation, provider) in expected.items():
        a = attrs(spans[name])
        assert spans[name].kind is kind, name
        assert a[sc.GEN_AI_OPERATION_NAME] == operation
        assert a.get(sc.GEN_AI_PROVIDER_NAME) == provider, name
        # OpenInference and ragpulse's role stay: Phoenix and the collector read them.
        role = sc.ROLE_RETRIEVAL if operation == "retrieval" else sc.ROLE_GENERATION
        assert a[sc.RAGPULSE_ROLE] == role
        assert a[sc.OPENINFERENCE_SPAN_KIND] in (sc.KIND_RETRIEVER, sc.KIND_LLM)
    assert attrs(spans["retrieval kb"])[sc.GEN_AI_DATA_SOURCE_ID] == "kb"
    # Operation, provider (when known at start), model and data source at creation time.
    assert sampler.seen["chat gpt-4o-mini"][sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert sampler.seen["chat gpt-4o-mini"][sc.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert sampler.seen["retrieval kb"][sc.GEN_AI_DATA_SOURCE_ID] == "kb"
    assert sampler.seen["retrieval"][sc.GEN_AI_OPERATION_NAME] == "retrieval"


def test_with_forms_follow_the_same_conventions(exporter: InMemorySpanExporter) -> None:
    with ragpulse.retrieval_span("q", data_source="kb", provider="openai"):
        pass
    with ragpulse.generation_span(model="m", in_process=True) as g:
        g.set_answer("a")
    spans = by_name(exporter)
    assert spans["retrieval kb"].kind is trace.SpanKind.CLIENT
    assert attrs(spans["retrieval kb"])[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert spans["chat m"].kind is trace.SpanKind.INTERNAL
    assert attrs(spans["chat m"])[sc.GEN_AI_PROVIDER_NAME] == "unknown"


def test_generation_through_the_real_openai_client(exporter: InMemorySpanExporter) -> None:
    """The real ``openai`` client against the tests' local OpenAI-compatible server: the
    completion's id becomes gen_ai.response.id, its client library the provider."""
    import openai
    from support.judge_server import JudgeServer

    with JudgeServer() as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="test", max_retries=0)

        @ragpulse.generation(model="local-model")
        def ask(prompt: str) -> Any:
            return client.chat.completions.create(
                model="local-model", messages=[{"role": "user", "content": prompt}]
            )

        completion = ask("hello")
        client.close()
    span = only_span(exporter)
    a = attrs(span)
    assert span.name == "chat local-model"
    assert a[sc.GEN_AI_RESPONSE_ID] == completion.id
    assert a[sc.GEN_AI_PROVIDER_NAME] == "openai"
    assert a[sc.GEN_AI_RESPONSE_MODEL] == "local-model"
    assert a[sc.OUTPUT_VALUE] == completion.choices[0].message.content


def test_stream_chunks_carry_the_response_id(exporter: InMemorySpanExporter) -> None:
    @dataclass
    class Chunk:
        id: str
        text: str

    @ragpulse.generation
    def run(prompt: str) -> Iterator[Chunk]:
        return iter([Chunk("resp-1", "a"), Chunk("resp-1", "b")])

    assert [c.text for c in run("p")] == ["a", "b"]
    a = attrs(only_span(exporter))
    assert a[sc.GEN_AI_RESPONSE_ID] == "resp-1"
    assert a[sc.GEN_AI_PROVIDER_NAME] == "unknown"  # a test class: no known client library
