"""Model tier: speed, memory and accuracy of the local-model evaluators.

1. MiniLM alone: sentences/s at ~64 and ~256 tokens, torch vs onnxruntime.
2. Per evaluator: records/s (batches of 16) and p50/p99 latency (one record at a
   time), records of a question, 5 documents of ~100 words and a 3-sentence
   answer, all distinct texts (the embedding cache never hits).
3. Accuracy on ../shared/data/dev: AUROC of each faithfulness method on the
   faithfulness sets, of each context-relevance method on the ARES set, of the
   injection methods on the injection set, beside the cheap tier on the same rows.

4. ``--serve-vs-bare``: detector families in their real shapes (random weights,
   bench/detector_shapes.py) through ``ragpulse serve`` end to end (OTLP/HTTP in, scores
   out to a JSONL file, the model tier at rate 1 and budget 1, offered more traces than it
   takes: all of them posted at once) against bench/detector_bare.py, the same model on
   the same device over the same inputs in length-sorted passes, alternated ``--rounds``
   times, both pinned to one core (``taskset -c 0``; the load generator runs on the
   others). Per side: traces/s (serve: from the first POST to the last score), the ratio, p50/p99 latency (serve: post to score, paced at half its
   throughput; bare: one trace's rows alone), peak RSS (and device memory and
   utilisation on a GPU). With ``--burst``, a burst of what the deadline allows (0.6 x
   the measured throughput x ``max_delay_s``, 10 s) and one of 240 traces into serve
   with its default deadline and queue: how many were scored, how many skipped and why.

5. ``--precision N``: each model-tier evaluator with real weights here (MiniLM: the
   embedding metrics and the probes) on N rows spread over each dev set in fp32 and in
   bf16 (``evaluation.model.dtype``; torch runs bf16 on the CPU): the largest and mean
   score difference, the share of rows that differ by more than 0.01, and AUROC in each.

Real flan-t5 / DeBERTa reward / injection-classifier weights cannot be
downloaded here, so those three evaluators are not timed (tests cover their
code paths with tiny models).

    .venv/bin/python bench/model_tier.py [--records 200] [--skip-accuracy]
    .venv/bin/python bench/model_tier.py --serve-vs-bare [--families cross,classifier]
        [--traces 60] [--rounds 2] [--burst] [--device auto] [--dtype auto]
    .venv/bin/python bench/model_tier.py --precision 200
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from injection_dev import to_record as injection_record
from lexical_dev import auroc
from lexical_dev import record as dev_record

from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.base import Evaluator
from ragpulse.evaluators.models.encoder import Encoder
from ragpulse.plugins import evaluator_classes
from ragpulse.record import Document, RagRecord

DEV = Path(
    os.environ.get("RAGPULSE_DEV_DATA") or Path(__file__).resolve().parents[2] / "shared/data/dev"
)
TIMED = [
    ("context_relevance/embedding", {}),
    ("answer_relevance/embedding", {}),
    ("faithfulness/embedding", {}),
    ("faithfulness/embedding", {"backend": "onnx"}),
    ("faithfulness/probe", {}),
    ("injection/probe", {}),
    ("faithfulness/lexical", {}),
    ("injection/rules", {}),
]


def rows(name: str) -> list[dict]:
    return [json.loads(line) for line in (DEV / name).open(encoding="utf-8")]


def passages(words: int = 100, offset: int = 0) -> list[str]:
    texts = sorted(
        {c for f in DEV.glob("faithfulness_*.jsonl") for r in rows(f.name) for c in r["contexts"]}
    )
    tokens = " ".join(texts).split()
    return [" ".join(tokens[i : i + words]) for i in range(offset, len(tokens) - words, words)]


def synthetic_records(n: int) -> list[RagRecord]:
    # Windows at two offsets: ~2,200 distinct passages, so 400 records x 5 documents
    # never repeat a text (the embedding cache must not hit).
    pool = passages() + passages(offset=50)
    out = []
    for i in range(n):
        docs = [pool[(i * 5 + j) % len(pool)] for j in range(5)]
        answer = (
            " ".join(docs[0].split()[5:25]) + ". " + " ".join(docs[1].split()[:15]) + ". It is so."
        )
        out.append(
            RagRecord(
                trace_id=f"{i:032x}",
                question=f"What does the text say about {docs[0].split()[3]}?",
                documents=[Document(content=d) for d in docs],
                answer=answer,
            )
        )
    return out


def sentences_per_second() -> None:
    print("\n[1] all-MiniLM-L6-v2 alone, batches of 32 (sentences/s)")
    for backend in ("torch", "onnx"):
        encoder = Encoder(backend=backend, cache_size=0)
        try:
            encoder.load()
        except Exception as exc:
            print(f"    {backend}: unavailable ({exc})")
            continue
        for words in (48, 190):  # ~64 and ~256 word-piece tokens
            texts = [" ".join(passages()[i].split()[:words] * 2)[: words * 7] for i in range(128)]
            encoder.embed(texts[:8])
            t0 = time.perf_counter()
            encoder.embed(texts)
            rate = len(texts) / (time.perf_counter() - t0)
            tokens = statistics.fmean(encoder.token_counts(texts))
            print(f"    {backend:5} ~{tokens:3.0f} tokens: {rate:6.1f} sentences/s")


def build(name: str, options: dict) -> Evaluator | None:
    cls = evaluator_classes().get(name)
    if cls is None:
        return None
    ready = load_evaluators_safely([cls(**options)])
    return ready[0] if ready else None


def per_evaluator(n: int) -> None:
    print(f"\n[2] per evaluator: {n} records (question, 5 docs x ~100 words, 3-sentence answer)")
    print(f"    {'evaluator':40} {'records/s':>10} {'p50 ms':>8} {'p99 ms':>8}")
    for name, options in TIMED:
        label = name + (f" ({options['backend']})" if "backend" in options else "")
        records = synthetic_records(n * 2)
        evaluator = build(name, options)
        if evaluator is None:
            print(f"    {label:40} unavailable")
            continue
        _clear_caches()
        t0 = time.perf_counter()
        for i in range(0, n, 16):
            evaluator.evaluate(records[i : i + 16])
        rate = n / (time.perf_counter() - t0)
        latencies = []
        for record in records[n : n + min(n, 100)]:
            t1 = time.perf_counter()
            evaluator.evaluate([record])
            latencies.append((time.perf_counter() - t1) * 1000)
        p50, p99 = np.percentile(latencies, [50, 99])
        print(f"    {label:40} {rate:10.1f} {p50:8.1f} {p99:8.1f}")


def _clear_caches() -> None:
    from ragpulse.evaluators.models import encoder

    for shared in encoder._shared.values():  # a fresh embedding cache per measurement
        shared._cache.clear()


def accuracy() -> None:
    print(
        "\n[3] AUROC on the dev sets (rows with a score; label 1 = faithful / relevant / injection)"
    )
    faith = ["faithfulness/lexical", "faithfulness/embedding", "faithfulness/probe"]
    tasks: list[tuple[str, list[str], Callable[[dict], RagRecord]]] = [
        ("faithfulness_summedits_dev.jsonl", faith, dev_record),
        ("faithfulness_halueval_dialogue.jsonl", faith, dev_record),
        ("faithfulness_ares_nq.jsonl", faith, dev_record),
        (
            "context_relevance_ares_nq.jsonl",
            ["context_relevance/lexical", "context_relevance/embedding"],
            dev_record,
        ),
        (
            "answer_relevance_ares_nq.jsonl",
            ["answer_relevance/lexical", "answer_relevance/embedding"],
            dev_record,
        ),
        # As bench/injection_dev.py and the probe's card: a document row is asked about
        # with a neutral question (its own risk ~0.01), so the record's risk is the document's.
        ("injection_dev.jsonl", ["injection/rules", "injection/probe"], injection_record),
    ]
    for file, names, to_record in tasks:
        data = rows(file)
        records = [to_record(r) for r in data]
        for name in names:
            evaluator = build(name, {})
            if evaluator is None:
                print(f"    {file:40} {name:28} unavailable")
                continue
            results = []
            for i in range(0, len(records), 32):
                results.extend(evaluator.evaluate(records[i : i + 32]))
            pairs = [
                (r.score, d["label"])
                for r, d in zip(results, data, strict=True)
                if r.score is not None
            ]
            scores = np.array([s for s, _ in pairs])
            labels = np.array([y for _, y in pairs])
            print(f"    {file:40} {name:28} n={len(pairs):5d} AUROC {auroc(scores, labels):.3f}")


PRECISION_TASKS: list[tuple[str, list[str], Callable[[dict], RagRecord]]] = [
    ("faithfulness_summedits_dev.jsonl", ["faithfulness/embedding", "faithfulness/probe"],
     dev_record),
    ("faithfulness_halueval_dialogue.jsonl", ["faithfulness/embedding", "faithfulness/probe"],
     dev_record),
    ("faithfulness_ares_nq.jsonl", ["faithfulness/embedding", "faithfulness/probe"], dev_record),
    ("context_relevance_ares_nq.jsonl", ["context_relevance/embedding"], dev_record),
    ("answer_relevance_ares_nq.jsonl", ["answer_relevance/embedding"], dev_record),
    ("injection_dev.jsonl", ["injection/probe"], injection_record),
]  # fmt: skip


def precision(rows_per_set: int) -> None:
    """Scores in bf16 against fp32 on the dev sets."""
    from ragpulse.config import EvaluationSettings, ModelTierSettings, Settings
    from ragpulse.plugin_context import PluginContext

    def context(dtype: str) -> PluginContext:
        model = ModelTierSettings(dtype=dtype)  # type: ignore[arg-type]
        return PluginContext(Settings(evaluation=EvaluationSettings(model=model)))

    print(f"\n[5] bf16 against fp32 on the dev sets ({rows_per_set} rows spread over each)")
    print(f"    {'set':38} {'evaluator':28} {'max |d|':>8} {'mean |d|':>9} {'> 0.01':>7} "
          f"{'AUROC fp32':>10} {'bf16':>6}")  # fmt: skip
    contexts = {dtype: context(dtype) for dtype in ("fp32", "bf16")}
    for file, names, to_record in PRECISION_TASKS:
        every = rows(file)
        data = every[:: max(1, len(every) // rows_per_set)][:rows_per_set]  # both labels
        records = [to_record(r) for r in data]
        for name in names:
            scores = {}
            for dtype, ctx in contexts.items():
                [evaluator] = load_evaluators_safely([evaluator_classes()[name]()], ctx)
                out = []
                for i in range(0, len(records), 32):
                    out.extend(evaluator.evaluate(records[i : i + 32]))
                scores[dtype] = [r.score for r in out]
            pairs = [(a, b, d["label"]) for a, b, d in zip(scores["fp32"], scores["bf16"], data,
                     strict=True) if a is not None and b is not None]  # fmt: skip
            diffs = np.array([abs(a - b) for a, b, _ in pairs])
            labels = np.array([y for _, _, y in pairs])
            auc32 = auroc(np.array([a for a, _, _ in pairs]), labels)
            auc16 = auroc(np.array([b for _, b, _ in pairs]), labels)
            print(
                f"    {file:38} {name:28} {diffs.max():8.4f} {diffs.mean():9.4f} "
                f"{(diffs > 0.01).mean():7.1%} {auc32:10.3f} {auc16:6.3f}",
                flush=True,
            )


def _pair(metric: str) -> list[str]:
    return [f"{metric}/lexical", f"{metric}/embedding"]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--records", type=int, default=200)
    parser.add_argument("--skip-accuracy", action="store_true")
    parser.add_argument("--serve-vs-bare", action="store_true", help="section 4 only")
    parser.add_argument("--families", default="cross,classifier")
    parser.add_argument("--traces", type=int, default=60, help="section 4: traces per run")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--burst", action="store_true")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", default="auto")
    parser.add_argument("--core", default="0", help="taskset CPU list of both sides")
    parser.add_argument("--precision", type=int, default=0, help="section 5 only: rows a set")
    args = parser.parse_args()
    if not DEV.is_dir():
        raise SystemExit(f"dev data not found at {DEV}; set RAGPULSE_DEV_DATA")
    if args.serve_vs_bare:
        from model_tier_ratio import serve_vs_bare

        serve_vs_bare(args)
        return
    if args.precision:
        precision(args.precision)
        return
    import torch

    print(f"ragpulse model-tier benchmark: {os.cpu_count()} CPUs, torch {torch.__version__}, "
          f"{torch.get_num_threads()} torch threads")  # fmt: skip
    sentences_per_second()
    per_evaluator(args.records)
    if not args.skip_accuracy:
        accuracy()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS of this process: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
