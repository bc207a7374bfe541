"""Run one small RAG app under a real third-party instrumentation and export its trace.

    python tests/support/instrumentations/capture.py NAME --out FILE        # ragpulse Span JSON
    python tests/support/instrumentations/capture.py NAME --otlp-http URL   # OTLP/HTTP exporter
    python tests/support/instrumentations/capture.py NAME --otlp-grpc HOST:PORT

NAME is one of INSTRUMENTATIONS. Each run is its own process: instrumentors patch
libraries globally (OpenInference and OpenLLMetry both hook LangChain's callbacks),
so two of them in one process would write mixed spans. No network beyond 127.0.0.1:
the LLMs are fakes (LangChain's fake chat model, a LlamaIndex CustomLLM) or a local
OpenAI-compatible double, and the retrievers return fixed documents with ids.

Regenerate the committed fixtures with ``python tests/support/instrumentations/capture.py all``.
OpenLIT is not a dev dependency (openlit pins ``openai<3``; ragpulse runs with openai 3),
so its fixture is regenerated with the wheel unpacked aside:
``pip download --no-deps openlit -d /tmp/ol && unzip /tmp/ol/openlit-*.whl -d /tmp/ol/pkg``
then ``PYTHONPATH=/tmp/ol/pkg python tests/support/instrumentations/capture.py openlit_langchain
--out tests/support/instrumentations/fixtures/openlit_langchain.json``; ``all`` skips it when
openlit cannot be imported.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    BatchLogRecordProcessor,
    InMemoryLogRecordExporter,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

HERE = Path(__file__).resolve().parent
FIXTURES = HERE / "fixtures"

DOCS = {
    "kb-1": "The Nimbus Pro plan costs 6 dollars per month and includes 100 GB of storage.",
    "kb-2": "Offline mode keeps the 500 most recently opened notes on the device.",
    "kb-3": "Nimbus exports notes as Markdown or PDF from the share menu.",
}
#: question -> (ids of the documents the retriever returns, the fake LLM's answer)
QA: dict[str, tuple[list[str], str]] = {
    "How much does the Nimbus Pro plan cost per month?": (
        ["kb-1", "kb-3"],
        "The Nimbus Pro plan costs 6 dollars per month and includes 100 GB of storage.",
    ),
    "How many notes does offline mode keep on the device?": (
        ["kb-2", "kb-1"],
        "Offline mode keeps the 500 most recently opened notes on the device.",
    ),
}
SCORES = (0.92, 0.41)
MODEL = "fake-rag-model"


def answer_for(prompt: str) -> str:
    """The fake LLM's answer: the one whose question appears in the prompt."""
    for question, (_, answer) in QA.items():
        if question in prompt:
            return answer
    return "I do not know."


# --- apps ----------------------------------------------------------------------------


def _langchain_chain() -> Any:
    from langchain_core.callbacks import CallbackManagerForRetrieverRun
    from langchain_core.documents import Document
    from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
    from langchain_core.messages import AIMessage
    from langchain_core.output_parsers import StrOutputParser
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_core.retrievers import BaseRetriever
    from langchain_core.runnables import RunnablePassthrough

    class KbRetriever(BaseRetriever):
        def _get_relevant_documents(
            self, query: str, *, run_manager: CallbackManagerForRetrieverRun
        ) -> list[Document]:
            ids = QA[query][0]
            return [Document(id=i, page_content=DOCS[i], metadata={"source": i}) for i in ids]

    # A fake chat model that reports usage and its model name, as a provider's would.
    answers = [
        AIMessage(
            content=answer,
            usage_metadata={"input_tokens": 50, "output_tokens": len(answer.split()),
                            "total_tokens": 50 + len(answer.split())},
            response_metadata={"model_name": MODEL},
        )
        for _, answer in QA.values()
    ]  # fmt: skip

    class FakeChatModel(GenericFakeChatModel):
        model_name: str = MODEL  # LangChain reports it as ls_model_name, as for real models

    llm = FakeChatModel(messages=iter(answers))
    prompt = ChatPromptTemplate.from_messages(
        [
            ("system", "Answer from the context only.\nContext:\n{context}"),
            ("human", "{question}"),
        ]
    )

    def join(docs: list[Any]) -> str:
        return "\n".join(d.page_content for d in docs)

    retrieval = {"context": KbRetriever() | join, "question": RunnablePassthrough()}
    return retrieval | prompt | llm | StrOutputParser()


def run_langchain(tracer_provider: TracerProvider | None = None) -> None:
    """``tracer_provider``: wrap each question in an app span (``POST /ask``), as a web app
    would; for instrumentations that write no span for LCEL's own runnables (OpenLIT)."""
    chain = _langchain_chain()
    for question in QA:
        if tracer_provider is None:
            chain.invoke(question)
            continue
        tracer = tracer_provider.get_tracer("rag-app")
        with tracer.start_as_current_span("POST /ask", attributes={"http.route": "/ask"}):
            chain.invoke(question)


