"""Reference-based retrieval metrics: the retrieved list against a test-set row's gold contexts.

Definitions are trec_eval's with binary relevance, the ranking being the retrieved list
in order (rank 1 first). With R the number of distinct relevant items in the reference and
``rel(i)`` 1 when the document at rank i is relevant:

- ``recall@k`` (trec_eval ``recall_k``): relevant in the top k / R;
- ``mrr`` (``recip_rank``; Unitxt's context correctness): 1 / rank of the first relevant, else 0;
- ``map`` (``map``): sum of precision@i over the relevant ranks i, divided by R, so that
  relevant items never retrieved count as zeros;
- ``ndcg@10`` (``ndcg_cut_10``): sum over the top 10 of rel(i) / log2(i + 1), over the same
  sum for an ideal list holding all R relevant items first;
- ``context_precision`` (``set_P``): relevant retrieved / retrieved, rank-blind (the ranked
  views are ``map``, ``mrr`` and ``ndcg@10``).

Two ways to decide relevance, one method each:

- ``ids``: a document is relevant when its id is among ``reference.context_ids``; not
  applicable unless the reference has ids and at least one retrieved document carries one.
- ``content``: a document is relevant when its normalized text (NFKC, lower case,
  punctuation to spaces, whitespace collapsed) equals, contains, or is contained in
  (whole words) a normalized reference context: chunkers rarely cut gold passages the way
  the test set's author did. Applies whenever the reference has contexts.

Each relevant item counts once: a document is credited with the first reference item it
matches that no higher-ranked document already claimed, so a duplicate or a second chunk
of the same gold passage counts as not relevant (as a repeated docno would in trec_eval)
and recall never exceeds 1.

A row whose reference has gold contexts but whose retriever returned nothing scores 0 on
every metric (the retriever missed them all), not "not applicable".
"""

from __future__ import annotations

import math
import re
import unicodedata
from collections.abc import Callable, Sequence
from functools import lru_cache

from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.record import EvalResult, RagRecord

_PUNCT = re.compile(r"[^\w\s]+", re.UNICODE)


@lru_cache(maxsize=4096)
def normalize_passage(text: str) -> str:
    """Lower-cased words separated by single spaces: what content matching compares."""
    folded = unicodedata.normalize("NFKC", text).lower()
    return " ".join(_PUNCT.sub(" ", folded).split())


def content_matches(document: str, reference: str) -> bool:
    """Equal, or one contains the other on word boundaries (both already normalized)."""
    if not document or not reference:
        return False
    return f" {document} " in f" {reference} " or f" {reference} " in f" {document} "


def relevance_by_ids(doc_ids: Sequence[str | None], gold: Sequence[str]) -> list[int]:
    """0/1 per rank; a gold id counts at its first rank only."""
    wanted, out = set(gold), []
    for doc_id in doc_ids:
        hit = doc_id is not None and doc_id in wanted
        if doc_id is not None:
            wanted.discard(doc_id)
        out.append(int(hit))
    return out


def relevance_by_content(docs: Sequence[str], gold: Sequence[str]) -> tuple[list[int], list[int]]:
    """0/1 per rank, and the reference index each relevant rank claimed (greedy, in rank order)."""
    refs = [normalize_passage(g) for g in gold]
    unclaimed = [i for i, r in enumerate(refs) if r]
    rel, claimed = [], []
    for doc in docs:
        norm = normalize_passage(doc)
        match = next((i for i in unclaimed if content_matches(norm, refs[i])), None)
        if match is not None:
            unclaimed.remove(match)
            claimed.append(match)
        rel.append(int(match is not None))
    return rel, claimed


def recall_at(k: int) -> Callable[[list[int], int], float]:
    def recall(rel: list[int], n_relevant: int) -> float:
        return sum(rel[:k]) / n_relevant

    return recall


def reciprocal_rank(rel: list[int], n_relevant: int) -> float:
    return next((1.0 / (i + 1) for i, r in enumerate(rel) if r), 0.0)


def average_precision(rel: list[int], n_relevant: int) -> float:
    found, total = 0, 0.0
    for i, r in enumerate(rel):
        if r:
            found += 1
            total += found / (i + 1)
    return total / n_relevant


