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

from pydantic import Field

from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.injection.findings import findings_result, locations
from ragpulse.evaluators.models.transformers_base import TransformersEvaluator, TransformersOptions
from ragpulse.record import Direction, EvalResult, RagRecord

_INJECTION_NAME = re.compile(r"inject|jailbreak|malicious|unsafe|attack", re.I)


class InjectionClassifier(TransformersEvaluator):
    metric = "injection"
    method = "classifier"
    direction = Direction.LOWER_IS_BETTER
    model_kind = "sequence-classifier"

    class Options(TransformersOptions):
        model: str = "protectai/deberta-v3-base-prompt-injection-v2"
        injection_labels: list[str] | None = Field(
            None, description="label names that mean injection (default: guessed from names)"
        )
        threshold: float = Field(0.5, gt=0, le=1, description="risk labelled 'injection'")
        batch_size: int = Field(16, ge=1, description="texts per forward pass")

    options: Options
    _positive: list[int]

    def loaded(self) -> None:
        id2label = {int(k): str(v) for k, v in self._model.config.id2label.items()}
        if self.options.injection_labels:
            wanted = self.options.injection_labels
            self._positive = [i for i, n in id2label.items() if n in wanted]
        else:
            self._positive = [i for i, n in id2label.items() if _INJECTION_NAME.search(n)]
            if not self._positive and len(id2label) == 2:
                self._positive = [1]  # LABEL_0 / LABEL_1 style: 1 is the positive class
        if not self._positive:
            raise ModelUnavailable(
                f"cannot tell which labels of {self.options.model} mean injection ({id2label}); "
                "set injection_labels in evaluation.options"
            )

    def _score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        places = [(ri, where, text) for ri, r in enumerate(records) for where, text in locations(r)]
        risks = self._risks([text for _, _, text in places])
        per_record: dict[int, list[tuple[str, float]]] = {}
        for (ri, where, _), risk in zip(places, risks, strict=True):
            per_record.setdefault(ri, []).append((where, risk))
        opts = self.options
        return [
            findings_result(self, per_record.get(i, []), opts.threshold, r, model=opts.model)
            for i, r in enumerate(records)
        ]

    def _risks(self, texts: list[str]) -> list[float]:
        import torch

        risks: list[float] = []
        for chunk in self.batches(texts):
            enc, owner = self.windows(list(chunk))
            with torch.inference_mode():
                probs = torch.softmax(self._model(**enc).logits.float(), -1)
            window_risk = probs[:, self._positive].sum(-1).tolist()
            risks.extend(self.best_window(owner, window_risk, len(chunk)))
        return risks
