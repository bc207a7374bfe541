"""Reference-based retrieval metrics: equal to trec_eval's (via pytrec_eval) on random rankings."""

from __future__ import annotations

import importlib
import random
import tomllib
from pathlib import Path

import pytest
import pytrec_eval

from ragpulse.evaluators.retrieval_reference import (
    METRICS,
    RETRIEVAL_EVALUATORS,
    ContextPrecisionContent,
    MapIds,
    MrrContent,
    MrrIds,
    NdcgAt10Ids,
    RecallAt1Content,
    RecallAt3Ids,
    RecallAt5Content,
    RecallAt5Ids,
    normalize_passage,
)
from ragpulse.record import Document, RagRecord, Reference

# Our metric -> trec_eval's measure name in pytrec_eval's output.
TREC = {
    "recall@1": "recall_1",
    "recall@3": "recall_3",
    "recall@5": "recall_5",
    "recall@10": "recall_10",
    "mrr": "recip_rank",
    "map": "map",
    "ndcg@10": "ndcg_cut_10",
    "context_precision": "set_P",
}


def ranked(ids: list[str], gold: list[str]) -> RagRecord:
    return RagRecord(
        question="q",
        documents=[Document(id=i, content=f"text of {i}") for i in ids],
        reference=Reference(context_ids=gold),
    )


def random_queries(n: int, seed: int) -> list[tuple[list[str], list[str]]]:
    """(ranking, relevant ids): 0-25 retrieved of a 40-doc pool, 1-8 relevant, some unretrieved."""
    rng = random.Random(seed)
    pool = [f"d{i}" for i in range(40)]
    out = []
    for _ in range(n):
        ranking = rng.sample(pool, rng.randint(1, 25))
        gold = rng.sample(pool, rng.randint(1, 8))
        if rng.random() < 0.5:  # make hits likely in half the queries
            gold[: rng.randint(1, len(gold))] = rng.sample(ranking, min(len(ranking), len(gold)))
            gold = list(dict.fromkeys(gold))
        out.append((ranking, gold))
    return out


def test_every_metric_equals_trec_eval_on_random_rankings() -> None:
    queries = random_queries(500, seed=13)
    qrels = {f"q{n}": {d: 1 for d in gold} for n, (_, gold) in enumerate(queries)}
    # Strictly decreasing scores by list position: trec_eval sorts by score and would break
    # ties by docno, not by our list order.
    run = {
        f"q{n}": {d: float(len(ranking) - i) for i, d in enumerate(ranking)}
        for n, (ranking, _) in enumerate(queries)
    }
    trec = pytrec_eval.RelevanceEvaluator(qrels, set(TREC.values())).evaluate(run)
    evaluators = {cls.metric: cls() for cls in RETRIEVAL_EVALUATORS if cls.method == "ids"}
    assert set(evaluators) == set(TREC) == set(METRICS)
    records = [ranked(ranking, gold) for ranking, gold in queries]
    compared = 0
    for metric, ev in evaluators.items():
        for n, result in enumerate(ev.evaluate(records)):
            expected = trec[f"q{n}"][TREC[metric]]
            assert result.score == pytest.approx(expected, abs=1e-9), (metric, queries[n])
            compared += 1
    assert compared == 500 * len(TREC)


def test_content_method_agrees_with_ids_when_texts_are_the_gold_passages() -> None:
    """The same rankings told by text instead of ids give the same numbers."""
    for ranking, gold in random_queries(100, seed=7):
        by_ids = ranked(ranking, gold)
        by_text = RagRecord(
            question="q",
            documents=[Document(content=f"Passage {d}: about {d}.") for d in ranking],
            reference=Reference(contexts=[f"passage {d} about {d}" for d in gold]),
        )
        for ids_cls in RETRIEVAL_EVALUATORS:
            if ids_cls.method != "ids":
                continue
            [content_cls] = [
                c
                for c in RETRIEVAL_EVALUATORS
                if c.metric == ids_cls.metric and c.method == "content"
            ]
            [a] = ids_cls().evaluate([by_ids])
            [b] = content_cls().evaluate([by_text])
            assert a.score == pytest.approx(b.score, abs=1e-12), ids_cls.metric


