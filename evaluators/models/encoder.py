"""Sentence embeddings with chunking and a cache, on torch or onnxruntime.

Long texts are split into chunks that fit the model (sentence-packed, then
word windows for a sentence too long on its own) instead of being silently cut
at the model's maximum length. Embeddings are L2-normalised, so a dot product
is the cosine similarity, and cached by text: production traffic re-retrieves
the same documents all the time.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from ragpulse.evaluators.models.loading import MINILM, load_model, sentence_encoder
from ragpulse.evaluators.models.placement import Placement, context_placement
from ragpulse.evaluators.text.analyses import sentences
from ragpulse.plugin_context import PluginContext

BACKENDS = ("torch", "onnx")


class _TorchBackend:
    def __init__(self, model: str, placement: Placement | None = None) -> None:
        self._model = sentence_encoder(model, placement)
        # Room for [CLS] and [SEP].
        self.max_tokens = int(getattr(self._model, "max_seq_length", 256) or 256) - 2

    def count(self, texts: list[str]) -> list[int]:
        ids = self._model.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        return [len(x) for x in ids]

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        vectors = self._model.encode(
            texts,
            batch_size=batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)


def _onnx_backend(model: str, placement: Placement | None = None) -> Any:
    from ragpulse.evaluators.models.onnx_backend import OnnxBackend

    return load_model(
        "onnx-encoder",
        model,
        lambda location: OnnxBackend(location, placement),
        needs=("onnxruntime", "tokenizers"),
    )


class Encoder:
    """A sentence-transformers model on ``backend`` (torch or onnx), on ``placement`` (the
    CPU by default). Thread-safe; ``load`` first."""

    def __init__(
        self,
        model: str = MINILM,
        backend: str = "torch",
        batch_size: int = 32,
        cache_size: int = 20_000,
        placement: Placement | None = None,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        self.model_name = model
        self.backend = backend
        self.batch_size = batch_size
        self._cache_size = cache_size
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._impl: Any = None
        self.max_tokens = 254
        self.placement = placement or Placement()

    def load(self) -> None:
        self._impl = (
            _onnx_backend(self.model_name, self.placement)
            if self.backend == "onnx"
            else _TorchBackend(self.model_name, self.placement)
        )
        self.max_tokens = self._impl.max_tokens
        if self.backend == "onnx":
            self.placement = Placement(self._impl.device, "fp32")

    def token_counts(self, texts: Sequence[str]) -> list[int]:
        return list(self._impl.count(list(texts)))

    def chunks(self, text: str) -> list[str]:
        """``text`` as pieces that each fit the model, in order; [] for blank text."""
        parts = sentences(text)
        if not parts:
            return []
        counts = self.token_counts(parts)
        out: list[str] = []
        current: list[str] = []
        size = 0
        for part, n in zip(parts, counts, strict=True):
            if n > self.max_tokens:
                if current:
                    out.append(" ".join(current))
                    current, size = [], 0
                out.extend(self._split_long(part, n))
                continue
            if size + n > self.max_tokens and current:
                out.append(" ".join(current))
                current, size = [], 0
            current.append(part)
            size += n
        if current:
            out.append(" ".join(current))
        return out

    def _split_long(self, sentence: str, tokens: int) -> list[str]:
        words = sentence.split()
        # Tokens per word vary; size windows from this sentence's own ratio, with slack.
        per_window = max(1, int(len(words) * self.max_tokens / tokens * 0.9))
        return [" ".join(words[i : i + per_window]) for i in range(0, len(words), per_window)]

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), dim) float32, normalised; texts should already fit (see chunks)."""
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        with self._lock:
            known = {t: self._cache[t] for t in set(texts) if t in self._cache}
            for text in known:
                self._cache.move_to_end(text)  # least recently used goes first
        missing = [t for t in dict.fromkeys(texts) if t not in known]
        if missing:
            fresh = dict(zip(missing, self._impl.encode(missing, self.batch_size), strict=True))
            known.update(fresh)
            if self._cache_size:
                with self._lock:
                    self._cache.update(fresh)
                    while len(self._cache) > self._cache_size:
                        self._cache.popitem(last=False)
        return np.stack([known[t] for t in texts])


def load_encoder(
    model: str = MINILM, backend: str = "torch", placement: Placement | None = None
) -> Encoder:
    encoder = Encoder(model, backend, placement=placement)
    encoder.load()
    return encoder


def shared_encoder(
    model: str = MINILM, backend: str = "torch", context: PluginContext | None = None
) -> Encoder:
    """The context's one loaded encoder (and embedding cache) per model and backend, on the
    model tier's device (``evaluation.model.device``, ``dtype``).

    Without a context (training scripts, one-off tools) a new encoder is loaded on the CPU.
    """
    if context is None:
        return load_encoder(model, backend)
    placement = context_placement(context)
    return context.shared(
        ("encoder", backend, model), lambda: load_encoder(model, backend, placement)
    )
