"""Detector families on one core: pairs/s, per-record latency, and the model tier's traces/s.

Each family runs a MiniLM-sized model of its real architecture (6 layers, 384 wide):
the cross-encoder and the NLI classifier are all-MiniLM-L6-v2's own BERT weights with a
fresh head (ms-marco-MiniLM-L6 has exactly this shape), HHEM a 6-layer 384-wide T5
encoder, the span detector a ModernBERT and the injection classifier a DeBERTa-v2 of
the same size (Prompt Guard 2 22M is a 384-wide DeBERTa-v3), with MiniLM's tokenizer.
The weights are random past MiniLM's: the speed is the architecture's, the scores
mean nothing.

Records: a question, 5 documents of ~100 words and a 3-sentence answer, all distinct
(bench/model_tier.py's). One torch thread, one onnxruntime thread.

- pairs/s: model inputs (pairs or windows) per second, records in batches of 16;
- p50 / p99 ms: one record at a time;
- traces/s: records per second through the model tier's path (``evaluate_records`` in
  the tier's batches of 16) with that family on: what one core of the model tier can
  evaluate; ``ragpulse serve`` gives the tier ``evaluation.model.budget`` (25%) of its time.

    .venv/bin/python bench/detectors.py [--records 48]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model_tier import synthetic_records

from ragpulse.evaluation import evaluate_records, load_evaluators_safely
from ragpulse.evaluators.base import Evaluator
from ragpulse.evaluators.models.loading import resolve
from ragpulse.plugin_context import PluginContext
from ragpulse.plugins import evaluator_class

MINILM = resolve("all-MiniLM-L6-v2")
SIZE = {"hidden": 384, "layers": 6, "heads": 12, "ffn": 1536}


def build(root: Path) -> dict[str, tuple[str, dict[str, Any]]]:
    """MiniLM-sized models of each family's architecture; (evaluator, options) by label."""
    from safetensors.torch import save_file
    from transformers import (
        AutoTokenizer,
        BertForSequenceClassification,
        DebertaV2Config,
        DebertaV2ForSequenceClassification,
        ModernBertConfig,
        ModernBertForTokenClassification,
        T5Config,
        T5ForTokenClassification,
    )

    tok = AutoTokenizer.from_pretrained(MINILM)
    vocab = len(tok)
    out: dict[str, tuple[str, dict[str, Any]]] = {}

    def save(model: Any, name: str) -> str:
        model.save_pretrained(root / name)
        tok.save_pretrained(root / name)
        return str(root / name)

    labels3 = {0: "entailment", 1: "neutral", 2: "contradiction"}
    nli = BertForSequenceClassification.from_pretrained(
        MINILM, num_labels=3, id2label=labels3, label2id={v: k for k, v in labels3.items()}
    )
    out["faithfulness/nli (BERT MiniLM, 3-way)"] = ("faithfulness/nli", {"model": save(nli, "nli")})
    t5 = T5Config(vocab_size=vocab, d_model=SIZE["hidden"], d_ff=SIZE["ffn"], d_kv=32,
                  num_layers=SIZE["layers"], num_heads=SIZE["heads"], num_labels=2,
                  pad_token_id=tok.pad_token_id)  # fmt: skip
    (root / "flan").mkdir()
    t5.save_pretrained(root / "flan")
    tok.save_pretrained(root / "flan")
    model = T5ForTokenClassification(t5)
    state = {f"t5.{k}": v.clone().contiguous() for k, v in model.state_dict().items()
             if "embed_tokens" not in k}  # fmt: skip
    (root / "hhem").mkdir()
    save_file(state, str(root / "hhem" / "model.safetensors"))
    (root / "hhem" / "config.json").write_text(
        '{"model_type": "HHEMv2", "foundation": "%s"}' % (root / "flan")
    )
    out["faithfulness/nli (HHEM layout, T5)"] = (
        "faithfulness/nli",
        {"model": str(root / "hhem"), "max_tokens": 512},
    )
    spans = ModernBertForTokenClassification(ModernBertConfig(
        vocab_size=vocab, hidden_size=SIZE["hidden"], num_hidden_layers=SIZE["layers"],
        num_attention_heads=SIZE["heads"], intermediate_size=SIZE["ffn"],
        max_position_embeddings=4096, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
        cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id, num_labels=2,
    ))  # fmt: skip
    out["faithfulness/spans (ModernBERT)"] = (
        "faithfulness/spans",
        {"model": save(spans, "spans"), "max_tokens": 4096},
    )
    reranker = BertForSequenceClassification.from_pretrained(MINILM, num_labels=1)
    out["context_relevance/cross_encoder (BERT MiniLM)"] = (
        "context_relevance/cross_encoder",
        {"model": save(reranker, "reranker")},
    )
    guard = DebertaV2ForSequenceClassification(DebertaV2Config(
        vocab_size=vocab, hidden_size=SIZE["hidden"], num_hidden_layers=SIZE["layers"],
        num_attention_heads=SIZE["heads"], intermediate_size=SIZE["ffn"],
        max_position_embeddings=512, pad_token_id=tok.pad_token_id, num_labels=2,
    ))  # fmt: skip
    out["injection/classifier (DeBERTa-v2)"] = (
        "injection/classifier",
        {"model": save(guard, "guard"), "preset": "prompt-guard-2-22m"},
    )
    return out