def ndcg_at(k: int) -> Callable[[list[int], int], float]:
    def ndcg(rel: list[int], n_relevant: int) -> float:
        dcg = sum(r / math.log2(i + 2) for i, r in enumerate(rel[:k]))
        ideal = sum(1.0 / math.log2(i + 2) for i in range(min(k, n_relevant)))
        return dcg / ideal

    return ndcg


def set_precision(rel: list[int], n_relevant: int) -> float:
    return sum(rel) / len(rel) if rel else 0.0


METRICS: dict[str, Callable[[list[int], int], float]] = {
    "recall@1": recall_at(1),
    "recall@3": recall_at(3),
    "recall@5": recall_at(5),
    "recall@10": recall_at(10),
    "mrr": reciprocal_rank,
    "map": average_precision,
    "ndcg@10": ndcg_at(10),
    "context_precision": set_precision,
}


class ReferenceRetrieval(Evaluator):
    """One registered name per metric and method; the subclasses below only name them."""

    tier = Tier.CHEAP
    requires_reference = True
    default_enabled = False

    def score(self, record: RagRecord) -> EvalResult:
        ref = record.reference
        docs = [d for _, d in record.retrieved()]  # an agent turn: its retrieval tools' results
        if self.method == "ids":
            gold = list(dict.fromkeys(ref.context_ids)) if ref else []
            if not gold:
                return self.not_applicable("no reference context ids")
            if docs and all(d.id is None for d in docs):
                return self.not_applicable("retrieved documents carry no ids")
            rel = relevance_by_ids([d.id for d in docs], gold)
            found = [d.id for d, r in zip(docs, rel, strict=True) if r]
            missing = [g for g in gold if g not in found]
        else:
            gold = [c for c in (ref.contexts if ref else []) if normalize_passage(c)]
            if not gold:
                return self.not_applicable("no reference contexts")
            rel, claimed = relevance_by_content([d.content for d in docs], gold)
            found = [str(i) for i in claimed]
            missing = [str(i) for i in range(len(gold)) if i not in claimed]
        score = METRICS[self.metric](rel, len(gold))
        ranks = [i + 1 for i, r in enumerate(rel) if r]
        return self.result(
            score,
            explanation=(
                f"{len(ranks)} of {len(gold)} reference contexts retrieved"
                + (f" at ranks {ranks}" if ranks else "")
                + f" among {len(docs)} documents"
            ),
            relevant_ranks=ranks,
            relevant_total=len(gold),
            retrieved=len(docs),
            found=found,  # ids, or indexes into reference.contexts for method content
            missing=missing[:50],
        )


# Names are metric/method as everywhere; `@` is an ordinary character in them.
class RecallAt1Ids(ReferenceRetrieval):
    metric, method = "recall@1", "ids"


class RecallAt3Ids(ReferenceRetrieval):
    metric, method = "recall@3", "ids"


class RecallAt5Ids(ReferenceRetrieval):
    metric, method = "recall@5", "ids"


class RecallAt10Ids(ReferenceRetrieval):
    metric, method = "recall@10", "ids"


class MrrIds(ReferenceRetrieval):
    metric, method = "mrr", "ids"


class MapIds(ReferenceRetrieval):
    metric, method = "map", "ids"


class NdcgAt10Ids(ReferenceRetrieval):
    metric, method = "ndcg@10", "ids"


class ContextPrecisionIds(ReferenceRetrieval):
    metric, method = "context_precision", "ids"


class RecallAt1Content(ReferenceRetrieval):
    metric, method = "recall@1", "content"


class RecallAt3Content(ReferenceRetrieval):
    metric, method = "recall@3", "content"


class RecallAt5Content(ReferenceRetrieval):
    metric, method = "recall@5", "content"


class RecallAt10Content(ReferenceRetrieval):
    metric, method = "recall@10", "content"


class MrrContent(ReferenceRetrieval):
    metric, method = "mrr", "content"


class MapContent(ReferenceRetrieval):
    metric, method = "map", "content"


class NdcgAt10Content(ReferenceRetrieval):
    metric, method = "ndcg@10", "content"


class ContextPrecisionContent(ReferenceRetrieval):
    metric, method = "context_precision", "content"


RETRIEVAL_EVALUATORS: tuple[type[ReferenceRetrieval], ...] = tuple(
    ReferenceRetrieval.__subclasses__()
)
