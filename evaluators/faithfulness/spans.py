"""``faithfulness/spans``: token classifiers that mark the hallucinated words of an answer.

LettuceDetect-style detectors (``model: lettucedetect-base``; any
``AutoModelForTokenClassification`` whose ``hallucinated_label`` marks
unsupported answer tokens) read the documents, as the RAGTruth prompt that
they were trained on lays them out, followed by the answer, and give each
answer token P(hallucinated).

- Long contexts are cut into windows of whole passages (a passage longer than
  a window is itself windowed), each scored with the full instruction; a
  token's P(hallucinated) is its lowest over the windows (it is supported if
  any window supports it). Long answers are cut into consecutive pieces.
- ``details.spans``: the hallucinated spans, tokens at or above ``threshold``
  merged, with character offsets into the answer (``start``, ``end``, ``text``,
  ``confidence``); ``details.flagged_share``: the share of the answer's
  characters inside them.
- Score: 1 - the highest token P(hallucinated), so ``unfaithful`` (score under
  0.5 with the default ``threshold``) means exactly "at least one span found".

Instructions planted in documents are not evidence
(:mod:`ragpulse.evaluators.injection_engine.planted`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

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
from ragpulse.record import EvalResult, RagRecord

QA_PROMPT = (
    "Briefly answer the following question:\n{question}\nBear in mind that your response "
    "should be strictly based on the following {count} passages:\n{passages}\nIn case the "
    "passages do not contain the necessary information to answer the question, please reply "
    'with: "Unable to answer based on given passages."\noutput:'
)
SUMMARY_PROMPT = "Summarize the following text:\n{passages}\noutput:"
_HALLUCINATED = re.compile(r"hallucinat|unsupported|halu", re.I)


class SpanFaithfulness(DetectorEvaluator):
    metric = "faithfulness"
    applies_to = ANSWERED
    method = "spans"
    head = "token"

    class Options(DetectorOptions):
        model: str = "lettucedetect-base"
        hallucinated_label: Label | None = Field(
            None, description="the label marking a hallucinated token (default: guessed, or 1)"
        )
        threshold: float = Field(
            0.5, gt=0, lt=1, description="token P(hallucinated) from which it joins a span"
        )

    options: Options
    _positive: list[int]

    def loaded(self) -> None:
        self._positive = self.label_indices(
            self.options.hallucinated_label, _HALLUCINATED, "hallucinated", "hallucinated_label"
        )

    def plan(self, record: RagRecord) -> tuple[list[Input], Any] | EvalResult:
        answer = record.answer
        if not answer.strip():
            return self.not_applicable("answer is empty")
        passages = [t for t in evidence_documents(record) if t.strip()]
        if not passages:
            return self.not_applicable("no document text (after removing planted instructions)")
        pieces = self.windows(answer, self.max_tokens // 2, stride=0)
        longest = max(self.classifier.count([answer[a:b] for a, b in pieces]))
        budget = (
            self.max_tokens
            - self.classifier.specials(pair=True)
            - longest
            - sum(self.classifier.count([self._prompt(record.question, ["" for _ in passages])]))
        )
        groups = self._groups(passages, self.room(budget, "the documents beside the prompt"))
        inputs: list[Input] = []
        bases: list[int] = []  # where each input's answer piece starts in the answer
        for a, b in pieces:
            for group in groups:
                inputs.append((self._prompt(record.question, group), answer[a:b]))
                bases.append(a)
        return inputs, bases

    def finish(self, record: RagRecord, state: Any, outputs: Outputs) -> EvalResult:
        answer, bases = record.answer, state
        lowest: dict[tuple[int, int], float] = {}  # (start, end) in the answer -> P
        for row, base in enumerate(bases):
            probs = self.probability(outputs.logits[row], self._positive)
            for j, seq in enumerate(outputs.sequence_ids[row]):
                start, end = outputs.offsets[row][j]
                if seq != 1 or end <= start:
                    continue
                key = (base + start, base + end)
                lowest[key] = min(lowest.get(key, 1.0), float(probs[j]))
        if not lowest:
            return self.not_applicable("the answer has no tokens the model reads")
        spans = _spans(answer, sorted(lowest.items()), self.options.threshold)
        top = max(lowest.values())
        flagged = sum(s["end"] - s["start"] for s in spans)
        share = flagged / max(1, len(answer.strip()))
        label = "unfaithful" if spans else "faithful"
        explanation = (
            f"{len(spans)} hallucinated span(s), {share:.0%} of the answer; first "
            f"{spans[0]['text'][:80]!r} (P {spans[0]['confidence']:.2f})"
            if spans
            else f"no hallucinated span (highest token P {top:.2f})"
        )
        return self.result(
            1.0 - top,
            label=label,
            explanation=explanation,
            spans=spans[:50],
            flagged_share=round(share, 4),
            windows=len(bases),
            threshold=self.options.threshold,
            model=self.model_name,
        )

    @staticmethod
    def _prompt(question: str, passages: Sequence[str]) -> str:
        listed = "\n".join(f"passage {i + 1}: {p}" for i, p in enumerate(passages))
        if not question.strip():
            return SUMMARY_PROMPT.format(passages=listed)
        return QA_PROMPT.format(question=question, count=len(passages), passages=listed)

    def _groups(self, passages: list[str], budget: int) -> list[list[str]]:
        """Passages packed into groups that fit ``budget`` tokens (long ones windowed)."""
        pieces = [p for text in passages for p in self.split_long(text, budget - 8)]
        counts = self.classifier.count([f"passage 99: {p}" for p in pieces])
        groups: list[list[str]] = []
        size = 0
        for piece, n in zip(pieces, counts, strict=True):
            if groups and size + n + 1 <= budget:
                groups[-1].append(piece)
                size += n + 1
            else:
                groups.append([piece])
                size = n
        return groups


def _spans(
    answer: str, tokens: list[tuple[tuple[int, int], float]], threshold: float
) -> list[dict[str, Any]]:
    """Merge flagged tokens (in answer order) into spans, across the whitespace between them."""
    merged: list[list[Any]] = []  # [start, end, confidence]
    for (start, end), p in tokens:
        if p < threshold:
            continue
        if merged and not answer[merged[-1][1] : start].strip():
            merged[-1][1] = end
            merged[-1][2] = max(merged[-1][2], p)
        else:
            merged.append([start, end, p])
    return [
        {"start": a, "end": b, "text": answer[a:b], "confidence": round(c, 4)} for a, b, c in merged
    ]
