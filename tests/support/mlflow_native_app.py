"""A RAG app traced with MLflow's own tracing (``@mlflow.trace``), no OpenTelemetry of ours.

Run by the MLflow venv's python (``.backends/mlflow/bin/python``): ``python
mlflow_native_app.py TRACKING_URI EXPERIMENT_ID COUNT`` answers COUNT questions through a
CHAIN span holding a RETRIEVER span (it returns ``mlflow.entities.Document``s) and a
CHAT_MODEL span (OpenAI-shaped messages in, a chat completion out), as an app using
MLflow's decorators writes them, and prints one JSON line per trace: its id and the span
ids of the chain, retriever and chat model.
"""

from __future__ import annotations

import json
import sys

import mlflow
from mlflow.entities import Document, SpanType

DOCUMENTS = [
    ("kb-1", "The Pro plan costs 6 dollars per month and includes 100 GB of storage."),
    ("kb-2", "Offline mode keeps the 500 most recent notes available without a connection."),
    ("kb-3", "Support answers by e-mail within one business day."),
]
QUESTIONS = [
    "How much storage does the Pro plan include?",
    "How many notes are kept available in offline mode?",
    "How fast does support answer?",
]


@mlflow.trace(span_type=SpanType.RETRIEVER)
def retrieve(query: str) -> list[Document]:
    words = set(query.lower().split())
    ranked = sorted(DOCUMENTS, key=lambda d: -len(words & set(d[1].lower().split())))
    return [
        Document(page_content=text, metadata={"doc_uri": f"kb://{doc_id}"}, id=doc_id)
        for doc_id, text in ranked[:2]
    ]


@mlflow.trace(span_type=SpanType.CHAT_MODEL)
def chat(messages: list[dict[str, str]], model: str = "extractive-demo") -> dict[str, object]:
    context = messages[0]["content"]
    answer = context.split("\n")[0]  # quotes the best document
    return {
        "model": model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": answer}}],
        "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
    }


@mlflow.trace(span_type=SpanType.CHAIN)
def answer(question: str) -> str:
    documents = retrieve(question)
    context = "\n".join(d.page_content for d in documents)
    reply = chat([{"role": "system", "content": context}, {"role": "user", "content": question}])
    choices = reply["choices"]
    assert isinstance(choices, list)
    return str(choices[0]["message"]["content"])


def main() -> None:
    uri, experiment, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment_id=experiment)
    for i in range(count):
        answer(QUESTIONS[i % len(QUESTIONS)])
        mlflow.flush_trace_async_logging()  # in the server before its id is printed
        trace = mlflow.get_trace(mlflow.get_last_active_trace_id())
        spans = {s.span_type: s.span_id for s in trace.data.spans}
        print(json.dumps({
            "trace_id": trace.info.trace_id.removeprefix("tr-"),
            "root": spans[SpanType.CHAIN],
            "retrieval": spans[SpanType.RETRIEVER],
            "chat": spans[SpanType.CHAT_MODEL],
        }), flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
