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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import Field

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.injection_engine.planted import evidence_documents
from ragpulse.evaluators.models.detector import DetectorEvaluator, DetectorOptions, Label
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

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        plans = [self._plan(r) for r in records]
        ready = {ri: plan for ri, plan in enumerate(plans) if not isinstance(plan, EvalResult)}
        pairs = [
            (ri, ci, pi)
            for ri, (claims, premises) in ready.items()
            for ci in range(len(claims))
            for pi in range(len(premises))
        ]
        texts = [(ready[ri][1][pi].text, ready[ri][0][ci]) for ri, ci, pi in pairs]
        best: dict[tuple[int, int], tuple[float, int]] = {}
        for (ri, ci, pi), p in zip(pairs, self._support(texts), strict=True):
            if (ri, ci) not in best or p > best[(ri, ci)][0]:
                best[(ri, ci)] = (p, pi)
        return [
            plan if isinstance(plan, EvalResult) else self._result(ri, plan, best)
            for ri, plan in enumerate(plans)
        ]

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

    def _support(self, pairs: list[tuple[str, str]]) -> list[float]:
        """P(supported) of each (premise, claim)."""
        out: list[float] = []
        prompt = self.classifier.prompt
        for chunk in self.batches(pairs):
            if prompt is not None:  # HHEM: one prompt holding both texts
                enc = self.classifier.encode([prompt.format(text1=p, text2=c) for p, c in chunk])
            else:
                enc = self.classifier.encode([p for p, _ in chunk], [c for _, c in chunk])
            logits = self.classifier.logits(enc.inputs)
            out.extend(float(x) for x in self.probability(logits, self._positive))
        return out

    def _result(
        self,
        ri: int,
        plan: tuple[list[str], list[_Premise]],
        best: dict[tuple[int, int], tuple[float, int]],
    ) -> EvalResult:
        claims, premises = plan
        supports = [best[(ri, ci)][0] for ci in range(len(claims))]
        score = min(supports) if self.options.aggregate == "min" else sum(supports) / len(supports)
        threshold = self.options.threshold
        weak = [ci for ci in range(len(claims)) if supports[ci] < threshold]
        unsupported = [
            {"sentence": claims[ci][:300], "support": round(supports[ci], 4),
             "document": premises[best[(ri, ci)][1]].document,
             "evidence": premises[best[(ri, ci)][1]].text[:300]}
            for ci in weak
        ]  # fmt: skip
        label = "faithful" if score >= threshold else "unfaithful"
        if weak:
            ci = min(weak, key=supports.__getitem__)
            explanation = (
                f"{len(weak)} of {len(claims)} sentence(s) unsupported; weakest "
                f"{claims[ci][:80]!r} (support {supports[ci]:.2f}, best evidence in document "
                f"{premises[best[(ri, ci)][1]].document})"
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
