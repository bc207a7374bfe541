"""Train the injection probe (evaluators/models/weights/injection_probe.npz) and report it.

Steps: build the training set (training/injection_data.py: public benign text,
synthetic attacks and hard negatives, ordinary short traffic; no text sharing an
8-word shingle with the dev set or equal to a row of
bench/benign_short_traffic.jsonl; no reserved set, see training/reserved.py),
chunk every text exactly as the evaluator does, embed the chunks with the
shipped MiniLM (cached on disk), pick the L2 strength by grouped
cross-validation and the threshold from the out-of-fold risks of benign
locations, refit on everything, save the weights with that threshold (the
evaluator's default), and print the dev-set table next to injection/rules and
the false alarms on the held-out short-traffic set (both only reported on). Rows of
bench/data/benign_traffic.jsonl are held out the same way.

    .venv/bin/python training/train_injection_probe.py [--no-dev]

Needs the models and train extras (torch, sentence-transformers, scikit-learn).
About 7 minutes on 2 idle cores cold (embedding; 20+ on a busy machine), a few minutes
with the cache.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
from injection_data import Example, build, counts
from reserved import check

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from injection_dev import to_record

from ragpulse.evaluators.models.injection_features import FEATURE_NAMES, chunk_features, pieces

ROOT = Path(__file__).resolve().parents[1]
DEV = Path(os.environ.get("RAGPULSE_DEV_DATA") or ROOT.parent / "shared/data/dev")
OUT = ROOT / "evaluators/models/weights/injection_probe.npz"
SHORT_TRAFFIC = ROOT / "bench/benign_short_traffic.jsonl"  # held out: never trained on
BENIGN_TRAFFIC = ROOT / "bench/data/benign_traffic.jsonl"  # held out too (bench/benign_set.py)
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "ragpulse-training"
C_GRID = (0.03, 0.1, 0.3)
VERSION = "ragpulse-injection-probe-2"


def chunked(
    examples: list[Example], encoder: Any
) -> tuple[list[str], list[bool], list[int], list[int]]:
    """(piece texts, is_document, label, owning example) as the evaluator will see them.

    Benign texts give all their pieces. A planted attack labels only the
    piece(s) holding most of it or made mostly of it (the rest of the host is
    benign text seen elsewhere, so it is dropped, not mislabelled); any other
    attack keeps its first three pieces (long jailbreaks are attack text throughout).
    """
    texts: list[str] = []
    docs: list[bool] = []
    labels: list[int] = []
    owner: list[int] = []
    for i, e in enumerate(examples):
        parts = pieces(encoder, e.text)
        if e.label and e.span:
            parts = [p for p in parts if _holds_attack(p, e.span)]
        elif e.label:
            parts = parts[:3]
        for p in parts:
            texts.append(p)
            docs.append(e.where == "document")
            labels.append(e.label)
            owner.append(i)
    return texts, docs, labels, owner


def _holds_attack(piece: str, span: str) -> bool:
    """Most of the planted attack is in ``piece``, or ``piece`` is mostly attack."""
    span_words, words = set(span.lower().split()), piece.lower().split()
    inside = sum(w in span_words for w in words)
    return len(span_words & set(words)) >= 0.5 * len(span_words) or inside >= 0.5 * len(words)


def embed_cached(texts: list[str], encoder: Any, cache_file: Path) -> np.ndarray:
    """MiniLM vectors for ``texts``, reusing a disk cache keyed by text hash."""
    keys = [hashlib.sha1(t.encode()).hexdigest() for t in texts]
    store: dict[str, np.ndarray] = {}
    if cache_file.exists():
        with np.load(cache_file) as data:
            store = dict(zip(data["keys"].tolist(), data["vectors"], strict=True))
    todo = list(dict.fromkeys(t for t, k in zip(texts, keys, strict=True) if k not in store))
    start = time.perf_counter()
    for n in range(0, len(todo), 512):
        batch = todo[n : n + 512]
        for t, v in zip(batch, encoder.embed(batch), strict=True):
            store[hashlib.sha1(t.encode()).hexdigest()] = v
        done = n + len(batch)
        rate = done / (time.perf_counter() - start)
        print(f"  embedded {done}/{len(todo)} new chunks ({rate:.0f}/s)", flush=True)
        encoder._cache.clear()  # training texts would only evict each other
        if (n // 512) % 4 == 3 or done == len(todo):  # an interrupted run keeps its work
            cache_file.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache_file.with_suffix(".tmp.npz")
            np.savez(tmp, keys=np.array(list(store)), vectors=np.stack(list(store.values())))
            tmp.replace(cache_file)
    return np.stack([store[k] for k in keys])


def location_max(risk: np.ndarray, owner: list[int], n: int) -> np.ndarray:
    out = np.zeros(n)
    np.maximum.at(out, np.asarray(owner), risk)
    return out


def cross_validate(
    x: np.ndarray, y: np.ndarray, groups: np.ndarray, c: float, folds: int, seed: int
) -> np.ndarray:
    """Out-of-fold P(injection) per chunk; folds never split a group."""
    from sklearn.model_selection import StratifiedGroupKFold

    oof = np.zeros(len(y))
    splitter = StratifiedGroupKFold(n_splits=folds, shuffle=True, random_state=seed)
    for train, test in splitter.split(x, y, groups):
        oof[test] = fit(x[train], y[train], c).predict_proba(x[test])[:, 1]
    return oof


def fit(x: np.ndarray, y: np.ndarray, c: float) -> Any:
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    model = LogisticRegression(C=c, class_weight="balanced", max_iter=3000)
    return make_pipeline(StandardScaler(), model).fit(x, y)


def pick_threshold(risk: np.ndarray, labels: np.ndarray, max_fpr: float) -> float:
    """Lowest threshold (2 decimals) whose benign false-positive rate is at most ``max_fpr``."""
    benign = np.sort(risk[labels == 0])
    allowed = int(np.floor(max_fpr * len(benign)))
    cut = benign[len(benign) - allowed - 1] if allowed < len(benign) else 0.0
    return float(min(0.99, np.ceil((cut + 1e-9) * 100) / 100))


def rates(risk: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, float]:
    from sklearn.metrics import roc_auc_score

    pred = risk >= threshold
    tp = int((pred & (labels == 1)).sum())
    fp = int((pred & (labels == 0)).sum())
    pos, neg = int((labels == 1).sum()), int((labels == 0).sum())
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / pos if pos else float("nan")
    out = {
        "precision": precision,
        "recall": recall,
        "f1": 2 * precision * recall / (precision + recall) if tp else 0.0,
        "fpr": fp / neg if neg else float("nan"),
        "auroc": float(roc_auc_score(labels, risk)) if pos and neg else float("nan"),
    }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dev-dir", type=Path, default=DEV)
    parser.add_argument("--cache-dir", type=Path, default=CACHE)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--scale", type=float, default=0.35, help="synthetic set size factor")
    parser.add_argument("--max-public", type=int, default=1800, help="public benign texts (sample)")
    parser.add_argument("--folds", type=int, default=5)
    parser.add_argument("--max-fpr", type=float, default=0.01, help="OOF benign location FPR")
    parser.add_argument("--no-dev", action="store_true", help="skip the dev-set report")
    args = parser.parse_args(argv)
    np.random.seed(args.seed)

    from ragpulse.evaluators.models.encoder import shared_encoder

    print(f"building training set (seed {args.seed})")
    examples, dropped = build(
        args.dev_dir,
        args.seed,
        args.scale,
        heldout=[SHORT_TRAFFIC, BENIGN_TRAFFIC],
        max_public=args.max_public,
    )
    for (source, where, label), n in sorted(counts(examples).items()):
        print(f"  {source:<34} {where:<9} label={label} {n:>5}")
    print(f"  kept {len(examples)}; dropped {dict(sorted(dropped.items()))}")

    encoder = shared_encoder()
    texts, docs, labels, owner = chunked(examples, encoder)
    print(f"{len(texts)} chunks from {len(examples)} texts; embedding")
    vectors = embed_cached(texts, encoder, args.cache_dir / "injection_chunks.npz")
    x = chunk_features(texts, vectors, docs)
    y = np.asarray(labels)
    groups = np.asarray([examples[i].group for i in owner])
    loc_y = np.asarray([e.label for e in examples])
    benign_docs = np.asarray([e.label == 0 and e.where == "document" for e in examples])

    best: tuple[float, float, np.ndarray] | None = None
    for c in C_GRID:
        oof = location_max(
            cross_validate(x, y, groups, c, args.folds, args.seed), owner, len(examples)
        )
        # Recall of attacked locations at 1% benign-location FPR: the operating region we ship.
        t = pick_threshold(oof, loc_y, args.max_fpr)
        r = rates(oof, loc_y, t)
        print(f"  C={c:<6} OOF AUROC {r['auroc']:.4f}  recall {r['recall']:.3f} at threshold {t}")
        if best is None or r["recall"] > best[1]:
            best = (c, r["recall"], oof)
    assert best is not None
    c, _, oof = best
    threshold = pick_threshold(oof, loc_y, args.max_fpr)
    r = rates(oof, loc_y, threshold)
    print(f"chosen C={c}, threshold {threshold} (OOF benign-location FPR <= {args.max_fpr})")
    print("OOF at threshold: " + " ".join(f"{k} {v:.3f}" for k, v in r.items()))
    print(f"  OOF FPR on benign documents {float((oof[benign_docs] >= threshold).mean()):.4f}")
    by_source: dict[str, list[int]] = defaultdict(list)
    for i, e in enumerate(examples):
        by_source[e.source.split("+")[0]].append(i)
    for source, idx in sorted(by_source.items()):
        hit = float((oof[idx] >= threshold).mean())
        print(f"  OOF {'recall' if loc_y[idx[0]] else 'FPR   '} {hit:.3f}  {source} ({len(idx)})")

    dump = args.cache_dir / "injection_oof.jsonl"
    with dump.open("w", encoding="utf-8") as fh:
        for e, risk in zip(examples, oof.tolist(), strict=True):
            fh.write(json.dumps({"risk": round(risk, 4), **e.__dict__}) + "\n")
    print(f"  out-of-fold risks per text: {dump}")

    model = fit(x, y, c)
    scaler, lr = model[0], model[1]
    weights = lr.coef_[0]
    save_probe(
        args.out, weights, float(lr.intercept_[0]), scaler.mean_, scaler.scale_, c, args.seed
    )
    add_threshold(args.out, threshold)
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes); default threshold {threshold}")
    timing(args.out, threshold, args.dev_dir)
    if not args.no_dev:
        print(report(args.dev_dir / "injection_dev.jsonl", args.out, threshold))
        print(short_traffic_report(SHORT_TRAFFIC, args.out, threshold))
    return 0


def save_probe(
    path: Path, w: np.ndarray, b: float, mean: np.ndarray, scale: np.ndarray, c: float, seed: int
) -> None:
    from ragpulse.evaluators.models.probe import LinearProbe

    scale = np.where(scale > 0, scale, 1.0)
    version = f"{VERSION} (C={c}, seed={seed}, {len(FEATURE_NAMES)} features)"
    LinearProbe(w, b, mean, scale, FEATURE_NAMES, version).save(path)


def add_threshold(path: Path, threshold: float) -> None:
    """Store the OOF-chosen threshold in the .npz, so the evaluator's default is the trained one."""
    with np.load(path, allow_pickle=False) as data:
        arrays = {k: data[k] for k in data.files}
    np.savez_compressed(path, **arrays, threshold=np.float32(threshold))