def run_llama_index() -> None:
    from llama_index.core import Settings
    from llama_index.core.base.llms.types import CompletionResponse, LLMMetadata
    from llama_index.core.llms import CustomLLM
    from llama_index.core.query_engine import RetrieverQueryEngine
    from llama_index.core.retrievers import BaseRetriever
    from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

    # Offline: a whitespace tokenizer, so tiktoken never downloads its encoding.
    Settings.tokenizer = str.split

    class FakeLLM(CustomLLM):
        @property
        def metadata(self) -> LLMMetadata:
            return LLMMetadata(model_name=MODEL)

        def complete(self, prompt: str, formatted: bool = False, **kw: Any) -> CompletionResponse:
            return CompletionResponse(text=answer_for(prompt))

        def stream_complete(self, prompt: str, formatted: bool = False, **kw: Any) -> Any:
            yield self.complete(prompt)

    class KbRetriever(BaseRetriever):
        def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
            ids = QA[query_bundle.query_str][0]
            return [
                NodeWithScore(node=TextNode(id_=i, text=DOCS[i]), score=s)
                for i, s in zip(ids, SCORES, strict=True)
            ]

    engine = RetrieverQueryEngine.from_args(KbRetriever(), llm=FakeLLM())
    for question in QA:
        engine.query(question)


def _answer_reply(body: dict[str, Any]) -> dict[str, Any]:
    prompt = "\n".join(str(m.get("content")) for m in body["messages"])
    return {"id": f"chatcmpl-{abs(hash(prompt)) % 10**8}",
            "message": {"role": "assistant", "content": answer_for(prompt)}}  # fmt: skip


def run_genai_openai(tracer_provider: TracerProvider) -> None:
    """GenAI spec: a retrieval span written by hand (no instrumentation writes one for a
    hand-rolled retriever), the chat span and its content events by
    ``opentelemetry-instrumentation-openai-v2`` against a local OpenAI double."""
    import openai

    tracer = tracer_provider.get_tracer("rag-app")
    from support.openai_double import OpenAIChatDouble

    double = OpenAIChatDouble(_answer_reply)
    client = openai.OpenAI(base_url=double.base_url, api_key="test", max_retries=0)
    try:
        for question, (ids, _) in QA.items():
            with tracer.start_as_current_span("POST /ask", attributes={"http.route": "/ask"}):
                docs = [
                    {"id": i, "score": s, "content": DOCS[i]}
                    for i, s in zip(ids, SCORES, strict=True)
                ]
                with tracer.start_as_current_span("retrieval kb") as span:
                    span.set_attribute("gen_ai.operation.name", "retrieval")
                    span.set_attribute("gen_ai.data_source.id", "kb")
                    span.set_attribute("gen_ai.retrieval.query.text", question)
                    span.set_attribute("gen_ai.retrieval.documents", json.dumps(docs))
                context = "\n".join(d["content"] for d in docs)  # type: ignore[misc]
                client.chat.completions.create(
                    model=MODEL,
                    messages=[
                        {"role": "system", "content": f"Answer from the context:\n{context}"},
                        {"role": "user", "content": question},
                    ],
                )
    finally:
        double.server.shutdown()


# --- instrumentation set-up ------------------------------------------------------------


def _openinference_langchain(tp: TracerProvider, lp: LoggerProvider) -> Callable[[], None]:
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument(tracer_provider=tp)
    return run_langchain


def _openllmetry_langchain(tp: TracerProvider, lp: LoggerProvider) -> Callable[[], None]:
    os.environ.setdefault("TRACELOOP_TRACE_CONTENT", "true")
    from opentelemetry.instrumentation.langchain import LangchainInstrumentor

    LangchainInstrumentor().instrument(tracer_provider=tp)
    return run_langchain


def _openinference_llama_index(tp: TracerProvider, lp: LoggerProvider) -> Callable[[], None]:
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument(tracer_provider=tp)
    return run_llama_index


def _openlit_langchain(tp: TracerProvider, lp: LoggerProvider) -> Callable[[], None]:
    # openlit pins openai<3 (ragpulse's venv has openai 3), so it is not a dev dependency:
    # regenerate this fixture with openlit unpacked on PYTHONPATH (see the module docstring).
    from openlit._config import OpenlitConfig
    from openlit.instrumentation.langchain import LangChainInstrumentor
    from opentelemetry import _logs, trace

    OpenlitConfig()  # its defaults, as openlit.init() would set them; metrics are off
    trace.set_tracer_provider(tp)  # openlit's handler uses the global providers
    _logs.set_logger_provider(lp)
    LangChainInstrumentor().instrument(capture_message_content=True, disable_metrics=True)
    return lambda: run_langchain(tp)


def _genai_openai(latest: bool) -> Callable[[TracerProvider, LoggerProvider], Callable[[], None]]:
    def setup(tp: TracerProvider, lp: LoggerProvider) -> Callable[[], None]:
        if latest:  # the newer conventions: content on gen_ai.client.inference.operation.details
            os.environ["OTEL_SEMCONV_STABILITY_OPT_IN"] = "gen_ai_latest_experimental"
            os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "EVENT_ONLY"
        else:  # the default: gen_ai.user.message / gen_ai.choice log events
            os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
        from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

        OpenAIInstrumentor().instrument(tracer_provider=tp, logger_provider=lp)
        return lambda: run_genai_openai(tp)

    return setup


