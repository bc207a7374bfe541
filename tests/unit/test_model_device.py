"""Where the model tier's models run: device and dtype selection, its errors, and what a
collector says about it.

No GPU runs these tests: torch's CUDA queries (``is_available``, ``device_count``,
``is_bf16_supported``, ...) are replaced by a fake device where a GPU is needed, since no
real one can run here; loading and scoring run for real on the CPU, in bf16 too.
"""

from __future__ import annotations

import logging
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from support.tiny_models import build_bert_cross_encoder

from ragpulse.collector.evaluate.pipeline import Pipeline
from ragpulse.collector.evaluate.sampling import SamplingPolicy
from ragpulse.config import EvaluationSettings, ModelTierSettings, Settings
from ragpulse.errors import ConfigError, ModelUnavailable
from ragpulse.evaluation import evaluate_records, load_evaluators_safely
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.context_relevance.cross_encoder import CrossEncoderRelevance
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.evaluators.models.onnx_backend import providers
from ragpulse.evaluators.models.placement import Placement, resolve_placement
from ragpulse.exporters.memory import InMemorySink
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, EvalResult, RagRecord
from ragpulse.telemetry import CollectorMetrics

torch = pytest.importorskip("torch", reason="the models extra is not installed")


def fake_gpus(
    monkeypatch: pytest.MonkeyPatch, count: int = 2, bf16: bool = True, name: str = "Fake T4"
) -> None:
    """torch sees ``count`` CUDA devices (a fake: no GPU runs here)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: bf16)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: name)


@pytest.mark.parametrize(
    ("device", "dtype", "gpus", "bf16", "expected"),
    [
        ("auto", "auto", 0, True, Placement("cpu", "fp32")),
        ("cpu", "auto", 2, True, Placement("cpu", "fp32")),
        ("cpu", "bf16", 0, True, Placement("cpu", "bf16")),
        ("auto", "auto", 2, True, Placement("cuda:0", "bf16")),
        ("auto", "auto", 2, False, Placement("cuda:0", "fp16")),
        ("cuda", "auto", 1, True, Placement("cuda:0", "bf16")),
        ("cuda:1", "fp32", 2, True, Placement("cuda:1", "fp32")),
        ("cuda:1", "fp16", 2, True, Placement("cuda:1", "fp16")),
    ],
)
def test_device_and_dtype_resolve(
    monkeypatch: pytest.MonkeyPatch,
    device: str,
    dtype: str,
    gpus: int,
    bf16: bool,
    expected: Placement,
) -> None:
    fake_gpus(monkeypatch, gpus, bf16)
    placement = resolve_placement(device, dtype)
    assert placement == expected
    assert placement.accelerator == expected.device.startswith("cuda")
    assert placement.max_batch_tokens(None) == (32768 if placement.accelerator else 4096)
    assert placement.max_batch_tokens(512) == 512


@pytest.mark.parametrize(
    ("device", "dtype", "gpus", "bf16", "says"),
    [
        ("cuda", "auto", 0, True, "sees no CUDA device"),
        ("cuda:0", "auto", 0, True, "set evaluation.model.device to cpu"),
        ("cuda:2", "auto", 2, True, "torch sees 2 CUDA device(s) (cuda:0 to cuda:1)"),
        ("cuda:0", "bf16", 1, False, "Fake T4) has no bf16: set it to fp16 or auto"),
    ],
)
def test_a_missing_device_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, device: str, dtype: str, gpus: int, bf16: bool, says: str
) -> None:
    fake_gpus(monkeypatch, gpus, bf16)
    with pytest.raises(ConfigError) as raised:
        resolve_placement(device, dtype)
    assert says in str(raised.value)


def test_mps_that_is_not_there_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.raises(ConfigError, match="no Apple GPU"):
        resolve_placement("mps", "auto")


def test_settings_refuse_an_unknown_device_or_dtype() -> None:
    for bad in ({"device": "gpu"}, {"device": "cuda:x"}, {"dtype": "int8"}):
        with pytest.raises(ValueError):
            ModelTierSettings(**bad)  # type: ignore[arg-type]
    assert ModelTierSettings(device="cuda:3").device == "cuda:3"


class Model(Evaluator):
    """A model-tier stand-in: what is tested is the collector's start."""

    metric, method = "stand_in", "model"
    tier = Tier.MODEL

    def score(self, record: RagRecord) -> EvalResult:
        return self.result(0.5)


