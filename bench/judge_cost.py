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

Against a real server (``--base-url`` and ``--model``, or ``--start-llama`` for
llama.cpp with SmolLM2-135M from tests/support/llm_server.py), records share their
documents in groups of ``--group``, one record at a time, and each pass prints
calls, prompt, completion and cached prompt tokens per record (``cached`` = read
from the server's prefix cache, as its ``usage`` reports), judge errors, and the
latency per record (p50/p95):

- cold: a fresh server (with --start-llama) and an empty judge cache;
- warm server, judge cache off: the same records again, every call made, the
  server's prefix cache warm;
- judge cache on: the same records through the first pass's client (no calls).

    .venv/bin/python bench/judge_cost.py --start-llama --records 20
    .venv/bin/python tests/support/llm_server.py --port 8080 &   # or any OpenAI-compatible server
    .venv/bin/python bench/judge_cost.py --base-url http://127.0.0.1:8080/v1 --model smollm2-135m
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.judge_server import JudgeServer
from support.llm_server import LlamaServer

from ragpulse.config import EvaluationSettings, JudgeSettings, Settings
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.answer_relevance.llm_judge import JudgeAnswerRelevance
from ragpulse.evaluators.base import Evaluator
from ragpulse.evaluators.context_relevance.llm_judge import JudgeContextRelevance
from ragpulse.evaluators.faithfulness.llm_judge import JudgeFaithfulness
from ragpulse.evaluators.judge.base import JudgeEvaluator
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, RagRecord
from ragpulse.telemetry import CollectorMetrics

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


def run(evaluator: Evaluator, batch: list[RagRecord]) -> tuple[float, float, float]:
    calls = tokens = cached = 0
    for start in range(0, len(batch), 16):
        for result in evaluator.evaluate(batch[start : start + 16]):
            calls += result.details.get("calls", 0)
            tokens += result.details.get("prompt_tokens", 0)
            cached += result.details.get("cached", 0)
    n = len(batch)
    return calls / n, tokens / n, cached / n


METRICS: dict[str, type[JudgeEvaluator]] = {
    "faithfulness": JudgeFaithfulness,
    "context_relevance": JudgeContextRelevance,
    "answer_relevance": JudgeAnswerRelevance,
}


def grouped(n: int, group: int) -> list[RagRecord]:
    """``n`` records; each run of ``group`` records retrieved the same 5 documents."""
    docs, rng = pool(), random.Random(5)
    out = []
    for i in range(n):
        chosen = random.Random(i // group).sample(docs, 5)
        topic = TOPICS[i % len(TOPICS)]
        fact = rng.choice(chosen).split(". ")[1]
        out.append(
            RagRecord(
                trace_id=f"{i + 1:032x}",
                question=f"How many items does the {topic} feature support?",
                documents=[Document(content=d) for d in chosen],
                answer=fact.rstrip(".") + ".",
            )
        )
    return out


def spent(metrics: CollectorMetrics) -> dict[str, float]:
    """Calls and tokens so far, from the judge's counters: failed calls cost tokens too,
    and an error result carries no usage of its own."""
    out = dict.fromkeys(("calls", "prompt", "completion", "cached_prompt"), 0.0)
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == "ragpulse_judge_latency_seconds_count":
                out["calls"] += s.value  # one observation per HTTP call, repairs included
            elif s.name == "ragpulse_judge_tokens_total":
                out[s.labels["kind"]] += s.value
    return out


def real_pass(
    evaluator: Evaluator, metrics: CollectorMetrics, batch: list[RagRecord]
) -> dict[str, Any]:
    """One record at a time (latency per record); per-record means of calls and tokens."""
    before, latencies, errors = spent(metrics), [], 0
    for record in batch:
        start = time.perf_counter()
        [result] = evaluator.evaluate([record])
        latencies.append(time.perf_counter() - start)
        errors += result.score is None
    after, n = spent(metrics), len(batch)
    q = statistics.quantiles(latencies, n=20, method="inclusive") if n > 1 else latencies * 19
    means = {k: (after[k] - before[k]) / n for k in after}
    return {**means, "errors": errors, "p50": q[9], "p95": q[18]}


def real(args: argparse.Namespace) -> None:
    with contextlib.ExitStack() as stack:
        if args.start_llama:
            server = stack.enter_context(LlamaServer(threads=args.threads))
            args.base_url, args.model = server.base_url, server.model

        def judge(cache_size: int) -> tuple[Evaluator, CollectorMetrics]:
            settings = JudgeSettings(
                base_url=args.base_url, model=args.model, api_key=args.api_key,
                calls_per_minute=10**9, tokens_per_minute=10**12, concurrency=1,
                timeout_s=600, max_retries=0, max_tokens=args.max_tokens,
                cache="memory", cache_size=cache_size,
            )  # fmt: skip
            context = stack.enter_context(
                contextlib.closing(
                    PluginContext(Settings(evaluation=EvaluationSettings(judge=settings)))
                )
            )
            [evaluator] = load_evaluators_safely([METRICS[args.metric]()], context)
            return evaluator, context.metrics

        batch = grouped(args.records, args.group)
        cached = judge(cache_size=10_000)
        print(
            f"{args.metric} (llm_judge) at {args.base_url}, model {args.model}, max_tokens "
            f"{args.max_tokens}: {len(batch)} records x 5 documents, groups of {args.group} "
            "share their documents; one record at a time"
        )
        print(
            f"{'pass':34} {'calls':>6} {'prompt tok':>11} {'completion tok':>15} "
            f"{'cached prompt tok':>18} {'errors':>7} {'p50 s':>7} {'p95 s':>7}   (per record)"
        )
        for label, (evaluator, metrics) in (
            ("cold", cached),
            ("warm server, judge cache off", judge(cache_size=0)),
            ("judge cache on (second pass)", cached),
        ):
            r = real_pass(evaluator, metrics, batch)
            print(
                f"{label:34} {r['calls']:6.2f} {r['prompt']:11.1f} "
                f"{r['completion']:15.1f} {r['cached_prompt']:18.1f} "
                f"{r['errors']:7d} {r['p50']:7.2f} {r['p95']:7.2f}"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=None, help="200 (double), 20 (real)")
    real_server = parser.add_argument_group("a real OpenAI-compatible server")
    real_server.add_argument("--base-url", help="e.g. http://127.0.0.1:8080/v1")
    real_server.add_argument("--model", help="the model name the server expects")
    real_server.add_argument("--api-key", default="not-needed")
    real_server.add_argument(
        "--start-llama", action="store_true",
        help="start llama.cpp with SmolLM2-135M (tests/support/llm_server.py) for the run",
    )  # fmt: skip
    real_server.add_argument("--threads", type=int, default=2, help="--start-llama's threads")
    real_server.add_argument("--metric", choices=sorted(METRICS), default="context_relevance")
    real_server.add_argument("--group", type=int, default=5, help="records sharing documents")
    real_server.add_argument("--max-tokens", type=int, default=256, help="cap per reply")
    args = parser.parse_args()
    if args.start_llama or args.base_url:
        if not args.start_llama and not args.model:
            parser.error("--base-url needs --model")
        args.records = args.records or 20
        real(args)
        return
    args.records = args.records or 200
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
