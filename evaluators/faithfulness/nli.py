"""``faithfulness/nli``: sentence-pair classifiers decide whether the documents support the answer.

Runs the detectors teams already trust for this: HHEM-2.1-open (``model:
hhem-2.1-open``), MiniCheck (RoBERTa / DeBERTa), and any 2- or 3-way NLI
model (``entailment_label`` names the supporting label, by name or index).

How the answer is scored (SummaC-style zero-shot aggregation):

1. the answer is split into sentences (``claims: sentences``; ``answer``
   scores it whole, as HHEM was trained to);
2. each document is cut into premises: overlapping token windows that fit
   the model together with the sentence (``evidence: windows``), or runs of
   ``evidence_sentences`` consecutive document sentences (``evidence: sentences``);
3. a sentence's support is its best premise's P(entailment);
4. the answer's score is its weakest sentence's support (``aggregate: min``:
   one unsupported claim makes an unfaithful answer), or the mean
   (``aggregate: mean``, SummaC-ZS).

Label ``unfaithful`` below ``threshold`` (0.5, the line the alerts use).
``details.unsupported`` lists each sentence under it with its best evidence
(document, text, support). Instructions planted in documents are not
evidence (:mod:`ragpulse.evaluators.injection_engine.planted`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.injection_engine.planted import evidence_documents
from ragpulse.evaluators.models.detector import (
    DetectorEvaluator,
    DetectorOptions,
    Input,
    Label,
    Outputs,
)
from ragpulse.evaluators.text.analyses import sentences
from ragpulse.record import EvalResult, RagRecord

_SUPPORT = re.compile(r"^(?:entail\w*|support\w*|consistent|faithful|true|yes)$", re.I)


@dataclass(frozen=True)
class _Premise:
    document: int
    text: str


class NliFaithfulness(DetectorEvaluator):
    metric = "faithfulness"
    applies_to = ANSWERED
    method = "nli"

    class Options(DetectorOptions):
        model: str = "hhem-2.1-open"
        foundation: str | None = Field(
            None,
            description="HHEM only: the flan-t5 directory (or hub id) whose config and "
            "tokenizer it was built on (default: the one its config.json names)",
        )
        entailment_label: Label | None = Field(
            None, description="the label meaning 'supported', by name or index (default: guessed)"
        )
        claims: Literal["sentences", "answer"] = Field(
            "sentences", description="score each answer sentence, or the answer whole"
        )
        evidence: Literal["windows", "sentences"] = Field(
            "windows", description="premises: token windows of each document, or sentence runs"
        )
        evidence_sentences: int = Field(
            2, ge=1, description="evidence: sentences: consecutive document sentences per premise"
        )
        aggregate: Literal["min", "mean"] = Field(
            "min", description="answer score: its weakest sentence's support, or the mean"
        )
        threshold: float = Field(
            0.5, gt=0, lt=1, description="support under which a sentence (and answer) is flagged"
        )

    options: Options
    _positive: list[int]

    def extra_load_options(self) -> dict[str, str | None]:
        return {"foundation": self.options.foundation}

    def loaded(self) -> None:
        self._positive = self.label_indices(
            self.options.entailment_label, _SUPPORT, "supported", "entailment_label"
        )

    def plan(self, record: RagRecord) -> tuple[list[Input], Any] | EvalResult:
        planned = self._plan(record)
        if isinstance(planned, EvalResult):
            return planned
        claims, premises = planned
        prompt = self.classifier.prompt
        inputs: list[Input] = [
            # HHEM: one prompt holding both texts; the others: (premise, claim) pairs
            prompt.format(text1=p.text, text2=c) if prompt is not None else (p.text, c)
            for c in claims
            for p in premises
        ]
        return inputs, planned

    def finish(self, record: RagRecord, state: Any, outputs: Outputs) -> EvalResult:
        import numpy as np

        premises = state[1]
        support = self.probability(np.stack(outputs.logits), self._positive).tolist()
        best: dict[int, tuple[float, int]] = {}
        for k, p in enumerate(support):
            ci, pi = divmod(k, len(premises))
            if ci not in best or p > best[ci][0]:
                best[ci] = (float(p), pi)
        return self._result(state, best)

    def _plan(self, record: RagRecord) -> tuple[list[str], list[_Premise]] | EvalResult:
        if not record.documents:
            return self.not_applicable("no documents retrieved")
        answer = record.answer.strip()
        if not answer:
            return self.not_applicable("answer is empty")
        half = self.max_tokens // 2
        units = [answer] if self.options.claims == "answer" else sentences(answer)
        claims = [piece for unit in units for piece in self.split_long(unit, half)]
        overhead = self.classifier.specials(pair=self.classifier.prompt is None)
        if self.classifier.prompt is not None:
            overhead += sum(
                self.classifier.count([self.classifier.prompt.format(text1="", text2="")])
            )
        budget = self.room(
            self.max_tokens - overhead - max(self.classifier.count(claims)), "the documents"
        )
        premises = []
        for di, text in enumerate(evidence_documents(record)):
            if not text.strip():
                continue
            if self.options.evidence == "sentences":
                parts = sentences(text)
                size = self.options.evidence_sentences
                runs = [" ".join(parts[i : i + size]) for i in range(max(1, len(parts) - size + 1))]
                pieces = [p for run in runs for p in self.split_long(run, budget)]
            else:
                pieces = self.split_long(text, budget)
            premises += [_Premise(di, p) for p in pieces if p.strip()]
        if not premises:
            return self.not_applicable("no document text (after removing planted instructions)")
        return claims, premises

    def _result(
        self, plan: tuple[list[str], list[_Premise]], best: dict[int, tuple[float, int]]
    ) -> EvalResult:
        claims, premises = plan
        supports = [best[ci][0] for ci in range(len(claims))]
        score = min(supports) if self.options.aggregate == "min" else sum(supports) / len(supports)
        threshold = self.options.threshold
        weak = [ci for ci in range(len(claims)) if supports[ci] < threshold]
        unsupported = [
            {"sentence": claims[ci][:300], "support": round(supports[ci], 4),
             "document": premises[best[ci][1]].document,
             "evidence": premises[best[ci][1]].text[:300]}
            for ci in weak
        ]  # fmt: skip
        label = "faithful" if score >= threshold else "unfaithful"
        if weak:
            ci = min(weak, key=supports.__getitem__)
            explanation = (
                f"{len(weak)} of {len(claims)} sentence(s) unsupported; weakest "
                f"{claims[ci][:80]!r} (support {supports[ci]:.2f}, best evidence in document "
                f"{premises[best[ci][1]].document})"
            )
        else:
            explanation = f"all {len(claims)} sentence(s) supported (weakest {min(supports):.2f})"
        return self.result(
            score,
            label=label,
            explanation=explanation,
            unsupported=unsupported,
            per_sentence=[round(s, 4) for s in supports],
            premises=len(premises),
            threshold=threshold,
            model=self.model_name,
        )
