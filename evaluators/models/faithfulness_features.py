"""Features of (question, answer, documents) for the ``faithfulness/probe`` model.

One module serves training (``training/train_faithfulness_probe.py``) and
inference (``evaluators/faithfulness/probe.py``) so the two cannot drift: a
feature computed differently at inference than in training silently breaks a
linear model. Everything here is deterministic given the sentence vectors.

Two passes, so that an evaluator can embed every sentence of a whole batch in
one encoder call: :func:`prepare` splits texts into units (sentences, chunked
when longer than the encoder's window) and :func:`featurize` turns the unit
vectors into the feature row plus the evidence shown to users.

Why these features: a sentence embedding says whether an answer sentence is
*about* something in the documents but is weak on the details that make it
wrong (a changed number, a swapped name, a flipped negation), so the lexical
features look at exactly those details, sentence by sentence, against the
document sentence that the embedding picked as the best match.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import numpy as np

from ragpulse.evaluators.text.analyses import content_tokens, normalize, sentences

FEATURE_NAMES: tuple[str, ...] = (
    "sim_min",  # weakest answer sentence: cosine to its best document sentence
    "sim_mean",
    "share_sim_50",  # share of answer sentences whose best match has cosine >= 0.5
    "share_sim_70",
    "k_precision",  # share of answer content tokens found in the documents
    "novel_share",  # share of distinct answer content words in neither documents nor question
    "sentence_novel_max",  # the same share, for the worst answer sentence
    "local_precision_min",  # answer-sentence tokens found in its best-matching unit(s)
    "local_precision_mean",
    "bigram_precision_min",  # answer-sentence content bigrams found in the documents
    "bigram_precision_mean",
    "novel_numbers",  # numbers in the answer absent from the documents (capped at 3)
    "novel_entities",  # capitalised words absent from documents and question (capped at 5)
    "negation_mismatch",  # share of sentences whose negation parity differs from the match
    "affix_antonym",  # novel words that are un-/in-/dis-... of a document word, or vice versa
)
# No answer-length feature: in the training sources hallucinated answers tend to be
# longer, and a length weight would mark every long production answer down.

_NUMBER_WORDS = {
    w: str(i)
    for i, w in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
        "fifteen sixteen seventeen eighteen nineteen twenty".split()
    )
    if i > 1  # "one of", "no one": too often not a quantity
} | {"thirty": "30", "forty": "40", "fifty": "50", "hundred": "100", "thousand": "1000"}
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[A-Za-z][\w'-]*")
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nobody|nothing|neither|nor|cannot|without|fail(?:s|ed)? to)\b|n't\b"
)
_NEG_PREFIXES = ("non", "dis", "un", "in", "im", "il", "ir", "mis")


@dataclass(frozen=True)
class Prepared:
    """A record split into embedding units; ``texts`` lists what to embed."""

    question: str
    answer: str
    documents: tuple[str, ...]
    answer_units: tuple[str, ...]
    doc_units: tuple[str, ...]
    doc_of_unit: tuple[int, ...]

    @property
    def texts(self) -> list[str]:
        return [*self.answer_units, *self.doc_units]

    @property
    def applicable(self) -> bool:
        return bool(self.answer_units) and bool(self.doc_units)


@dataclass(frozen=True)
class Features:
    values: np.ndarray  # (len(FEATURE_NAMES),) float64
    evidence: dict[str, Any] = field(default_factory=dict)


def units(text: str, chunk: Callable[[str], list[str]]) -> list[str]:
    """Sentences of ``text``, each cut into encoder-sized chunks when too long."""
    return [c for s in sentences(text) for c in chunk(s)]


def prepare(
    question: str, answer: str, documents: Sequence[str], chunk: Callable[[str], list[str]]
) -> Prepared:
    """Split texts into units; ``chunk`` is the encoder's (``Encoder.chunks``)."""
    doc_units: list[str] = []
    doc_of_unit: list[int] = []
    for i, doc in enumerate(documents):
        for u in units(doc, chunk):
            doc_units.append(u)
            doc_of_unit.append(i)
    return Prepared(
        question=question,
        answer=answer,
        documents=tuple(documents),
        answer_units=tuple(units(answer, chunk)),
        doc_units=tuple(doc_units),
        doc_of_unit=tuple(doc_of_unit),
    )


def numbers(text: str) -> set[str]:
    """Numbers in ``text``, canonical ("1,000" -> "1000", "two" -> "2")."""
    found = {n.replace(",", "").rstrip(".") for n in _NUMBER.findall(text)}
    words = {_NUMBER_WORDS[w] for w in re.findall(r"[a-z]+", normalize(text)) if w in _NUMBER_WORDS}
    return found | words


def capitalised(text: str) -> set[str]:
    """Lower-cased words written with a capital not at a sentence start (names, acronyms)."""
    out: set[str] = set()
    for sentence in sentences(text):
        for i, m in enumerate(_WORD.finditer(sentence)):
            word = m.group(0)
            if i > 0 and word[0].isupper():
                out.update(content_tokens(word))
    return out


