"""One queue per loaded model: passes bounded by tokens, grouped by length, shared by the
records of many batches and by every evaluator on the model; each row's output back in
its place; a failing pass costs its own rows only.

The queue-level tests run it over a model that is a plain function of the ids (each
row's logits: the sum of its ids and its length), so that every output can be checked;
the detector-level tests run tiny real models (tiny_models.py).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.tiny_models import CORPUS, build_bert_cross_encoder

from ragpulse.config import EvaluationSettings, ModelTierSettings, Settings
from ragpulse.evaluation import evaluate_records, load_evaluators_safely, start_evaluation
from ragpulse.evaluators.base import Evaluator
from ragpulse.evaluators.context_relevance.cross_encoder import CrossEncoderRelevance
from ragpulse.evaluators.faithfulness.nli import NliFaithfulness
from ragpulse.evaluators.injection.classifier import InjectionClassifier
from ragpulse.evaluators.models.forward_queue import ForwardQueue, QueueClosed
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, RagRecord

Passes = list[np.ndarray]


def summing(seen: Passes, fail: Callable[[np.ndarray], bool] = lambda ids: False):  # type: ignore[no-untyped-def]
    """A model: logits (sum of ids, length) per row; records each pass's ids."""

    def forward(inputs: dict[str, np.ndarray]) -> np.ndarray:
        ids, mask = inputs["input_ids"], inputs["attention_mask"]
        if fail(ids):
            raise RuntimeError(f"pass of {len(ids)} rows failed")
        seen.append(ids.copy())
        return np.stack([(ids * mask).sum(1), mask.sum(1)], axis=1).astype(np.float32)

    return forward


def queue(forward: Any, max_batch_tokens: int = 64, token_head: bool = False) -> ForwardQueue:
    return ForwardQueue(
        forward,
        pad_id=0,
        inputs=["input_ids", "attention_mask"],
        token_head=token_head,
        max_batch_tokens=max_batch_tokens,
        name="test",
    )


def rows_of(lengths: list[int], start: int = 1) -> list[list[int]]:
    return [[start + i] * n for i, n in enumerate(lengths)]