def _probe(weights: Path, threshold: float) -> Any:
    from ragpulse.evaluators.injection.probe import InjectionProbe

    probe = InjectionProbe(threshold=threshold, weights=str(weights))
    from ragpulse.plugin_context import PluginContext

    probe.load(PluginContext())
    return probe


def timing(weights: Path, threshold: float, dev_dir: Path, n: int = 16) -> None:
    """ms per record (question + 5 documents of ~100 words), uncached and cached."""
    from ragpulse.record import Document, RagRecord

    probe = _probe(weights, threshold)
    rows = [json.loads(line) for line in (dev_dir / "faithfulness_ares_nq.jsonl").open()]
    rng = random.Random(0)
    rng.shuffle(rows)
    passages = list(dict.fromkeys(c for r in rows for c in r["contexts"]))
    docs = [" ".join(p.split()[:100]) for p in passages if len(p.split()) >= 100]
    records = [
        RagRecord(
            trace_id=str(i),
            question=rows[i]["question"],
            documents=[Document(content=d) for d in docs[5 * i : 5 * i + 5]],
        )
        for i in range(n)
    ]
    probe._encoder._cache.clear()
    start = time.perf_counter()
    probe.evaluate(records)
    batch = (time.perf_counter() - start) * 1000 / n
    start = time.perf_counter()
    probe.evaluate(records)
    cached = (time.perf_counter() - start) * 1000 / n
    print(f"ms per record (question + 5 x 100-word documents): {batch:.1f} uncached in a batch "
          f"of {n}, {cached:.2f} when every text is in the embedding cache")  # fmt: skip


