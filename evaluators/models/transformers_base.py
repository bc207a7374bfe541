"""The one skeleton of the model-tier evaluators over a Hugging Face transformers model.

Question likelihood (seq2seq), the reward model and the injection classifier
(sequence classification) share it: the options every such model takes, the
extra they need, loading through the plug-in context (one load per model name,
shared by every evaluator that names it), batching, and long texts split into
overlapping windows where the best window counts, instead of being cut.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Literal, TypeVar

from pydantic import Field

from ragpulse.evaluators.base import BatchEvaluator, Tier
from ragpulse.evaluators.models.loading import missing_extra, seq2seq, sequence_classifier
from ragpulse.evaluators.models.placement import Placement, context_placement
from ragpulse.plugin_context import PluginContext, PluginOptions

T = TypeVar("T")


class TransformersOptions(PluginOptions):
    model: str = Field(description="a local model directory or a hub id (hub downloads are off)")
    max_tokens: int = Field(512, ge=8, description="the model's window, in tokens")
    stride: int = Field(64, ge=0, description="tokens shared by consecutive windows")
    batch_size: int = Field(8, ge=1, description="texts per forward pass")


class TransformersEvaluator(BatchEvaluator):
    """Subclasses set ``model_kind`` and an ``Options`` deriving from
    :class:`TransformersOptions` with their default model."""

    tier = Tier.MODEL
    default_enabled = False  # opt in: evaluation.evaluators
    model_kind: ClassVar[Literal["seq2seq", "sequence-classifier"]]

    class Options(TransformersOptions):
        pass

    options: TransformersOptions
    _tokenizer: Any = None
    _model: Any = None
    _placement: Placement = Placement()

    @classmethod
    def missing(cls) -> str | None:
        return missing_extra(("torch", "transformers"))

    def load(self, context: PluginContext) -> None:
        super().load(context)
        name, kind = self.options.model, self.model_kind
        loader = seq2seq if kind == "seq2seq" else sequence_classifier
        self._placement = placement = context_placement(context)
        self._tokenizer, self._model = context.shared((kind, name), lambda: loader(name, placement))
        self.loaded()

    def placement(self) -> tuple[str, str] | None:
        return self._placement.device, self._placement.dtype

    def on_device(self, tensors: Any) -> Any:
        """Tokenizer output (or one tensor) moved to the model's device."""
        return tensors.to(self._placement.device)

    def loaded(self) -> None:
        """Check the loaded model (labels, say); raise ModelUnavailable to disable."""

    def batches(self, items: Sequence[T]) -> Iterator[Sequence[T]]:
        size = self.options.batch_size
        for start in range(0, len(items), size):
            yield items[start : start + size]

    def windows(self, texts: list[str]) -> tuple[Any, list[int]]:
        """Tokenised overlapping windows of ``texts`` and, per window, the text it came from."""
        enc = self._tokenizer(
            texts,
            truncation=True,
            max_length=self.options.max_tokens,
            stride=self.options.stride,
            return_overflowing_tokens=True,
            padding=True,
            return_tensors="pt",
        )
        owner = enc.pop("overflow_to_sample_mapping").tolist()
        return enc, owner

    @staticmethod
    def best_window(owner: list[int], values: list[float], count: int) -> list[float]:
        """Per text, its highest window value."""
        best = [0.0] * count
        for window, i in enumerate(owner):
            best[i] = max(best[i], values[window])
        return best
