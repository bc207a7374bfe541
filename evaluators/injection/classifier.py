"""``injection/classifier``: a Hugging Face prompt-injection classifier over the question
and every document (Prompt Guard 2, ProtectAI's DeBERTa-v3, or any other).

``model: prompt-guard-2-22m`` (or ``prompt-guard-2-86m``,
``protectai-deberta-v3-base-v2``) picks a preset with its label map; any other
model names its injection labels in ``injection_labels``, or they are guessed
(names mentioning injection, jailbreak, malicious; label 1 of a two-label model
with generic names). Every location is cut into overlapping windows that fit
the model (``max_tokens``, 512: Prompt Guard's own chunking advice); a
location's risk is its riskiest window, so one poisoned paragraph in a long
document is not averaged away.

The benign gate (``alone_threshold``, :mod:`ragpulse.evaluators.injection_engine.gate`)
is the injection probe's: where no injection rule fires on a location, only a
near-certain call is flagged. Published classifiers flag 13-43% of benign
prompts full of trigger words; the gate is what keeps their false alarms down.
``alone_threshold`` equal to ``threshold`` turns it off (1: never flagged without a
rule cue). Findings have the shape of ``injection/rules``.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field

from ragpulse.evaluators.injection_engine.findings import findings_result, locations
from ragpulse.evaluators.injection_engine.gate import ALONE_THRESHOLD, gated
from ragpulse.evaluators.models.detector import (
    DetectorEvaluator,
    DetectorOptions,
    Input,
    Label,
    Outputs,
)
from ragpulse.record import Direction, EvalResult, RagRecord

_INJECTION_NAME = re.compile(r"inject|jailbreak|malicious|unsafe|attack", re.I)


class InjectionClassifier(DetectorEvaluator):
    metric = "injection"
    method = "classifier"
    direction = Direction.LOWER_IS_BETTER

    class Options(DetectorOptions):
        model: str = "protectai-deberta-v3-base-v2"
        injection_labels: list[Label] | None = Field(
            None, description="label names (or indices) that mean injection (default: the "
            "preset's, else guessed from the names)"
        )  # fmt: skip
        threshold: float = Field(0.5, gt=0, le=1, description="risk labelled 'injection'")
        alone_threshold: float = Field(
            ALONE_THRESHOLD,
            gt=0,
            le=1,
            description="risk at which a location with no rule cue (injection/rules risk 0) is "
            "flagged; 1: never without a cue; equal to threshold: no gate",
        )

    options: Options
    _positive: list[int]

    def loaded(self) -> None:
        self._positive = self.label_indices(
            self.options.injection_labels, _INJECTION_NAME, "injection", "injection_labels"
        )

    def plan(self, record: RagRecord) -> tuple[list[Input], Any] | EvalResult:
        places = list(locations(record))
        budget = self.max_tokens - self.classifier.specials(pair=False)
        inputs: list[Input] = []
        owners: list[int] = []  # the location of each window
        for i, (_, text) in enumerate(places):
            for piece in self.split_long(text, budget):
                inputs.append(piece)
                owners.append(i)
        return inputs, (places, owners)

    def finish(self, record: RagRecord, state: Any, outputs: Outputs) -> EvalResult:
        places, owners = state
        risks = [0.0] * len(places)
        if outputs.logits:
            import numpy as np

            probs = self.probability(np.stack(outputs.logits), self._positive).tolist()
            for i, p in zip(owners, probs, strict=True):
                risks[i] = max(risks[i], float(p))  # a location's riskiest window
        opts = self.options
        found = [
            (where, gated(risk, text, document=where != "question", threshold=opts.threshold,
                          alone=opts.alone_threshold))
            for (where, text), risk in zip(places, risks, strict=True)
        ]  # fmt: skip
        return findings_result(self, found, opts.threshold, record, model=opts.model)