def negations(text: str) -> int:
    return len(_NEGATION.findall(normalize(text)))


def _bigrams(tokens: Sequence[str]) -> set[tuple[str, str]]:
    return set(pairwise(tokens))


def _precision(tokens: Sequence[str], vocabulary: set[str] | frozenset[str]) -> float:
    return sum(t in vocabulary for t in tokens) / len(tokens) if tokens else 1.0


def _affix_antonym(word: str, vocabulary: set[str]) -> bool:
    for p in _NEG_PREFIXES:
        if word.startswith(p) and len(word) - len(p) >= 4 and word[len(p) :] in vocabulary:
            return True
        if p + word in vocabulary:
            return True
    return False


def featurize(prep: Prepared, vectors: Mapping[str, np.ndarray]) -> Features:
    """The feature row of a prepared record; ``vectors`` maps each unit to its unit vector."""
    if not prep.applicable:
        raise ValueError("record has no answer or no document text")
    doc_matrix = np.stack([vectors[u] for u in prep.doc_units])
    doc_tokens = [content_tokens(d) for d in prep.documents]
    doc_vocab = set().union(*doc_tokens)
    doc_bigrams = set().union(*(_bigrams(t) for t in doc_tokens))
    known = doc_vocab | set(content_tokens(prep.question))
    unit_vocab = [set(content_tokens(u)) for u in prep.doc_units]

    per_sentence: list[dict[str, Any]] = []
    for unit in prep.answer_units:
        sims = doc_matrix @ vectors[unit]
        tokens = content_tokens(unit)
        distinct = set(tokens)
        overlap = np.array(
            [len(distinct & u) / len(distinct) if distinct else 0.0 for u in unit_vocab]
        )
        # The match for the detail checks: close in meaning and in words, so that a
        # sentence about the same thing with a flipped detail is compared with its source.
        best = int(np.argmax(sims + overlap))
        # Neighbours in the same document resolve "it", "he", "the company".
        near = [
            j
            for j in (best - 1, best, best + 1)
            if 0 <= j < len(unit_vocab) and prep.doc_of_unit[j] == prep.doc_of_unit[best]
        ]
        local = set().union(*(unit_vocab[j] for j in near))
        bigrams = list(pairwise(tokens))
        flip = negations(unit) % 2 != negations(prep.doc_units[best]) % 2
        per_sentence.append(
            {
                "sentence": unit,
                "similarity": float(sims.max()),
                "match": prep.doc_units[best],
                "document": prep.doc_of_unit[best],
                "local": _precision(tokens, local),
                "bigram": (
                    sum(b in doc_bigrams for b in bigrams) / len(bigrams)
                    if bigrams
                    else _precision(tokens, doc_vocab)
                ),
                "novel": _precision(tokens, known) if tokens else 1.0,
                "negation_flip": flip and overlap[best] >= 0.5,
            }
        )

    sims = np.array([s["similarity"] for s in per_sentence])
    answer_tokens = content_tokens(prep.answer)
    distinct = set(answer_tokens)
    novel = sorted(distinct - known)
    doc_text = " ".join(prep.documents)
    novel_numbers = sorted(numbers(prep.answer) - numbers(doc_text))
    novel_entities = sorted(capitalised(prep.answer) - known)
    antonyms = sorted(w for w in novel if _affix_antonym(w, doc_vocab))
    values = np.array(
        [
            sims.min(),
            sims.mean(),
            float(np.mean(sims >= 0.5)),
            float(np.mean(sims >= 0.7)),
            _precision(answer_tokens, doc_vocab),
            len(novel) / len(distinct) if distinct else 0.0,
            max(1.0 - s["novel"] for s in per_sentence),
            min(s["local"] for s in per_sentence),
            float(np.mean([s["local"] for s in per_sentence])),
            min(s["bigram"] for s in per_sentence),
            float(np.mean([s["bigram"] for s in per_sentence])),
            min(len(novel_numbers), 3),
            min(len(novel_entities), 5),
            float(np.mean([s["negation_flip"] for s in per_sentence])),
            min(len(antonyms), 3),
        ],
        dtype=np.float64,
    )
    weakest = min(per_sentence, key=lambda s: s["similarity"])
    evidence = {
        "weakest_sentence": weakest["sentence"][:300],
        "weakest_match": weakest["match"][:300],
        "weakest_similarity": round(weakest["similarity"], 4),
        "weakest_document": weakest["document"],
        "novel_words": novel[:30],
        "novel_numbers": novel_numbers[:10],
        "novel_entities": novel_entities[:10],
        "negation_flips": [s["sentence"][:300] for s in per_sentence if s["negation_flip"]][:5],
        "affix_antonyms": antonyms[:10],
    }
    return Features(values=values, evidence=evidence)
