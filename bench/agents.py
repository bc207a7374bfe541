"""Agent turns against RAG records of the same size: what the agent path costs per byte.

`ragpulse serve` with its defaults, pinned to one core (``taskset -c 0``), fed OTLP/HTTP
protobuf bodies of ``--per-request`` traces, timed from the first POST until every
record's faithfulness is counted in /metrics, as bench/cheap_tier_ratio.py times the RAG
path. Two workloads, alternated ``--rounds`` times each:

- agent turns in the GenAI conventions (as Pydantic AI writes them): an ``invoke_agent``
  span, 6 ``chat`` spans and 5 ``execute_tool`` spans; each tool returns 4 passages (20
  documents a turn); every chat span's ``gen_ai.input.messages`` repeats a 20-message
  history plus the turn so far (the calls, the results), as a model call does;
- RAG traces of a chat app of the same size in content: 20 documents retrieved (a
  RETRIEVER span) and one model call whose ``llm.input_messages`` hold the documents, the
  same 20-message history and the question (CHAIN, RETRIEVER, LLM).

An agent turn is larger than such a trace (each of its model calls repeats the history),
so the two are compared per byte received: printed are turns/s, MB/s, CPU-seconds per MB
and peak RSS of each, and the agent path's cost per byte against the RAG path's (the
bound: at most 2x). ``--pad`` fills the RAG traces' system prompt up to the agent turns'
size instead, for a comparison at equal size.

    .venv/bin/python bench/agents.py [--traces 2000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import secrets
import statistics
import time

from cheap_tier_ratio import SERVE_ENV, serve_once
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2

WORDS = (
    "harbour ferry quay ticket schedule pier lighthouse museum tour weekday morning evening "
    "storm season passenger vehicle cabin deck captain crossing island mainland port"
).split()


def _kv(key: str, value: str | int) -> common_pb2.KeyValue:
    any_value = (
        common_pb2.AnyValue(int_value=value)
        if isinstance(value, int)
        else common_pb2.AnyValue(string_value=value)
    )
    return common_pb2.KeyValue(key=key, value=any_value)


def _passage(seed: int, words: int = 60) -> str:
    return " ".join(WORDS[(seed * 7 + i * 3) % len(WORDS)] for i in range(words)) + "."


def _text(content: str) -> dict[str, str]:
    return {"type": "text", "content": content}


def agent_spans(n: int) -> list[tuple[bytes, bytes, str, list[tuple[str, str | int]]]]:
    """One agent turn: invoke_agent, 6 chat spans, 5 tools of 4 passages each."""
    root = secrets.token_bytes(8)
    history = [
        {"role": "user" if i % 2 == 0 else "assistant", "parts": [_text(_passage(n + i, 30))]}
        for i in range(20)
    ]
    question = {"role": "user", "parts": [_text(f"When does ferry {n} leave the quay?")]}
    turn: list[dict[str, object]] = [question]
    spans: list[tuple[bytes, bytes, str, list[tuple[str, str | int]]]] = [
        (root, b"", "invoke_agent support", [("gen_ai.operation.name", "invoke_agent")])
    ]
    for step in range(6):
        call_id = f"call_{n}_{step}"
        if step < 5:
            output = [{"role": "assistant", "parts": [{"type": "tool_call", "id": call_id,
                       "name": "search_docs", "arguments": {"query": f"ferry {n} {step}"}}]}]  # fmt: skip
        else:
            output = [{"role": "assistant", "parts": [_text(_passage(n, 25))]}]
        spans.append(
            (secrets.token_bytes(8), root, "chat bench-model", [
                ("gen_ai.operation.name", "chat"), ("gen_ai.request.model", "bench-model"),
                ("gen_ai.usage.input_tokens", 900), ("gen_ai.usage.output_tokens", 20),
                ("gen_ai.input.messages", json.dumps([*history, *turn])),
                ("gen_ai.output.messages", json.dumps(output))])
        )  # fmt: skip
        if step < 5:
            passages = [
                {"id": f"d{step}-{j}", "content": _passage(n + step * 4 + j)} for j in range(4)
            ]
            spans.append(
                (secrets.token_bytes(8), root, "execute_tool search_docs", [
                    ("gen_ai.operation.name", "execute_tool"), ("gen_ai.tool.name", "search_docs"),
                    ("gen_ai.tool.call.id", call_id),
                    ("gen_ai.tool.call.arguments", json.dumps({"query": f"ferry {n} {step}"})),
                    ("gen_ai.tool.call.result", json.dumps(passages))])
            )  # fmt: skip
            turn += [
                *output,
                {"role": "user", "parts": [{"type": "tool_call_response", "id": call_id,
                                            "response": passages}]},
            ]  # fmt: skip
    return spans


def rag_spans(n: int, pad: int) -> list[tuple[bytes, bytes, str, list[tuple[str, str | int]]]]:
    """A RAG trace of a chat app: 20 documents retrieved, and a model call whose input is
    what a chat RAG app sends (the documents in the system prompt, the same 20-message
    history, the question), padded to weigh what an agent turn does."""
    root = secrets.token_bytes(8)
    question = f"When does ferry {n} leave the quay?"
    passages = [_passage(n + j) for j in range(20)]
    retriever: list[tuple[str, str | int]] = [
        ("openinference.span.kind", "RETRIEVER"),
        ("input.value", question),
    ]
    for j, passage in enumerate(passages):
        retriever += [(f"retrieval.documents.{j}.document.id", f"d{j}"),
                      (f"retrieval.documents.{j}.document.content", passage)]  # fmt: skip
    answer = _passage(n, 25)
    prompt = [("system", "Answer from the documents:\n" + "\n".join(passages) + " " + "x " * pad)]
    prompt += [("user" if i % 2 == 0 else "assistant", _passage(n + i, 30)) for i in range(20)]
    prompt += [("user", question)]
    generation: list[tuple[str, str | int]] = [
        ("openinference.span.kind", "LLM"),
        ("llm.model_name", "bench-model"),
    ]
    for i, (role, content) in enumerate(prompt):
        generation += [(f"llm.input_messages.{i}.message.role", role),
                       (f"llm.input_messages.{i}.message.content", content)]  # fmt: skip
    generation += [("llm.output_messages.0.message.role", "assistant"),
                   ("llm.output_messages.0.message.content", answer)]  # fmt: skip
    return [
        (root, b"", "pipeline", [("openinference.span.kind", "CHAIN"), ("input.value", question),
                                 ("output.value", answer)]),
        (secrets.token_bytes(8), root, "retrieve", retriever),
        (secrets.token_bytes(8), root, "generate", generation),
    ]  # fmt: skip


def bodies(traces: int, per_request: int, make: object) -> list[bytes]:
    out = []
    now = time.time_ns()
    for at in range(0, traces, per_request):
        request = trace_service_pb2.ExportTraceServiceRequest()
        rs = request.resource_spans.add()
        rs.resource.attributes.append(_kv("service.name", "bench"))
        scope = rs.scope_spans.add()
        for n in range(at, min(traces, at + per_request)):
            trace_id = secrets.token_bytes(16)
            for i, (span_id, parent, name, attributes) in enumerate(make(n)):  # type: ignore[operator]
                span = scope.spans.add()
                span.trace_id, span.span_id, span.parent_span_id = trace_id, span_id, parent
                span.name = name
                span.start_time_unix_nano, span.end_time_unix_nano = now + i * 10, now + i * 10 + 5
                span.attributes.extend(_kv(k, v) for k, v in attributes)
        out.append(request.SerializeToString())
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--per-request", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument(
        "--pad", action="store_true", help="pad the RAG traces to the agent turns' size"
    )
    args = parser.parse_args()
    agent = bodies(args.traces, args.per_request, agent_spans)
    agent_bytes = sum(map(len, agent))
    per_trace = agent_bytes // args.traces
    probe = len(bodies(1, 1, lambda n: rag_spans(n, 0))[0])
    pad = max(0, (per_trace - probe) // 2) if args.pad else 0
    rag = bodies(args.traces, args.per_request, lambda n: rag_spans(n, pad))
    rag_bytes = sum(map(len, rag))
    print(f"{args.traces} traces a run, {args.per_request} per request; serve env {SERVE_ENV}")
    print(f"agent bodies {agent_bytes / 1e6:.1f} MB ({per_trace / 1e3:.0f} kB a turn), "
          f"RAG bodies {rag_bytes / 1e6:.1f} MB ({rag_bytes / args.traces / 1e3:.0f} kB a trace)")  # fmt: skip
    figures: dict[str, list[dict[str, float]]] = {"agent": [], "rag": []}
    for _ in range(args.rounds):
        for name, work, size in (("rag", rag, rag_bytes), ("agent", agent, agent_bytes)):
            run = serve_once(work, args.traces, args.clients)
            run["MB/s"] = size / 1e6 * run["traces/s"] / args.traces
            run["CPU-s/MB"] = args.traces / run["traces/CPU-s"] / (size / 1e6)
            figures[name].append(run)
    print(f"\n{'workload':10} {'traces/s':>10} {'MB/s':>8} {'CPU-s/MB':>9} {'peak RSS MiB':>13}")
    medians = {}
    for name, runs in figures.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        medians[name] = med
        print(f"{name:10} {med['traces/s']:10.1f} {med['MB/s']:8.2f} {med['CPU-s/MB']:9.3f} "
              f"{med['peak RSS MiB']:13.0f}")  # fmt: skip
    ratio = medians["agent"]["CPU-s/MB"] / medians["rag"]["CPU-s/MB"]
    print(f"\nagent path cost per byte received: {ratio:.2f}x the RAG path's (bound: 2x)")


if __name__ == "__main__":
    main()
