"""Train the ``faithfulness/probe`` logistic regression and print how it does on the dev sets.

    .venv/bin/python training/train_faithfulness_probe.py            # writes the shipped .npz
    .venv/bin/python training/train_faithfulness_probe.py --no-write --domains

Protocol (see weights/faithfulness_probe.md): SummEdits and the HaluEval
dialogue dev rows are never trained on; ARES NQ is reported by grouped k-fold
cross-validation (folds by ARES document). The decision threshold is the one
that maximises balanced accuracy on out-of-fold predictions of the training
set. Sentence vectors are cached on disk (``--cache-dir``), so a second run
takes a few minutes. Needs the ``train`` extra (scikit-learn).
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from faithfulness_data import (
    Example,
    dev_set,
    halueval_dialogue,
    synthetic,
)
from scipy.optimize import minimize
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold

from ragpulse.evaluators.faithfulness.embedding import EmbeddingFaithfulness
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.evaluators.models.encoder import Encoder, shared_encoder
from ragpulse.evaluators.models.faithfulness_features import FEATURE_NAMES, featurize, prepare
from ragpulse.evaluators.models.probe import LinearProbe
from ragpulse.evaluators.text.analyses import sentences
from ragpulse.record import Document, RagRecord

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "evaluators/models/weights/faithfulness_probe.npz"
VERSION = "faithfulness-probe-2"


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


class VectorStore:
    """Sentence vectors by text, computed once with the shared encoder and kept on disk."""

    def __init__(self, encoder: Encoder, path: Path) -> None:
        self.encoder, self.path = encoder, path
        self.vectors: dict[str, np.ndarray] = {}
        if path.exists():
            with np.load(path, allow_pickle=False) as data:
                self.vectors = dict(zip(data["texts"].tolist(), data["vectors"], strict=True))

    def add(self, texts: Sequence[str], step: int = 2048) -> None:
        todo = sorted(set(texts) - self.vectors.keys())
        log(f"{len(self.vectors)} vectors cached, {len(todo)} to embed")
        for i in range(0, len(todo), step):
            part = todo[i : i + step]
            self.vectors.update(zip(part, self.encoder.embed(part), strict=True))
            log(f"  embedded {min(i + step, len(todo))}/{len(todo)}")
            if (i // step) % 5 == 4 or i + step >= len(todo):
                self.save()

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        texts = list(self.vectors)
        tmp = self.path.with_suffix(".tmp.npz")
        np.savez(tmp, texts=np.array(texts), vectors=np.stack([self.vectors[t] for t in texts]))
        tmp.replace(self.path)

    def embed(self, texts: Sequence[str]) -> np.ndarray:  # the Encoder API, for baselines
        self.add(list(texts)) if set(texts) - self.vectors.keys() else None
        return np.stack([self.vectors[t] for t in texts])

    def chunks(self, text: str) -> list[str]:
        return self.encoder.chunks(text)


def featurise(examples: list[Example], store: VectorStore) -> np.ndarray:
    plans = [prepare(e.question, e.answer, e.documents, store.encoder.chunks) for e in examples]
    store.add([t for p in plans for t in p.texts])
    return np.stack([featurize(p, store.vectors).values for p in plans])


# The direction each feature may push: +1 evidence of support, -1 of an unsupported
# detail. Some sources reverse a feature by accident (HaluEval's right dialogue
# responses chat beyond the knowledge, so there the *less* similar answer is the
# right one); a free fit learns such reversals and they do not carry over.
DIRECTION = {
    n: (-1 if n.startswith(("novel", "sentence_novel", "negation", "affix")) else 1)
    for n in FEATURE_NAMES
}


def fit(x: np.ndarray, y: np.ndarray, sources: Sequence[str], c: float) -> LinearProbe:
    """Sign-constrained, L2-regularised logistic regression; every source weighs the same."""
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale[scale < 1e-9] = 1.0
    z = (x - mean) / scale
    names, counts = np.unique(sources, return_counts=True)
    per = dict(zip(names.tolist(), (len(y) / (len(names) * counts)).tolist(), strict=True))
    w = np.array([per[s] for s in sources])

    def loss(params: np.ndarray) -> tuple[float, np.ndarray]:
        margin = z @ params[:-1] + params[-1]
        nll = w * (np.logaddexp(0, -margin) * y + np.logaddexp(0, margin) * (1 - y))
        grad = w * (1 / (1 + np.exp(-margin)) - y)
        penalty = 0.5 / c * float(params[:-1] @ params[:-1])
        return float(nll.sum()) + penalty, np.append(z.T @ grad + params[:-1] / c, grad.sum())

    bounds = [(0, None) if DIRECTION[n] > 0 else (None, 0) for n in FEATURE_NAMES]
    params = minimize(
        loss, np.zeros(len(FEATURE_NAMES) + 1), jac=True, method="L-BFGS-B",
        bounds=[*bounds, (None, None)],
    ).x  # fmt: skip
    return LinearProbe(params[:-1], float(params[-1]), mean, scale, FEATURE_NAMES, VERSION)


def macro_auroc(p: np.ndarray, y: np.ndarray, sources: Sequence[str]) -> float:
    """AUROC averaged over the real (not synthetic) sources."""
    arr = np.array(sources)
    real = sorted({s for s in sources if not s.startswith("synthetic")})
    return float(np.mean([roc_auc_score(y[arr == s], p[arr == s]) for s in real]))


def best_balanced_accuracy(scores: np.ndarray, labels: np.ndarray) -> tuple[float, float]:
    best = (0.0, 0.0)
    for t in np.unique(scores):
        best = max(best, (balanced_accuracy(scores, labels, float(t)), float(t)))
    return best


def balanced_accuracy(scores: np.ndarray, labels: np.ndarray, t: float) -> float:
    pred = scores >= t
    return float((pred[labels == 1].mean() + (~pred[labels == 0]).mean()) / 2)


def choose_threshold(p: np.ndarray, y: np.ndarray, sources: Sequence[str]) -> float:
    """Maximise balanced accuracy averaged over the real (not synthetic) training sources.

    The synthetic pairs are easier than real traffic and would push the threshold
    up; averaging per source keeps one large source from setting it alone.
    """
    real = sorted({s for s in sources if not s.startswith("synthetic")})
    src_arr = np.array(sources)
    best = (-1.0, 0.5)
    for t in np.round(np.arange(0.05, 0.96, 0.01), 2):
        macro = np.mean([balanced_accuracy(p[src_arr == s], y[src_arr == s], t) for s in real])
        best = max(best, (float(macro), float(t)))
    return best[1]


def grouped_oof(
    x: np.ndarray, y: np.ndarray, ex: list[Example], c: float, folds: int
) -> np.ndarray:
    """Out-of-fold P(faithful), folds by group."""
    out = np.zeros(len(y))
    groups = [e.group for e in ex]
    for tr, te in GroupKFold(folds).split(x, y, groups):
        out[te] = fit(x[tr], y[tr], [ex[i].source for i in tr], c).predict(x[te])
    return out


def baselines(examples: list[Example], store: VectorStore) -> dict[str, np.ndarray]:
    """faithfulness/lexical and faithfulness/embedding (threshold 0.6) on the same rows."""
    records = [
        RagRecord(
            question=e.question,
            answer=e.answer,
            documents=[Document(content=d) for d in e.documents],
        )
        for e in examples
    ]
    embedding = EmbeddingFaithfulness(threshold=0.6)
    embedding._encoder = store  # same vectors as the probe, same code as production
    out = {}
    for name, ev in (("lexical", LexicalFaithfulness()), ("embedding", embedding)):
        out[name] = np.array([np.nan if r.score is None else r.score for r in ev.evaluate(records)])
    return out


def row(name: str, method: str, s: np.ndarray, y: np.ndarray, thr: float | None) -> str:
    ok = ~np.isnan(s)
    s, y = s[ok], y[ok]
    bal, at = best_balanced_accuracy(s, y)
    fixed = f"{balanced_accuracy(s, y, thr):7.3f}" if thr is not None else "      -"
    auc = roc_auc_score(y, s)
    return f"| {name} | {method} | {len(y)} | {auc:.3f} | {fixed} | {bal:.3f} @ {at:.2f} |"


def timing(weights: Path, n: int = 16) -> None:
    """ms per record: a 3-sentence answer over 5 documents of 100 words (ARES contexts)."""
    from ragpulse.evaluators.faithfulness.probe import FaithfulnessProbe

    texts = dict.fromkeys(e.documents[0] for e in dev_set("faithfulness_ares_nq.jsonl"))
    docs = [" ".join(d.split()[:100]) for d in texts if len(d.split()) >= 100]
    ev = FaithfulnessProbe(weights=weights)
    from ragpulse.plugin_context import PluginContext

    ev.load(PluginContext())

    def batch(first: int, reuse: bool) -> list[RagRecord]:
        out = []
        for i in range(first, first + n):
            k = i % 2 if reuse else i
            chosen = [Document(content=d) for d in docs[5 * k : 5 * k + 5]]
            lead = " ".join(sentences(chosen[0].content)[:2])
            answer = f"{lead} This was reported in {1900 + i}."
            out.append(RagRecord(question="q", answer=answer, documents=chosen))
        return out

    ev.evaluate(batch(2 * n, reuse=False)[:2])  # first call: lazy initialisation
    ev.evaluate(batch(0, reuse=True))  # caches the documents of the second timing
    for name, records in (
        ("nothing cached", batch(2, False)),
        ("documents cached", batch(n, True)),
    ):
        start = time.perf_counter()
        ev.evaluate(records)
        ms = (time.perf_counter() - start) * 1000 / n
        print(f"  {name}: {ms:.1f} ms per record (one batch of {n})")


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache/ragpulse-training")
    ap.add_argument("--out", type=Path, default=OUT, help="where to write the .npz")
    ap.add_argument("--no-write", action="store_true", help="evaluate only")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dialogue", type=int, default=2000, help="HaluEval dialogue pairs")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--domains", action="store_true", help="also leave-one-SummEdits-domain-out")
    ap.add_argument("--timing", action="store_true", help="only time the shipped weights (--out)")
    args = ap.parse_args(argv)
    if args.timing:
        timing(args.out)
        return

    rng = random.Random(args.seed)
    log("loading MiniLM")
    store = VectorStore(shared_encoder(), args.cache_dir / "faithfulness_vectors.npz")
    cache = args.cache_dir / "wheels"

    log("building training data")
    dialogue = halueval_dialogue(cache, args.dialogue, rng)
    # Knowledge texts of the training dialogue rows (never a dev row's) as synthetic bases.
    knowledge = {e.group: e.documents[0] for e in dialogue if len(e.documents[0].split()) >= 12}
    dialogue_bases = [(g, k, "") for g, k in sorted(knowledge.items())]
    core = dialogue + synthetic(dialogue_bases, "synthetic_dialogue", rng, sentences)
    ares = dev_set("faithfulness_ares_nq.jsonl")
    ares_docs = {e.group: e.documents[0] for e in ares}
    ares_syn = synthetic(
        [(f"{g}", d, "") for g, d in sorted(ares_docs.items())], "synthetic_ares", rng, sentences
    )
    dialogue_dev = dev_set("faithfulness_halueval_dialogue.jsonl")
    summedits = dev_set("faithfulness_summedits_dev.jsonl")
    train = core + ares + ares_syn
    counts: dict[str, list[int]] = {}
    for e in train:
        counts.setdefault(e.source, [0, 0])[e.label] += 1
    print("\nTraining rows by source (faithful / unfaithful):")
    for s, (neg, pos) in sorted(counts.items()):
        print(f"  {s:28} {pos:6d} / {neg:6d}")

    log("features")
    x_core, x_ares, x_syn = (featurise(d, store) for d in (core, ares, ares_syn))
    x_dd, x_se = featurise(dialogue_dev, store), featurise(summedits, store)
    y = lambda d: np.array([e.label for e in d])  # noqa: E731
    src = lambda d: [e.source for e in d]  # noqa: E731
    x_train = np.vstack([x_core, x_ares, x_syn])
    y_train = y(train)

    log("choosing C and the threshold by grouped cross-validation on the training set")
    best_c, best_auc, oof = 1.0, -1.0, np.zeros(len(y_train))
    for c in (0.01, 0.1, 1.0):
        p = grouped_oof(x_train, y_train, train, c, args.folds)
        auc = macro_auroc(p, y_train, src(train))
        log(f"  C={c}: out-of-fold AUROC averaged over the real sources {auc:.4f}")
        if auc > best_auc + 1e-4:
            best_c, best_auc, oof = c, auc, p
    threshold = choose_threshold(oof, y_train, src(train))
    probe = fit(x_train, y_train, src(train), best_c)
    log(f"C={best_c}, threshold={threshold}")

    # ARES by grouped k-fold: the ARES rows and ARES-derived synthetic rows of a test
    # fold's documents are out of its training set; every other source is always in.
    ares_oof = np.zeros(len(ares))
    ares_groups = sorted(ares_docs)
    syn_groups = np.array([e.group for e in ares_syn])
    ares_g = np.array([e.group for e in ares])
    for _, te_idx in GroupKFold(args.folds).split(ares_groups, groups=ares_groups):
        held = {ares_groups[i] for i in te_idx}
        tr_a, tr_s = ~np.isin(ares_g, list(held)), ~np.isin(syn_groups, list(held))
        m = fit(
            np.vstack([x_core, x_ares[tr_a], x_syn[tr_s]]),
            np.concatenate([y(core), y(ares)[tr_a], y(ares_syn)[tr_s]]),
            src(core) + [s for s, k in zip(src(ares), tr_a, strict=True) if k]
            + [s for s, k in zip(src(ares_syn), tr_s, strict=True) if k],
            best_c,
        )  # fmt: skip
        ares_oof[~tr_a] = m.predict(x_ares[~tr_a])
    no_ares = fit(x_core, y(core), src(core), best_c)

    print(f"\nFeature weights (standardised), C={best_c}, threshold={threshold}:")
    for n, w in sorted(zip(FEATURE_NAMES, probe.weights, strict=True), key=lambda t: t[1]):
        print(f"  {n:24} {w:+.3f}")

    print("\n| set | method | n | AUROC | bal.acc @ shipped thr | best bal.acc (oracle thr) |")
    print("|---|---|---|---|---|---|")
    reports = [
        ("SummEdits (held out)", summedits, probe.predict(x_se)),
        ("HaluEval dialogue dev (held out)", dialogue_dev, probe.predict(x_dd)),
        (f"ARES NQ ({args.folds}-fold grouped CV)", ares, ares_oof),
    ]
    for name, rows, p in reports:
        yy = y(rows)
        print(row(name, "probe", p, yy, threshold))
        for method, s in baselines(rows, store).items():
            print(row(name, method, s, yy, None))
    print(
        row("ARES NQ (no ARES in training)", "probe", no_ares.predict(x_ares), y(ares), threshold)
    )
    for domain in ("news", "podcast", "samsum", "scitldr"):
        keep = np.array([e.group.startswith(domain) for e in summedits])
        print(
            row(
                f"SummEdits {domain}",
                "probe",
                probe.predict(x_se[keep]),
                y(summedits)[keep],
                threshold,
            )
        )

    if args.domains:
        print("\nLeave-one-SummEdits-domain-out (NOT the shipped model: trained with the other "
              "three domains added):")  # fmt: skip
        print("| held-out domain | n | AUROC | bal.acc @ shipped thr | best bal.acc |")
        for domain in ("news", "podcast", "samsum", "scitldr"):
            test = np.array([e.group.startswith(domain) for e in summedits])
            m = fit(
                np.vstack([x_train, x_se[~test]]),
                np.concatenate([y_train, y(summedits)[~test]]),
                src(train) + ["summedits"] * int((~test).sum()),
                best_c,
            )
            print(
                row(domain, "probe+3 domains", m.predict(x_se[test]), y(summedits)[test], threshold)
            )

    if not args.no_write:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(
            args.out,
            weights=probe.weights.astype(np.float32),
            bias=np.float32(probe.bias),
            mean=probe.mean.astype(np.float32),
            scale=probe.scale.astype(np.float32),
            feature_names=np.array(probe.feature_names),
            version=np.array(f"{VERSION} C={best_c} seed={args.seed}"),
            threshold=np.float32(threshold),
        )
        log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
