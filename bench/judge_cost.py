"""Judge cost: calls and prompt tokens per record for by-statement faithfulness.

Records have 5 documents each, drawn from a shared pool as production
re-retrieves the same documents, and 3-sentence answers of which some repeat
across records and some reuse sentences (claims) of others. Passes:

- cold: an empty cache;
- warm: the same records again (repeated answers and claims never re-judged);
- new answers over the same documents: only unseen claims cost calls.

Runs against the tests' local OpenAI-compatible server (deterministic; token
counts are its estimate of ~4 characters per token).

    .venv/bin/python bench/judge_cost.py [--records 200]
"""

from __future__ import annotations

import argparse
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from judge_server import JudgeServer

from ragpulse.config import EvaluationSettings, JudgeSettings, Settings
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.judge_faithfulness import JudgeFaithfulness
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, RagRecord

TOPICS = [
    "plan",
    "storage",
    "sync",
    "export",
    "sharing",
    "trash",
    "search",
    "api",
    "offline",
    "tags",
]


def pool(n: int = 40) -> list[str]:
    rng = random.Random(3)
    docs = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        facts = [
            f"The {topic} feature number {i} supports {rng.randint(2, 500)} items."
            for _ in range(4)
        ]
        docs.append(" ".join([f"Document {i} is about {topic}.", *facts]))
    return docs


def records(n: int, seed: int) -> list[RagRecord]:
    rng = random.Random(seed)
    docs = pool()
    sentences = [s + "." for d in docs for s in d.split(". ") if s]
    answers = [" ".join(rng.sample(sentences, 3)) for _ in range(max(1, n // 3))]
    out = []
    for i in range(n):
        chosen = rng.sample(docs, 5)
        answer = rng.choice(answers) if rng.random() < 0.5 else " ".join(rng.sample(sentences, 3))
        out.append(
            RagRecord(
                trace_id=f"{seed:08x}{i:024x}",
                question=f"What does the {TOPICS[i % len(TOPICS)]} feature support?",
                documents=[Document(content=d) for d in chosen],
                answer=answer,
            )
        )
    return out


def run(evaluator: JudgeFaithfulness, batch: list[RagRecord]) -> tuple[float, float, float]:
    calls = tokens = cached = 0
    for start in range(0, len(batch), 16):
        for result in evaluator.evaluate(batch[start : start + 16]):
            calls += result.details.get("calls", 0)
            tokens += result.details.get("prompt_tokens", 0)
            cached += result.details.get("cached", 0)
    n = len(batch)
    return calls / n, tokens / n, cached / n


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200)
    args = parser.parse_args()
    with JudgeServer() as server:
        settings = JudgeSettings(
            base_url=server.base_url, model="bench-judge", api_key="x",
            calls_per_minute=10**9, tokens_per_minute=10**12, concurrency=8,
        )  # fmt: skip
        context = PluginContext(Settings(evaluation=EvaluationSettings(judge=settings)))
        [evaluator] = load_evaluators_safely([JudgeFaithfulness()], context)
        first = records(args.records, seed=1)
        print(f"by-statement faithfulness, {args.records} records x 5 documents (pool of 40)")
        print(
            f"{'pass':44} {'calls/record':>13} {'prompt tokens/record':>21} {'cache hits/record':>18}"
        )
        for label, batch in (
            ("cold cache", first),
            ("warm cache, same records", first),
            ("warm cache, new records over the same documents", records(args.records, seed=2)),
        ):
            calls, tokens, cached = run(evaluator, batch)
            print(f"{label:44} {calls:13.2f} {tokens:21.0f} {cached:18.2f}")
        print(f"\nserver saw {len(server.seen.requests)} requests in all")


if __name__ == "__main__":
    main()
