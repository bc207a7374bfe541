"""``answer_reward/reward_model``: a sequence-classification reward model over (question, answer).

E.g. OpenAssistant's DeBERTa-v3 reward models: one logit, higher is better;
the score is its sigmoid. Models with several labels use the softmax
probability of ``positive_label``. (question, answer) pairs longer than the
model's window are scored on the answer's leading window and say so in
``details.truncated`` (a reward for a fragment of an answer would mislead).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from ragpulse.evaluators.base import ANSWERED
from ragpulse.evaluators.models.transformers_base import TransformersEvaluator, TransformersOptions
from ragpulse.record import EvalResult, RagRecord


class RewardModel(TransformersEvaluator):
    metric = "answer_reward"
    applies_to = ANSWERED
    method = "reward_model"
    model_kind = "sequence-classifier"

    class Options(TransformersOptions):
        model: str = "OpenAssistant/reward-model-deberta-v3-large-v2"
        positive_label: int = Field(
            1, ge=0, description="for models with several labels: the one that means good"
        )

    options: Options

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        import torch

        opts = self.options
        todo = [i for i, r in enumerate(records) if r.question.strip() and r.answer.strip()]
        scores: dict[int, tuple[float, float, bool]] = {}
        for idx in self.batches(todo):
            questions = [records[i].question for i in idx]
            answers = [records[i].answer for i in idx]
            full = self._tokenizer(questions, answers)["input_ids"]
            enc = self._tokenizer(
                questions,
                answers,
                truncation="longest_first",
                max_length=opts.max_tokens,
                padding=True,
                return_tensors="pt",
            )
            with torch.inference_mode():
                logits = self._model(**self.on_device(enc)).logits.float().cpu()
            if logits.shape[-1] == 1:
                probs, raw = torch.sigmoid(logits[:, 0]), logits[:, 0]
            else:
                probs = torch.softmax(logits, -1)[:, opts.positive_label]
                raw = logits[:, opts.positive_label]
            for j, i in enumerate(idx):
                scores[i] = (float(probs[j]), float(raw[j]), len(full[j]) > opts.max_tokens)
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
                    model=opts.model,
                )
            )
        return out
