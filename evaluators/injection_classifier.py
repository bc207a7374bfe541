"""``injection/classifier``: a Hugging Face sequence-classification model over the
question and every document (e.g. a DeBERTa-v3 prompt-injection model or Prompt Guard).

Which labels mean "injection" is configurable (``injection_labels``); by
default any label whose name mentions injection, jailbreak or malicious, or
label 1 of a two-label model with generic names. Texts longer than the
model's window are split into overlapping windows; a location's risk is its
riskiest window. Findings use the same shape as ``injection/rules``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.models.loading import missing_extra, sequence_classifier
from ragpulse.record import EvalResult, RagRecord

_INJECTION_NAME = re.compile(r"inject|jailbreak|malicious|unsafe|attack", re.I)


def locations(record: RagRecord) -> list[tuple[str, str]]:
    """(where, text) for the question and each document, as ``injection/rules`` reports them."""
    out = [("question", record.question)] if record.question.strip() else []
    out += [
        (f"document:{i}", d.content) for i, d in enumerate(record.documents) if d.content.strip()
    ]
    return out


def findings_result(
    evaluator: Evaluator, risks: list[tuple[str, float]], threshold: float, **details: Any
) -> EvalResult:
    """The result shared by model-based injection detectors: max risk over locations."""
    if not risks:
        return evaluator.not_applicable("no question or document text")
    where, top = max(risks, key=lambda x: x[1])
    flagged = [{"where": w, "risk": round(r, 4)} for w, r in risks if r >= threshold]
    label = "injection" if top >= threshold else "benign"
    explanation = (
        f"{', '.join(f['where'] for f in flagged)} classified as injection (risk {top:.2f})"
        if flagged
        else f"no location above {threshold} (highest {where}: {top:.2f})"
    )
    return evaluator.result(
        top,
        label=label,
        explanation=explanation,
        findings=flagged,
        per_location={w: round(r, 4) for w, r in risks},
        threshold=threshold,
        **details,
    )


class InjectionClassifier(Evaluator):
    metric = "injection"
    method = "classifier"
    tier = Tier.MODEL
    default_enabled = False

    def __init__(
        self,
        model: str = "protectai/deberta-v3-base-prompt-injection-v2",
        injection_labels: list[str] | None = None,
        threshold: float = 0.5,
        max_tokens: int = 512,
        stride: int = 64,
        batch_size: int = 16,
    ) -> None:
        self.model = model
        self.injection_labels = injection_labels
        self.threshold = threshold
        self.max_tokens = max_tokens
        self.stride = stride
        self.batch_size = batch_size
        self._tokenizer: Any = None
        self._model: Any = None
        self._positive: list[int] = []

    @classmethod
    def missing(cls) -> str | None:
        return missing_extra(("torch", "transformers"))

    def load(self) -> None:
        self._tokenizer, self._model = sequence_classifier(self.model)
        id2label = {int(k): str(v) for k, v in self._model.config.id2label.items()}
        if self.injection_labels:
            self._positive = [i for i, n in id2label.items() if n in self.injection_labels]
        else:
            self._positive = [i for i, n in id2label.items() if _INJECTION_NAME.search(n)]
            if not self._positive and len(id2label) == 2:
                self._positive = [1]  # LABEL_0 / LABEL_1 style: 1 is the positive class
        if not self._positive:
            raise ModelUnavailable(
                f"cannot tell which labels of {self.model} mean injection ({id2label}); "
                "set injection_labels in evaluation.options"
            )

    def _score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        places = [(ri, where, text) for ri, r in enumerate(records) for where, text in locations(r)]
        risks = self._risks([text for _, _, text in places])
        per_record: dict[int, list[tuple[str, float]]] = {}
        for (ri, where, _), risk in zip(places, risks, strict=True):
            per_record.setdefault(ri, []).append((where, risk))
        return [
            findings_result(self, per_record.get(i, []), self.threshold, model=self.model)
            for i in range(len(records))
        ]

    def _risks(self, texts: list[str]) -> list[float]:
        import torch

        risks = [0.0] * len(texts)
        for start in range(0, len(texts), self.batch_size):
            chunk = texts[start : start + self.batch_size]
            enc = self._tokenizer(
                chunk,
                truncation=True,
                max_length=self.max_tokens,
                stride=self.stride,
                return_overflowing_tokens=True,
                padding=True,
                return_tensors="pt",
            )
            owner = enc.pop("overflow_to_sample_mapping").tolist()
            with torch.inference_mode():
                probs = torch.softmax(self._model(**enc).logits.float(), -1)
            window_risk = probs[:, self._positive].sum(-1).tolist()
            for window, i in enumerate(owner):
                risks[start + i] = max(risks[start + i], window_risk[window])
        return risks