def report(data: Path, weights: Path, threshold: float) -> str:
    """The dev-set table, probe next to injection/rules, in Markdown (pasted into the card)."""
    from sklearn.metrics import roc_auc_score

    from ragpulse.evaluators.injection.rules import InjectionRules

    with Path(check(data)).open(encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    records = [to_record(r) for r in rows]
    probe, rules = _probe(weights, threshold).evaluate(records), InjectionRules().evaluate(records)
    results = {
        "injection/probe": probe,
        "injection/rules": rules,
        # Both run by default: what a user who alerts on either of them gets.
        "probe or rules": [
            p.model_copy(
                update={
                    "score": max(p.score or 0.0, r.score or 0.0),
                    "label": "injection" if "injection" in (p.label, r.label) else "benign",
                }
            )
            for p, r in zip(probe, rules, strict=True)
        ],
    }
    slices = {
        "overall": list(range(len(rows))),
        **{w: [i for i, r in enumerate(rows) if r["where"] == w] for w in ("document", "question")},
    }
    lines = [
        "| slice | method | n | precision | recall | F1 | FPR (benign) | AUROC | tp/fp/fn/tn |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name, idx in slices.items():
        y = np.asarray([int(rows[i]["label"]) for i in idx])
        for method, res in results.items():
            score = np.asarray([res[i].score or 0.0 for i in idx])
            pred = np.asarray([res[i].label == "injection" for i in idx])
            tp, fp = int((pred & (y == 1)).sum()), int((pred & (y == 0)).sum())
            fn, tn = int((~pred & (y == 1)).sum()), int((~pred & (y == 0)).sum())
            p = tp / (tp + fp) if tp + fp else float("nan")
            rc = tp / (tp + fn) if tp + fn else float("nan")
            f1 = 2 * p * rc / (p + rc) if tp else 0.0
            fpr = f"{fp / (fp + tn):.3f}" if fp + tn else "-"
            auc = f"{roc_auc_score(y, score):.3f}" if 0 < y.sum() < len(y) else "-"
            lines.append(
                f"| {name} | {method} | {len(idx)} | {p:.3f} | {rc:.3f} | {f1:.3f} | {fpr} | "
                f"{auc} | {tp}/{fp}/{fn}/{tn} |"
            )
    lines += [
        "",
        "| injection_variant | n | probe recall | rules recall | either |",
        "|---|---|---|---|---|",
    ]
    variants: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(rows):
        if r["label"]:
            variants[str((r.get("meta") or {}).get("injection_variant", "unknown"))].append(i)
    for variant, idx in sorted(variants.items(), key=lambda kv: -len(kv[1])):
        rec = [sum(results[m][i].label == "injection" for i in idx) / len(idx) for m in results]
        lines.append(f"| {variant} | {len(idx)} | " + " | ".join(f"{x:.3f}" for x in rec) + " |")
    return f"dev set {data.name}, probe threshold {threshold}:\n" + "\n".join(lines)


def short_traffic_report(data: Path, weights: Path, threshold: float) -> str:
    """False alarms on the held-out benign short-traffic set, probe next to injection/rules."""
    from ragpulse.evaluators.injection.rules import InjectionRules

    rows = [json.loads(line) for line in data.open(encoding="utf-8") if line.strip()]
    records = [to_record(r) for r in rows]
    lines = [f"held-out benign short traffic {data.name} ({len(rows)} rows):"]
    for name, ev in (("injection/probe", _probe(weights, threshold)), ("rules", InjectionRules())):
        res = ev.evaluate(records)
        flagged = [(r.score or 0.0, row["text"]) for r, row in zip(res, rows, strict=True)
                   if r.label == "injection"]  # fmt: skip
        top = max((r.score or 0.0) for r in res)
        fpr = len(flagged) / len(rows)
        lines.append(f"  {name}: FPR {fpr:.3f} ({len(flagged)}), max risk {top:.3f}")
        lines += [f"    {s:.3f} {t[:80]!r}" for s, t in sorted(flagged, reverse=True)[:10]]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
