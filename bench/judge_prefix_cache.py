"""Server-side prompt caching of judge prompts: cached prompt tokens per record.

A real llama.cpp server (tests/support/llm_server.py: xllamacpp + SmolLM2-135M, prompt
cache on) judges records that share documents: ``--sets`` sets of 5 documents,
``--per-set`` records over each set (different questions and answers), in
order, records over the same set one after another (as a retriever's hits
cluster). Per record, the requests of ``context_relevance/llm_judge`` and of
whole-answer ``faithfulness/llm_judge``, rendered by the real prompts and sent
with the openai client (no ragpulse cache in the way: every request is sent),
``max_tokens=1`` so that only prompt evaluation, what a prefix cache saves, is
paid. Two passes: cold (a fresh server) and warm (the same records again).
llama.cpp keeps each slot's last prompt (``parallel=1``: one slot).

Two layouts: ``current`` (documents' block first, fenced by its content hash:
byte-identical across records over the same documents) and ``legacy`` (the
layout before issue 15: one block, per-record question first, a random nonce
fence), which this script re-creates only for the measurement.

    .venv/bin/python bench/judge_prefix_cache.py [--sets 3 --per-set 3]
"""

from __future__ import annotations

import argparse
import secrets
import sys
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import openai
from support.llm_server import LlamaServer

from ragpulse.evaluators.context_relevance.llm_judge import CONTEXT, RelevanceInput
from ragpulse.evaluators.faithfulness.llm_judge import WHOLE, Doc, WholeInput
from ragpulse.evaluators.judge import prompts
from ragpulse.record import Document, RagRecord

FEATURES = ["plan", "storage", "sync", "export", "sharing", "trash", "search", "tags"]


def records(sets: int, per_set: int) -> list[RagRecord]:
    out = []
    for s in range(sets):
        topic = FEATURES[s % len(FEATURES)]
        docs = [
            Document(
                content=f"Document {s}.{d} about {topic}. The {topic} feature keeps "
                f"{10 * (d + 1) + s} items per user and syncs them every {d + 2} minutes. "
                f"Administrators can change the {topic} limits in the settings page; changes "
                f"apply to new items only and are logged for {30 + d} days."
            )
            for d in range(5)
        ]
        for r in range(per_set):
            out.append(
                RagRecord(
                    trace_id=f"{s:016x}{r:016x}",
                    question=f"How many items does {topic} keep, case {r}?",
                    documents=docs,
                    answer=f"The {topic} feature keeps {10 * (r + 1) + s} items per user.",
                )
            )
    return out


def legacy_render(self: prompts.Prompt[Any, Any], inputs: Any) -> str:
    """The layout before issue 15: one block, fields in declaration order, random nonce."""
    nonce = secrets.token_hex(8)
    return f"<<<DATA {nonce}>>>\n{prompts.encode_data(inputs)}\n<<<END {nonce}>>>"


def requests_of(batch: list[RagRecord]) -> list[tuple[str, list[dict[str, str]]]]:
    """The judge's requests for ``batch``, rendered exactly as JudgeClient renders them."""
    relevance, whole = [], []
    for record in batch:  # each evaluator judges the whole batch, one after the other
        docs = [Doc(index=i, text=d.content) for i, d in enumerate(record.documents)]
        inputs = RelevanceInput(question=record.question, documents=docs)
        relevance.append((CONTEXT.name, CONTEXT.messages(inputs)))
        both = WholeInput(question=record.question, documents=docs, answer=record.answer)
        whole.append((WHOLE.name, WHOLE.messages(both)))
    return relevance + whole


def run(client: openai.OpenAI, model: str, batch: list[RagRecord]) -> dict[str, list[int]]:
    """(prompt tokens, cached prompt tokens) summed per prompt, one request at a time.

    ``max_tokens=1``: only the prompt is evaluated (what the prefix cache saves); the
    reply is not used. Requests go as the evaluators send them: one prompt over the batch, then the next.
    """
    out: dict[str, list[int]] = {}
    for name, messages in requests_of(batch):
        response = client.chat.completions.create(
            model=model,
            messages=cast(Any, messages),  # plain dicts, as JudgeClient sends them
            max_tokens=1,
            temperature=0,
        )
        assert response.usage is not None
        details = response.usage.prompt_tokens_details
        cached = details.cached_tokens if details and details.cached_tokens else 0
        if not cached:  # older servers: llama.cpp's own timings
            timings = (response.model_extra or {}).get("timings") or {}
            cached = int(timings.get("cache_n") or 0)
        totals = out.setdefault(name, [0, 0])
        totals[0] += response.usage.prompt_tokens
        totals[1] += cached
    return out


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sets", type=int, default=3)
    parser.add_argument("--per-set", type=int, default=3)
    parser.add_argument("--layouts", default="legacy,current")
    args = parser.parse_args()
    batch = records(args.sets, args.per_set)
    current = prompts.Prompt.render
    print(f"{len(batch)} records: {args.sets} sets of 5 shared documents, in order")
    print("requests: context_relevance over the batch, then faithfulness (whole) over it")
    print(f"{'layout':8} {'pass':5} {'prompt':30} {'prompt tok/rec':>15} {'cached tok/rec':>15}")
    for layout in args.layouts.split(","):
        prompts.Prompt.render = legacy_render if layout == "legacy" else current  # type: ignore[method-assign]
        with (
            LlamaServer(parallel=1) as server,  # a fresh server: a cold prefix cache
            openai.OpenAI(base_url=server.base_url, api_key="x", timeout=900) as client,
        ):
            for label in ("cold", "warm"):
                for name, (tokens, cached) in run(client, server.model, batch).items():
                    n = len(batch)
                    print(
                        f"{layout:8} {label:5} {name:30} {tokens / n:15.0f} "
                        f"{cached / n:9.0f} ({cached / max(tokens, 1):4.0%})",
                        flush=True,
                    )
    prompts.Prompt.render = current  # type: ignore[method-assign]


if __name__ == "__main__":
    main()