def test_rows_of_many_requests_share_passes_bounded_by_tokens_and_come_back_in_place() -> None:
    seen: Passes = []
    q = queue(summing(seen), max_batch_tokens=64)
    gate = q.gate = threading.Event()  # hold the runner until every request is queued
    lengths = [[3, 30, 7, 12], [5, 5, 31, 2, 16], [9], [20, 1, 1, 8]]
    requests = [
        q.submit(rows_of(ls, start=10 * k), max_rows=None if k else 3)
        for k, ls in enumerate(lengths)
    ]
    gate.set()
    for request, ls in zip(requests, lengths, strict=True):
        assert request.wait(10)
        assert request.errors == [None] * len(ls)
        expected = [[row[0] * len(row), len(row)] for row in request.ids]
        assert [o.tolist() for o in request.outputs] == expected  # type: ignore[union-attr]
    assert all(ids.shape[0] * ids.shape[1] <= 64 or ids.shape[0] == 1 for ids in seen)
    firsts = [{int(x) // 10 for x in ids[:, 0]} for ids in seen]
    assert any(len(owners) > 1 for owners in firsts)  # a pass held rows of several requests
    # A pass holding a row of request 0 (max_rows 3) has at most 3 rows.
    assert all(len(ids) <= 3 for ids, owners in zip(seen, firsts, strict=True) if 0 in owners)
    assert q.waiting_tokens == 0 and q.rows_run == sum(map(len, lengths))
    padded = sum(ids.size for ids in seen)
    assert padded / sum(map(sum, lengths)) < 1.5  # grouped by length: little padding


def test_priority_rows_run_first() -> None:
    seen: Passes = []
    q = queue(summing(seen), max_batch_tokens=8)
    gate = q.gate = threading.Event()
    later = q.submit(rows_of([4, 4, 4], start=1))
    first = q.submit(rows_of([4], start=7), priority=True)
    gate.set()
    assert later.wait(10) and first.wait(10)
    assert int(seen[0][0, 0]) == 7


def test_a_token_head_gets_each_rows_own_tokens() -> None:
    def per_token(inputs: dict[str, np.ndarray]) -> np.ndarray:
        return np.repeat(inputs["input_ids"][..., None], 2, axis=-1).astype(np.float32)

    q = queue(per_token, token_head=True)
    rows = q.submit([[1, 2, 3], [4], [5, 6]])
    assert rows.wait(10)
    assert [o.shape for o in rows.outputs] == [(3, 2), (1, 2), (2, 2)]  # type: ignore[union-attr]
    assert rows.outputs[2][:, 0].tolist() == [5, 6]  # type: ignore[index]


def test_a_failing_pass_costs_its_rows_only() -> None:
    seen: Passes = []
    q = queue(summing(seen, fail=lambda ids: bool((ids == 99).any())), max_batch_tokens=8)
    gate = q.gate = threading.Event()
    good = q.submit([[1, 1], [2, 2]])
    mixed = q.submit([[99, 99, 99, 99, 99, 99], [3]])
    gate.set()
    assert good.wait(10) and mixed.wait(10)
    assert good.errors == [None, None]
    assert isinstance(mixed.errors[0], RuntimeError) and mixed.outputs[0] is None
    assert mixed.errors[1] is None and mixed.outputs[1].tolist() == [3, 1]  # type: ignore[union-attr]


def test_a_pass_out_of_memory_is_run_in_halves() -> None:
    def small_device(inputs: dict[str, np.ndarray]) -> np.ndarray:
        if len(inputs["input_ids"]) > 2:
            raise RuntimeError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return summing([])(inputs)  # type: ignore[no-any-return]

    q = queue(small_device, max_batch_tokens=1024)
    rows = q.submit(rows_of([5, 5, 5, 5, 5]))
    assert rows.wait(10) and rows.errors == [None] * 5
    assert [o.tolist() for o in rows.outputs] == [[5 * (i + 1), 5] for i in range(5)]  # type: ignore[union-attr]


def test_closing_fails_what_has_not_run() -> None:
    q = queue(summing([]))
    q.gate = threading.Event()  # never opened: nothing runs
    rows = q.submit(rows_of([3, 3]))
    q.close()
    assert rows.wait(10)
    assert all(isinstance(e, QueueClosed) for e in rows.errors)
    after = q.submit(rows_of([2]))
    assert after.wait(10) and isinstance(after.errors[0], QueueClosed)


# -- the detectors, on a tiny real model ------------------------------------------------


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch", reason="the models extra is not installed")
    return build_bert_cross_encoder(tmp_path_factory.mktemp("queue") / "reranker")


LONG = " ".join(CORPUS * 4)  # longer than the tiny model's 64 positions: windows
QUESTION = "How much does the Pro plan cost?"
RECORDS = [
    RagRecord(question=QUESTION, documents=[Document(content=LONG)], answer=CORPUS[0]),
    RagRecord(
        question=QUESTION,
        documents=[Document(content=c) for c in CORPUS[:3]],
        answer=f"{CORPUS[0]} {CORPUS[1]}",
    ),
    RagRecord(question=QUESTION, documents=[Document(content=CORPUS[4])], answer="6 dollars."),
    RagRecord(question=QUESTION, documents=[], answer="No documents."),
    RagRecord(
        question="What is offline mode?",
        documents=[Document(content=LONG[:120]), Document(content=CORPUS[1])],
        answer=CORPUS[1],
    ),
]


def three_on_one_model(reranker: Path, max_batch_tokens: int) -> tuple[list[Evaluator], Any]:
    model = ModelTierSettings(max_batch_tokens=max_batch_tokens)
    context = PluginContext(Settings(evaluation=EvaluationSettings(model=model)))
    chosen = [
        CrossEncoderRelevance(model=str(reranker)),  # (question, window) pairs
        NliFaithfulness(model=str(reranker)),  # (premise, sentence) pairs
        InjectionClassifier(model=str(reranker)),  # texts, windowed
    ]
    return load_evaluators_safely(chosen, context), context


def test_records_of_several_evaluators_on_one_model_keep_their_results(reranker: Path) -> None:
    evaluators, _ = three_on_one_model(reranker, max_batch_tokens=64)
    queues = {id(e.classifier.queue) for e in evaluators}  # type: ignore[attr-defined]
    assert len(evaluators) == 3 and len(queues) == 1  # one model, one queue
    together = start_evaluation(RECORDS, evaluators).results()
    alone_evaluators, _ = three_on_one_model(reranker, max_batch_tokens=100_000)
    for record, results in zip(RECORDS, together, strict=True):
        [alone] = evaluate_records([record], alone_evaluators)
        assert [r.name for r in results] == [r.name for r in alone]
        for mine, its in zip(results, alone, strict=True):
            assert mine.label == its.label and mine.error is None
            assert mine.score == pytest.approx(its.score, abs=1e-4)
            for key in ("windows", "per_document", "per_sentence", "premises"):
                assert mine.details.get(key) == pytest.approx(its.details.get(key), abs=1e-4)
    assert together[0][0].details["windows"] > 1  # the long document was windowed
    assert together[3][0].label == "not_applicable"


def test_a_model_failing_on_one_pass_costs_that_pass_only(reranker: Path) -> None:
    evaluator = three_on_one_model(reranker, max_batch_tokens=64)[0][0]  # the cross-encoder
    q = evaluator.classifier.queue  # type: ignore[attr-defined]
    run = q._forward

    def fails_on_long_rows(inputs: dict[str, np.ndarray]) -> np.ndarray:
        if inputs["input_ids"].shape[1] > 40:  # only the long document's windows are that long
            raise RuntimeError("device error")
        return run(inputs)  # type: ignore[no-any-return]

    q._forward = fails_on_long_rows
    short = [RECORDS[2], RECORDS[2].model_copy(update={"question": "What is offline mode?"})]
    results = evaluator.evaluate([RECORDS[0], *short])
    assert results[0].label == "error" and "device error" in (results[0].error or "")
    assert all(r.error is None and r.score is not None for r in results[1:])
