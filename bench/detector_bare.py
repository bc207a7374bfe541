"""The floor bench/model_tier.py compares ``ragpulse serve`` with: the same model on the same
device over the same inputs, and nothing else.

Tokenises every trace's inputs in one fast-tokenizer call, sorts the rows by length, cuts
them into passes of at most ``--max-batch-tokens`` padded tokens (rows x the longest
row, the model tier's rule), runs them under ``torch.inference_mode`` and takes each
row's probabilities. Then the latency of a trace alone: its own rows, tokenised and run
as one pass, for ``--latency`` traces. Prints one JSON line: traces, seconds, CPU
seconds, pass count, padded share, lone-trace latencies (ms), peak RSS (MiB).

    detector_bare.py MODEL_DIR FAMILY TRACES [--device cpu] [--dtype fp32]
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from detector_shapes import FAMILIES, trace_set


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model", type=Path)
    parser.add_argument("family", choices=sorted(FAMILIES))
    parser.add_argument("traces", type=int)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="fp32", choices=("fp32", "bf16", "fp16"))
    parser.add_argument("--max-batch-tokens", type=int, default=4096)
    parser.add_argument("--latency", type=int, default=20)
    args = parser.parse_args()
    import torch
    from transformers import (
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    family = FAMILIES[args.family]
    traces = trace_set(args.traces)
    head = AutoModelForTokenClassification if family.key == "token" else (
        AutoModelForSequenceClassification
    )  # fmt: skip
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    model = head.from_pretrained(args.model).eval().to(args.device, dtype)
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    uses_types = int(getattr(model.config, "type_vocab_size", 0) or 0) > 1
    gpu = args.device.startswith("cuda")

    def run(rows: list[list[int]], types: list[list[int]] | None) -> None:
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), tokenizer.pad_token_id or 0, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        kinds = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
            if types is not None:
                kinds[i, : len(row)] = torch.tensor(types[i])
        feed = {"input_ids": ids, "attention_mask": mask}
        if uses_types:
            feed["token_type_ids"] = kinds
        with torch.inference_mode():
            logits = model(**{k: v.to(args.device) for k, v in feed.items()}).logits.float()
            probs = torch.sigmoid(logits) if logits.shape[-1] == 1 else logits.softmax(-1)
            probs.cpu()

    def tokenise(items: list[tuple[list[str], list[str] | None]]) -> tuple[list, list | None]:
        first = [f for fs, _ in items for f in fs]
        second = [s for _, ss in items for s in ss] if items[0][1] is not None else None
        enc = tokenizer(first, second, padding=False, truncation=False,
                        return_token_type_ids=uses_types)  # fmt: skip
        return enc["input_ids"], (enc["token_type_ids"] if uses_types else None)

    run(*tokenise([family.inputs(traces[0])]))  # warm up
    if gpu:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started, cpu = time.perf_counter(), time.process_time()
    ids, types = tokenise([family.inputs(t) for t in traces])
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    passes, padded, real = 0, 0, 0
    current: list[int] = []
    for i in [*order, None]:
        if i is not None and (
            not current or (len(current) + 1) * len(ids[i]) <= args.max_batch_tokens
        ):
            current.append(i)
            continue
        run([ids[j] for j in current], [types[j] for j in current] if types else None)
        passes += 1
        padded += len(current) * len(ids[current[-1]])
        real += sum(len(ids[j]) for j in current)
        current = [i] if i is not None else []
    if gpu:
        torch.cuda.synchronize()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    latencies = []
    for trace in trace_set(args.traces + args.latency)[args.traces :]:
        t0 = time.perf_counter()
        run(*tokenise([family.inputs(trace)]))
        if gpu:
            torch.cuda.synchronize()
        latencies.append((time.perf_counter() - t0) * 1000)
    print(json.dumps({
        "traces": len(traces), "rows": len(ids), "seconds": seconds, "cpu_seconds": cpu,
        "passes": passes, "padding": 1 - real / padded if padded else 0.0,
        "latencies_ms": latencies,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "peak_device_mib": torch.cuda.max_memory_allocated() / 2**20 if gpu else None,
    }))  # fmt: skip


if __name__ == "__main__":
    main()