INSTRUMENTATIONS: dict[str, Callable[[TracerProvider, LoggerProvider], Callable[[], None]]] = {
    "openinference_llama_index": _openinference_llama_index,
    "openinference_langchain": _openinference_langchain,
    "openllmetry_langchain": _openllmetry_langchain,
    "openlit_langchain": _openlit_langchain,
    "genai_openai_events": _genai_openai(latest=False),
    "genai_openai_latest": _genai_openai(latest=True),
}


# --- output --------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    if isinstance(value, dict) or hasattr(value, "items"):
        return {str(k): _plain(v) for k, v in dict(value).items()}
    return value


def to_ragpulse_spans(spans: Sequence[ReadableSpan], logs: Sequence[Any]) -> list[dict[str, Any]]:
    """SDK spans and log records as ragpulse ``Span`` JSON, log records joined to their
    span as events (``source="log"``), as the collector joins them."""
    from ragpulse.record import Span, SpanEvent, SpanStatus

    events: dict[int, list[SpanEvent]] = {}
    for log in logs:
        record = log.log_record
        event = SpanEvent(
            name=record.event_name or "",
            time_ns=record.timestamp or record.observed_timestamp or 0,
            attributes=_plain(record.attributes or {}),
            body=_plain(record.body),
            source="log",
        )
        events.setdefault(record.span_id or 0, []).append(event)
    out = []
    for s in spans:
        ctx = s.context
        assert ctx is not None
        span_events = [
            SpanEvent(name=e.name, time_ns=e.timestamp, attributes=_plain(e.attributes or {}))
            for e in s.events
        ]
        status = {"OK": SpanStatus.OK, "ERROR": SpanStatus.ERROR}.get(
            s.status.status_code.name, SpanStatus.UNSET
        )
        span = Span(
            trace_id=f"{ctx.trace_id:032x}",
            span_id=f"{ctx.span_id:016x}",
            parent_span_id=f"{s.parent.span_id:016x}" if s.parent else None,
            name=s.name,
            kind=s.kind.name.lower(),
            start_time_ns=s.start_time or 0,
            end_time_ns=s.end_time or 0,
            status=status,
            status_message=s.status.description,
            attributes=_plain(s.attributes or {}),
            resource=_plain(s.resource.attributes),
            scope=s.instrumentation_scope.name if s.instrumentation_scope else None,
            events=span_events + events.get(ctx.span_id, []),
        )
        out.append(span.model_dump(mode="json"))
    return out


def capture(
    name: str, out: Path | None, http: str | None, grpc: str | None, service: str | None = None
) -> None:
    resource = Resource.create({"service.name": service or name})
    tp = TracerProvider(resource=resource)
    lp = LoggerProvider(resource=resource)
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    if out is not None:
        tp.add_span_processor(SimpleSpanProcessor(spans))
        lp.add_log_record_processor(SimpleLogRecordProcessor(logs))
    if http is not None:
        from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        tp.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(f"{http}/v1/traces")))
        lp.add_log_record_processor(BatchLogRecordProcessor(OTLPLogExporter(f"{http}/v1/logs")))
    if grpc is not None:
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import (
            OTLPLogExporter as GrpcLogExporter,
        )
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
            OTLPSpanExporter as GrpcSpanExporter,
        )

        tp.add_span_processor(BatchSpanProcessor(GrpcSpanExporter(grpc, insecure=True)))
        lp.add_log_record_processor(BatchLogRecordProcessor(GrpcLogExporter(grpc, insecure=True)))
    run = INSTRUMENTATIONS[name](tp, lp)
    run()
    # Logs first: an OTLP collector joins log records to spans it is still assembling.
    lp.shutdown()
    tp.shutdown()
    if out is not None:
        doc = to_ragpulse_spans(spans.get_finished_spans(), logs.get_finished_logs())
        out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name", choices=[*INSTRUMENTATIONS, "all"])
    parser.add_argument("--out", type=Path)
    parser.add_argument("--otlp-http", help="base URL, e.g. http://127.0.0.1:4318")
    parser.add_argument("--otlp-grpc", help="host:port, e.g. 127.0.0.1:4317")
    parser.add_argument("--service", help="service.name (default: NAME)")
    args = parser.parse_args(argv)
    if args.name == "all":  # one subprocess each: instrumentors patch globally
        import subprocess

        FIXTURES.mkdir(exist_ok=True)
        import importlib.util

        for name in INSTRUMENTATIONS:
            if name.startswith("openlit") and importlib.util.find_spec("openlit") is None:
                print(f"{name}: openlit not importable, fixture kept", file=sys.stderr)
                continue
            out = FIXTURES / f"{name}.json"
            subprocess.run([sys.executable, __file__, name, "--out", str(out)], check=True)
        return 0
    if not (args.out or args.otlp_http or args.otlp_grpc):
        parser.error("one of --out, --otlp-http, --otlp-grpc is required")
    capture(args.name, args.out, args.otlp_http, args.otlp_grpc, args.service)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the support package
    sys.exit(main())
