"""``injection/probe``: ragpulse's own prompt-injection model, shipped in the package.

No public injection classifier can be downloaded where ragpulse runs, so this
is a small logistic-regression probe (``models/weights/injection_probe.npz``,
model card beside it) over the shared MiniLM embedding plus the rule scanner's
verdict and a few lexical cues (:mod:`ragpulse.evaluators.models.injection_features`).
It catches paraphrased, persuasive, hypothetical and multilingual attacks the
rules miss, at the cost of one MiniLM pass per chunk (shared with, and cached
for, the other embedding metrics).

Every location (the question, each document) is chunked to fit the encoder; a
location's risk is its riskiest chunk, so one poisoned paragraph in a long
document is not averaged away. Where no injection rule fires at all, the risk is
scaled down so that only a near-certain call (``alone_threshold``) is flagged:
see :meth:`InjectionProbe.gated`. Findings have the same shape as
``injection/classifier``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import Field

from ragpulse.evaluators.injection_engine.findings import findings_result, locations
from ragpulse.evaluators.injection_engine.gate import ALONE_THRESHOLD, gated
from ragpulse.evaluators.models.loading import MINILM
from ragpulse.evaluators.models.probe_evaluator import ProbeEvaluator, ProbeOptions
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Direction, EvalResult, RagRecord

WEIGHTS = "injection_probe.npz"


class InjectionProbe(ProbeEvaluator):
    metric = "injection"
    method = "probe"
    # Opt-in: retrained without reserved data (v2), dev AUROC 0.770 < injection/rules 0.819;
    # with the rule-cue gate it still flags 7 of 184 texts of the held-out benign batch B
    # (bench/injection_benign.py, model card). On again when it holds ~0 there and beats the rules.
    default_enabled = False

    direction = Direction.LOWER_IS_BETTER

    class Options(ProbeOptions):
        threshold: float | None = Field(
            None, gt=0, lt=1, description="risk labelled 'injection'; unset: the trained one"
        )
        model: str = Field(MINILM, description="the sentence encoder the probe was trained on")
        alone_threshold: float = Field(
            ALONE_THRESHOLD,
            gt=0,
            le=1,
            description="risk at which a location with no rule cue (injection/rules risk 0) "
            "is flagged; 1: never without a cue",
        )

    options: Options
    _encoder: Any = None
    _probe: Any = None

    def load(self, context: PluginContext) -> None:
        super().load(context)
        from ragpulse.evaluators.models.encoder import shared_encoder
        from ragpulse.evaluators.models.injection_features import FEATURE_NAMES

        script = "training/train_injection_probe.py"
        self._probe = self.load_weights(WEIGHTS, FEATURE_NAMES, script)
        self._encoder = shared_encoder(self.options.model, context=context)

    def placement(self) -> tuple[str, str] | None:
        if self._encoder is None:
            return None
        return self._encoder.placement.device, self._encoder.placement.dtype

    def chunk_risks(self, texts: Sequence[str], documents: Sequence[bool]) -> list[float]:
        """Risk per text (its riskiest piece), embedding all pieces of all texts in one call."""
        from ragpulse.evaluators.models.injection_features import chunk_features, pieces

        owner: list[int] = []
        units: list[str] = []
        for i, text in enumerate(texts):
            parts = pieces(self._encoder, text)
            units += parts
            owner += [i] * len(parts)
        if not units:
            return []
        features = chunk_features(units, self._encoder.embed(units), [documents[i] for i in owner])
        risks = [0.0] * len(texts)
        for i, p in zip(owner, self._probe.predict(features).tolist(), strict=True):
            risks[i] = max(risks[i], float(p))
        return risks

    def gated(self, risk: float, text: str, document: bool) -> float:
        """``risk`` through the benign gate (:mod:`ragpulse.evaluators.injection_engine.gate`):
        where no rule fires, only ``alone_threshold`` crosses ``threshold``."""
        return gated(
            risk, text, document=document, threshold=self.threshold,
            alone=self.options.alone_threshold,
        )  # fmt: skip

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        places = [(ri, where, text) for ri, r in enumerate(records) for where, text in locations(r)]
        documents = [where != "question" for _, where, _ in places]
        risks = self.chunk_risks([text for _, _, text in places], documents)
        per_record: dict[int, list[tuple[str, float]]] = {}
        for (ri, where, text), risk, document in zip(places, risks, documents, strict=True):
            per_record.setdefault(ri, []).append((where, self.gated(risk, text, document)))
        version = self._probe.version
        return [
            findings_result(self, per_record.get(i, []), self.threshold, r, model=version)
            for i, r in enumerate(records)
        ]