def test_worked_example_with_details() -> None:
    record = ranked(["x", "a", "y", "b"], ["a", "b", "c"])
    [mrr] = MrrIds().evaluate([record])
    assert mrr.score == 0.5 and (mrr.metric, mrr.method) == ("mrr", "ids")
    assert mrr.details["relevant_ranks"] == [2, 4]
    assert mrr.details["found"] == ["a", "b"] and mrr.details["missing"] == ["c"]
    [ap] = MapIds().evaluate([record])
    assert ap.score == pytest.approx((1 / 2 + 2 / 4) / 3)  # c, never retrieved, still counts
    [r3] = RecallAt3Ids().evaluate([record])
    assert r3.score == pytest.approx(1 / 3)


def test_duplicates_count_once() -> None:
    [r] = RecallAt5Ids().evaluate([ranked(["a", "a", "a"], ["a", "b"])])
    assert r.score == 0.5 and r.details["relevant_ranks"] == [1]
    # Two chunks of one gold passage: only the first is credited.
    record = RagRecord(
        documents=[Document(content="Paris is the capital"), Document(content="of France.")],
        reference=Reference(contexts=["Paris is the capital of France."]),
    )
    [p] = ContextPrecisionContent().evaluate([record])
    assert p.score == 0.5


def test_content_matching_normalizes_and_uses_containment_on_word_boundaries() -> None:
    assert normalize_passage("  The  Eiffel-Tower,\nPARIS! ") == "the eiffel tower paris"
    gold = "The Eiffel Tower was completed in 1889."
    cases = {
        "the eiffel tower WAS completed in 1889": 1.0,  # equal after normalization
        "Paris landmarks. The Eiffel Tower was completed in 1889. It is tall.": 1.0,  # contains
        "completed in 1889": 1.0,  # contained in the gold passage
        "pleted in 18": 0.0,  # not on word boundaries
        "Bananas are yellow.": 0.0,
    }
    for text, expected in cases.items():
        record = RagRecord(documents=[Document(content=text)], reference=Reference(contexts=[gold]))
        [r] = RecallAt1Content().evaluate([record])
        assert r.score == expected, text


def test_not_applicable_and_zero() -> None:
    no_ref = RagRecord(documents=[Document(id="a", content="x")])
    no_ids = RagRecord(
        documents=[Document(content="x")], reference=Reference(context_ids=["a"], contexts=["x"])
    )
    refuse_row = RagRecord(documents=[Document(id="a")], reference=Reference(answers=["n/a"]))
    for record, why in [
        (no_ref, "no reference context ids"),
        (no_ids, "carry no ids"),
        (refuse_row, "no reference context ids"),
    ]:
        [r] = MrrIds().evaluate([record])
        assert r.label == "not_applicable" and why in (r.explanation or ""), why
    [r] = MrrContent().evaluate([no_ref])
    assert r.label == "not_applicable" and "no reference contexts" in (r.explanation or "")
    # Gold exists but nothing was retrieved: the retriever missed everything, a 0.
    empty = RagRecord(reference=Reference(context_ids=["a"], contexts=["x"]))
    for cls in RETRIEVAL_EVALUATORS:
        [r] = cls().evaluate([empty])
        assert r.score == 0.0 and r.error is None, cls.name
    [r] = NdcgAt10Ids().evaluate([no_ids.model_copy(update={"documents": []})])
    assert r.score == 0.0
    [r] = RecallAt5Content().evaluate([no_ids])
    assert r.score == 1.0


def test_reference_only_and_off_by_default() -> None:
    for cls in RETRIEVAL_EVALUATORS:
        assert cls.requires_reference and not cls.default_enabled, cls.name
    assert len({cls.name for cls in RETRIEVAL_EVALUATORS}) == 16


def test_registration_lines_name_their_classes() -> None:
    """Each pyproject line loads a class of that name (the editable install may be stale)."""
    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    group = pyproject["project"]["entry-points"]["ragpulse.evaluators"]
    mine = {cls.name for cls in RETRIEVAL_EVALUATORS} | {
        "answer_correctness/token_recall",
        "answer_correctness/token_f1",
    }
    assert mine <= set(group)
    for name in mine:
        module, attr = group[name].split(":")
        assert getattr(importlib.import_module(module), attr).name == name