def rows_run(evaluator: Evaluator) -> int:
    """Rows (pairs or windows) the evaluator's model has run so far (its queue counts them)."""
    return int(evaluator.classifier.queue.rows_run)  # type: ignore[attr-defined]


def measure(name: str, options: dict[str, Any], n: int) -> tuple[float, float, float, float, float]:
    [evaluator] = load_evaluators_safely([evaluator_class(name)(options)], PluginContext())
    evaluator.evaluate(synthetic_records(1))  # fail here, not per record, if it cannot run
    records = synthetic_records(n * 2 + 40)
    evaluator.evaluate(records[-2:])  # warm up
    before = rows_run(evaluator)
    t0 = time.perf_counter()
    for i in range(0, n, 16):
        evaluator.evaluate(records[i : i + 16])
    elapsed = time.perf_counter() - t0
    seen = rows_run(evaluator) - before
    pairs_per_s, pairs_per_record = seen / elapsed, seen / n
    latencies = []
    for record in records[n : n + min(n, 30)]:
        t1 = time.perf_counter()
        evaluator.evaluate([record])
        latencies.append((time.perf_counter() - t1) * 1000)
    p50, p99 = np.percentile(latencies, [50, 99])
    tier = records[n + 30 : n + 30 + n] if len(records) >= 2 * n + 30 else records[:n]
    t2 = time.perf_counter()
    for i in range(0, len(tier), 16):
        evaluate_records(tier[i : i + 16], [evaluator])
    traces = len(tier) / (time.perf_counter() - t2)
    return pairs_per_s, pairs_per_record, float(p50), float(p99), traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--records", type=int, default=48)
    parser.add_argument("--only", default="", help="comma-separated words a family must contain")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(1)
    print(f"detector families, one core: torch {torch.__version__} (1 thread), onnxruntime "
          f"(1 thread); {args.records} records; {os.cpu_count()} CPUs on the machine")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.setdefault("RAGPULSE_CACHE_DIR", str(Path(tmp) / "cache"))
        models = build(Path(tmp))
        print(f"\n{'family (architecture)':48} {'backend':8} {'pairs/s':>8} {'pairs/rec':>9} "
              f"{'p50 ms':>8} {'p99 ms':>8} {'traces/s':>9}")  # fmt: skip
        wanted = [w for w in args.only.split(",") if w]
        for label, (name, options) in models.items():
            if wanted and not any(w in label for w in wanted):
                continue
            for backend in ("torch", "onnx"):
                chosen = {**options, "backend": backend, "threads": 1}
                try:
                    pps, ppr, p50, p99, tps = measure(name, chosen, args.records)
                except Exception as exc:
                    print(f"{label:48} {backend:8} failed: {type(exc).__name__}: {exc}")
                    continue
                print(f"{label:48} {backend:8} {pps:8.1f} {ppr:9.1f} {p50:8.0f} {p99:8.0f} "
                      f"{tps:9.2f}", flush=True)  # fmt: skip
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak RSS of this process: {rss:.0f} MiB")


if __name__ == "__main__":
    main()
