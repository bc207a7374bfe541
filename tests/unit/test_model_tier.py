"""Model tier: real MiniLM (shipped weights) and tiny random models built from a config
and loaded through the production code path (see tiny_models.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.tiny_models import build_deberta_classifier, build_t5

from ragpulse.cli import main
from ragpulse.errors import ModelUnavailable
from ragpulse.evaluation import evaluate_records, load_evaluators_safely
from ragpulse.evaluators.answer_relevance.embedding import EmbeddingAnswerRelevance
from ragpulse.evaluators.answer_reward.reward_model import RewardModel
from ragpulse.evaluators.context_relevance.embedding import EmbeddingContextRelevance
from ragpulse.evaluators.context_relevance.perplexity import QuestionLikelihood
from ragpulse.evaluators.faithfulness.embedding import EmbeddingFaithfulness
from ragpulse.evaluators.injection.classifier import InjectionClassifier
from ragpulse.evaluators.models.encoder import shared_encoder
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, RagRecord
from ragpulse.telemetry import CollectorMetrics

pytest.importorskip("torch", reason="the models extra is not installed")

PRICE = Document(content="The Pro plan costs 6 dollars per month and includes 100 GB of storage.")
BANANA = Document(content="Bananas are a good source of potassium and grow in the tropics.")
QUESTION = "How much does the Pro plan cost per month?"


def rec(answer: str = "The Pro plan costs 6 dollars a month.", docs=(PRICE, BANANA)) -> RagRecord:  # type: ignore[no-untyped-def]
    return RagRecord(question=QUESTION, documents=list(docs), answer=answer)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Path]]:
    root = tmp_path_factory.mktemp("tiny-models")
    yield {
        "t5": build_t5(root / "t5"),
        "reward": build_deberta_classifier(root / "reward", {0: "LABEL_0"}),
        "classifier": build_deberta_classifier(root / "clf", {0: "SAFE", 1: "INJECTION"}),
        "generic": build_deberta_classifier(root / "generic", {0: "LABEL_0", 1: "LABEL_1"}),
        "odd": build_deberta_classifier(root / "odd", {0: "cats", 1: "dogs", 2: "birds"}),
    }


CONTEXT = PluginContext()  # one per module: MiniLM loads once for these tests


def loaded(evaluator):  # type: ignore[no-untyped-def]
    evaluator.load(CONTEXT)
    return evaluator


# -- MiniLM, for real ---------------------------------------------------------------
def test_embedding_metrics_rank_sensibly() -> None:
    relevant, off_topic = loaded(EmbeddingContextRelevance()).evaluate([rec(), rec(docs=(BANANA,))])
    assert relevant.score is not None and off_topic.score is not None
    assert relevant.score > off_topic.score + 0.2
    assert relevant.details["per_document"][0] > relevant.details["per_document"][1]
    on, off = loaded(EmbeddingAnswerRelevance()).evaluate(
        [rec(), rec(answer="Penguins live in Antarctica.")]
    )
    assert on.score is not None and off.score is not None and on.score > off.score
    grounded, ungrounded = loaded(EmbeddingFaithfulness()).evaluate(
        [rec(), rec(answer="Penguins live in Antarctica. They eat krill.")]
    )
    assert grounded.score == 1.0 and ungrounded.score == 0.0
    assert ungrounded.details["matches"][0]["supported"] is False


def test_long_documents_are_chunked_not_cut() -> None:
    encoder = shared_encoder()
    filler = "Bananas grow in the tropics and are rich in potassium. " * 120
    long_doc = Document(content=filler + PRICE.content)  # the answer sits at the very end
    chunks = encoder.chunks(long_doc.content)
    assert len(chunks) > 3 and all(n <= encoder.max_tokens for n in encoder.token_counts(chunks))
    without = Document(content=filler)
    ev = loaded(EmbeddingContextRelevance())
    with_price, filler_only = ev.evaluate([rec(docs=(long_doc,)), rec(docs=(without,))])
    # Cut at the model's 256 tokens, both would look the same: the end is seen.
    assert (with_price.score or 0) > (filler_only.score or 0) + 0.05
    assert with_price.details["chunks"][0] == len(chunks)


def test_batch_equals_single() -> None:
    ev = loaded(EmbeddingFaithfulness())
    records = [rec(), rec(answer="Penguins live in Antarctica."), rec(docs=())]
    batch = ev.evaluate(records)
    singles = [ev.evaluate([r])[0] for r in records]
    assert [r.score for r in batch] == [r.score for r in singles]
    assert batch[2].label == "not_applicable"


# -- tiny models through the production loaders -----------------------------------------
def test_question_likelihood_windows_and_batching(tiny: dict[str, Path]) -> None:
    ev = loaded(QuestionLikelihood(model=str(tiny["t5"]), max_tokens=16, stride=4))
    long_doc = Document(content=" ".join([PRICE.content] * 8))  # many 16-token windows
    records = [rec(docs=(long_doc, BANANA)), rec(docs=(BANANA,)), RagRecord(question="")]
    results = ev.evaluate(records)
    first = results[0]
    assert first.score is not None and 0 < first.score <= 1
    assert len(first.details["per_document"]) == 2
    assert results[2].label == "not_applicable"
    single = ev.evaluate([records[0]])[0]
    assert single.score == pytest.approx(first.score, rel=1e-4)


def test_reward_model_score_and_truncation_flag(tiny: dict[str, Path]) -> None:
    ev = loaded(RewardModel(model=str(tiny["reward"]), max_tokens=40))
    short, long = ev.evaluate([rec(), rec(answer="The Pro plan costs 6 dollars. " * 20)])
    assert short.score is not None and 0 <= short.score <= 1 and short.details["truncated"] is False
    assert long.details["truncated"] is True


def test_injection_classifier_label_mapping_and_locations(tiny: dict[str, Path]) -> None:
    named = loaded(InjectionClassifier(model=str(tiny["classifier"]), max_tokens=16, stride=4))
    assert named._positive == [1]
    [result] = named.evaluate([rec()])
    assert set(result.details["per_location"]) == {"question", "document:0", "document:1"}
    assert result.label in ("injection", "benign") and 0 <= (result.score or 0) <= 1
    generic = loaded(InjectionClassifier(model=str(tiny["generic"])))
    assert generic._positive == [1]
    explicit = loaded(InjectionClassifier(model=str(tiny["odd"]), injection_labels=["dogs"]))
    assert explicit._positive == [1]
    with pytest.raises(ModelUnavailable, match="injection_labels"):
        InjectionClassifier(model=str(tiny["odd"])).load(PluginContext())


# -- failure modes ------------------------------------------------------------------
def test_unloadable_models_disable_the_evaluator_not_the_collector(tmp_path: Path) -> None:
    metrics = CollectorMetrics()
    broken = [
        QuestionLikelihood(model=str(tmp_path / "missing")),
        RewardModel(model="nobody/not-on-this-machine"),
        EmbeddingFaithfulness(model=str(tmp_path)),  # a directory without a model
    ]
    ready = load_evaluators_safely(
        [*broken, EmbeddingAnswerRelevance()], PluginContext(metrics=metrics)
    )
    assert [e.name for e in ready] == ["answer_relevance/embedding"]
    value = metrics.registry.get_sample_value
    assert (
        value("ragpulse_evaluator_available", {"metric": "answer_reward", "method": "reward_model"})
        == 0
    )
    assert (
        value("ragpulse_evaluator_available", {"metric": "answer_relevance", "method": "embedding"})
        == 1
    )
    assert evaluate_records([rec()], ready)[0][0].score is not None


def test_eval_cli_runs_configured_model_evaluators(
    tmp_path: Path, tiny: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "ragpulse.yaml"
    cfg.write_text(
        "evaluation:\n"
        "  evaluators: [faithfulness/embedding, answer_reward/reward_model, injection/classifier]\n"
        "  options:\n"
        f"    answer_reward/reward_model: {{model: {tiny['reward']}}}\n"
        f"    injection/classifier: {{model: {tmp_path / 'absent'}}}\n"
    )
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text(
        json.dumps({"question": QUESTION, "contexts": [PRICE.content], "answer": "6 dollars."})
    )
    # The classifier cannot load: the others run and every row is written, and the
    # exit status says a requested evaluator did not run (a CI job must not pass).
    assert main(["eval", str(src), "-o", str(out), "--config", str(cfg)]) == 1
    assert "could not load injection/classifier" in capsys.readouterr().err
    [row] = [json.loads(x) for x in out.read_text().splitlines()]
    assert {r["metric"] + "/" + r["method"] for r in row["results"]} == {
        "faithfulness/embedding",
        "answer_reward/reward_model",
    }


def test_onnx_backend_matches_torch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("onnxruntime", reason="the onnx extra is not installed")
    pytest.importorskip("onnxscript", reason="the onnx extra is not installed")
    import numpy as np

    from ragpulse.evaluators.models.encoder import Encoder

    monkeypatch.setenv("RAGPULSE_CACHE_DIR", str(tmp_path))
    torch_encoder, onnx_encoder = Encoder(backend="torch"), Encoder(backend="onnx")
    torch_encoder.load()
    onnx_encoder.load()  # exports once into the cache dir
    assert list((tmp_path / "onnx").glob("*.onnx"))
    texts = [PRICE.content, "short", "Bananas " * 100]
    assert np.abs(torch_encoder.embed(texts) - onnx_encoder.embed(texts)).max() < 1e-4
    assert onnx_encoder.token_counts(texts) == torch_encoder.token_counts(texts)
