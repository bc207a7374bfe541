"""``answer_reward/reward_model``: a sequence-classification reward model over (question, answer).

E.g. OpenAssistant's DeBERTa-v3 reward models: one logit, higher is better;
the score is its sigmoid. Models with several labels use the softmax
probability of ``positive_label``. (question, answer) pairs longer than the
model's window are scored on the answer's leading window and say so in
``details.truncated`` (a reward for a fragment of an answer would mislead).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.models.loading import missing_extra, sequence_classifier
from ragpulse.record import EvalResult, RagRecord


class RewardModel(Evaluator):
    metric = "answer_reward"
    method = "reward_model"
    tier = Tier.MODEL
    default_enabled = False

    def __init__(
        self,
        model: str = "OpenAssistant/reward-model-deberta-v3-large-v2",
        max_tokens: int = 512,
        batch_size: int = 8,
        positive_label: int = 1,
    ) -> None:
        self.model = model
        self.max_tokens = max_tokens
        self.batch_size = batch_size
        self.positive_label = positive_label
        self._tokenizer: Any = None
        self._model: Any = None

    @classmethod
    def missing(cls) -> str | None:
        return missing_extra(("torch", "transformers"))

    def load(self) -> None:
        self._tokenizer, self._model = sequence_classifier(self.model)

    def _score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        import torch

        todo = [i for i, r in enumerate(records) if r.question.strip() and r.answer.strip()]
        scores: dict[int, tuple[float, float, bool]] = {}
        for start in range(0, len(todo), self.batch_size):
            idx = todo[start : start + self.batch_size]
            questions = [records[i].question for i in idx]
            answers = [records[i].answer for i in idx]
            full = self._tokenizer(questions, answers)["input_ids"]
            enc = self._tokenizer(
                questions,
                answers,
                truncation="longest_first",
                max_length=self.max_tokens,
                padding=True,
                return_tensors="pt",
            )
            with torch.inference_mode():
                logits = self._model(**enc).logits.float()
            if logits.shape[-1] == 1:
                probs, raw = torch.sigmoid(logits[:, 0]), logits[:, 0]
            else:
                probs = torch.softmax(logits, -1)[:, self.positive_label]
                raw = logits[:, self.positive_label]
            for j, i in enumerate(idx):
                scores[i] = (float(probs[j]), float(raw[j]), len(full[j]) > self.max_tokens)
        out = []
        for i in range(len(records)):
            if i not in scores:
                out.append(self.not_applicable("question or answer is empty"))
                continue
            prob, raw, truncated = scores[i]
            out.append(
                self.result(
                    prob,
                    explanation=f"reward {raw:.2f} (sigmoid {prob:.2f})",
                    logit=round(raw, 4),
                    truncated=truncated,
                    model=self.model,
                )
            )
        return out