def test_the_collector_refuses_to_start_on_a_missing_device(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake_gpus(monkeypatch, 0)
    settings = EvaluationSettings(model=ModelTierSettings(rate=1.0, device="cuda"))
    with pytest.raises(ConfigError, match="sees no CUDA device"):
        Pipeline([LexicalFaithfulness(), Model()], [InMemorySink()], CollectorMetrics(), settings)
    # No model-tier evaluator: the device is never looked at.
    Pipeline([LexicalFaithfulness()], [InMemorySink()], CollectorMetrics(), settings)


def test_the_rate_is_auto_on_a_gpu_and_a_tenth_on_the_cpu() -> None:
    on_cpu = SamplingPolicy(EvaluationSettings())
    on_cpu.placed(Placement("cpu", "fp32"))
    assert on_cpu.rates[Tier.MODEL] == 0.1 and on_cpu.auto is None
    on_gpu = SamplingPolicy(EvaluationSettings())
    on_gpu.placed(Placement("cuda:0", "bf16"))
    assert on_gpu.rates[Tier.MODEL] == "auto" and on_gpu.auto is not None
    fixed = SamplingPolicy(EvaluationSettings(model=ModelTierSettings(rate=0.3)))
    fixed.placed(Placement("cuda:0", "bf16"))
    assert fixed.rates[Tier.MODEL] == 0.3 and fixed.auto is None  # a fixed rate stays


def test_onnx_takes_the_cuda_provider_where_onnxruntime_has_it() -> None:
    # A stand-in for onnxruntime-gpu's module: only its provider list is read.
    gpu_build = SimpleNamespace(
        get_available_providers=lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"]
    )
    cpu_build = SimpleNamespace(get_available_providers=lambda: ["CPUExecutionProvider"])
    assert providers(Placement("cuda:1", "bf16"), gpu_build) == (
        [("CUDAExecutionProvider", {"device_id": 1}), "CPUExecutionProvider"],
        "cuda:1",
    )
    assert providers(Placement("cpu", "fp32"), gpu_build) == (["CPUExecutionProvider"], "cpu")
    with pytest.raises(ModelUnavailable, match="pip install onnxruntime-gpu"):
        providers(Placement("cuda:0", "fp16"), cpu_build)


@pytest.fixture(scope="module")
def reranker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_bert_cross_encoder(tmp_path_factory.mktemp("device") / "reranker")


RECORDS = [
    RagRecord(
        question="How much does the Pro plan cost?",
        documents=[Document(content="The Pro plan costs 6 dollars a month. " * n)],
        answer="6 dollars.",
    )
    for n in (1, 3, 9)
]


def scores_on(reranker: Path, dtype: str) -> tuple[list[float], PluginContext]:
    settings = Settings(evaluation=EvaluationSettings(model=ModelTierSettings(dtype=dtype)))
    context = PluginContext(settings)
    evaluators = load_evaluators_safely([CrossEncoderRelevance(model=str(reranker))], context)
    results = evaluate_records(RECORDS, evaluators)
    return [r[0].score or 0.0 for r in results], context


def test_bf16_runs_on_the_cpu_and_says_so(reranker: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="ragpulse.evaluation"):
        bf16, context = scores_on(reranker, "bf16")
    fp32, _ = scores_on(reranker, "fp32")
    assert max(abs(a - b) for a, b in zip(bf16, fp32, strict=True)) < 0.01
    labels = {"metric": "context_relevance", "method": "cross_encoder"}
    value = context.metrics.registry.get_sample_value
    assert value("ragpulse_model_device_info", {**labels, "device": "cpu", "dtype": "bf16"}) == 1
    assert "context_relevance/cross_encoder runs its model on cpu in bf16" in caplog.text


def test_a_model_that_does_not_fit_fails_at_load(
    reranker: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    [evaluator] = load_evaluators_safely([CrossEncoderRelevance(model=str(reranker))])
    classifier: Any = evaluator.classifier  # type: ignore[attr-defined]
    # What a full GPU raises (a fake: no GPU here), on a classifier placed on one.
    classifier.placement = Placement("cuda:0", "bf16")

    def full(inputs: object) -> None:
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(classifier, "logits", full)
    with pytest.raises(ModelUnavailable, match="lower max_batch_tokens"):
        classifier.check_fits(512)
