"""Sentence embeddings through onnxruntime: about 2x torch's speed on CPU here.

The model is exported once from its torch weights (torch's dynamo exporter,
which needs the ``onnx`` extra) and cached as ``<cache>/onnx/<name>-<hash>.onnx``;
later runs load only onnxruntime and the fast tokenizer. Pooling follows the
sentence-transformers config (mean or CLS), then L2 normalisation.
"""

from __future__ import annotations

import hashlib
import json
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.models.placement import Placement

if TYPE_CHECKING:  # numpy is imported where it is used: deciding which
    import numpy as np  # evaluators run must not pay for it

CACHE_ENV = "RAGPULSE_CACHE_DIR"


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "ragpulse") / "onnx"


def providers(placement: Placement | None, ort: Any) -> tuple[list[Any], str]:
    """(onnxruntime execution providers, the device they run on) for ``placement``: CUDA's
    on a CUDA device, which needs ``onnxruntime-gpu`` (ModelUnavailable says so), else the
    CPU's."""
    if placement is None or not placement.device.startswith("cuda"):
        return ["CPUExecutionProvider"], "cpu"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        raise ModelUnavailable(
            f"backend onnx on {placement.device}: this onnxruntime has no CUDA execution "
            "provider; pip uninstall onnxruntime && pip install onnxruntime-gpu, or use "
            "backend torch, or set evaluation.model.device to cpu"
        )
    index = int(placement.device.partition(":")[2] or 0)
    cuda = ("CUDAExecutionProvider", {"device_id": index})
    return [cuda, "CPUExecutionProvider"], placement.device


class OnnxBackend:
    """Tokenise with ``tokenizers``, run the exported encoder, pool, normalise."""

    def __init__(
        self, location: str, placement: Placement | None = None, threads: int | None = None
    ) -> None:
        try:
            import onnxruntime as ort
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise ModelUnavailable(
                f"{exc.name} not installed: install the onnx extra (pip install 'ragpulse[onnx]')"
            ) from exc
        root = Path(location)
        config = read_json(root / "sentence_bert_config.json")
        self.max_tokens = int(config.get("max_seq_length", 256)) - 2
        pooling = read_json(root / "1_Pooling" / "config.json")
        self._cls = bool(pooling.get("pooling_mode_cls_token"))
        self._counter = Tokenizer.from_file(str(root / "tokenizer.json"))
        self._counter.no_truncation()
        self._counter.no_padding()
        self._tokenizer = Tokenizer.from_file(str(root / "tokenizer.json"))
        self._tokenizer.enable_truncation(self.max_tokens + 2)
        self._tokenizer.enable_padding()
        path = self._exported(root)
        options = ort.SessionOptions()
        if threads:
            options.intra_op_num_threads = threads
        chosen, self.device = providers(placement, ort)
        self._session = ort.InferenceSession(str(path), options, providers=chosen)
        self._inputs = {i.name for i in self._session.get_inputs()}

    def count(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self._counter.encode_batch(texts, add_special_tokens=False)]

    def encode(self, texts: list[str], batch_size: int = 32) -> np.ndarray:
        import numpy as np

        out = []
        for start in range(0, len(texts), batch_size):
            encodings = self._tokenizer.encode_batch(texts[start : start + batch_size])
            feed = {
                "input_ids": np.array([e.ids for e in encodings], dtype=np.int64),
                "attention_mask": np.array([e.attention_mask for e in encodings], dtype=np.int64),
                "token_type_ids": np.array([e.type_ids for e in encodings], dtype=np.int64),
            }
            hidden = self._session.run(None, {k: v for k, v in feed.items() if k in self._inputs})[
                0
            ]
            mask = feed["attention_mask"][..., None].astype(np.float32)
            pooled = (
                hidden[:, 0]
                if self._cls
                else (hidden * mask).sum(1) / np.clip(mask.sum(1), 1e-9, None)
            )
            out.append(pooled / np.clip(np.linalg.norm(pooled, axis=1, keepdims=True), 1e-12, None))
        return np.concatenate(out).astype(np.float32)

    def _exported(self, root: Path) -> Path:
        weights = root / "model.safetensors"
        stamp = hashlib.sha256(
            f"{root.resolve()}:{weights.stat().st_mtime_ns if weights.exists() else 0}".encode()
        ).hexdigest()[:16]
        path = cache_dir() / f"{root.name}-{stamp}.onnx"
        if not path.exists():
            export(root, path)
        return path


def export(root: Path, path: Path) -> None:
    """Export the transformer of a sentence-transformers directory to ONNX (once)."""
    try:
        import torch
        from transformers import AutoModel
    except ImportError as exc:
        raise ModelUnavailable(
            f"exporting to ONNX needs torch and transformers ({exc.name} missing): "
            "install the models and onnx extras once, or copy an exported file into "
            f"{cache_dir()}"
        ) from exc

    class _Encoder(torch.nn.Module):
        def __init__(self, model: Any) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any) -> Any:
            return self.model(
                input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids
            ).last_hidden_state

    model = AutoModel.from_pretrained(str(root)).eval()
    batch, seq = torch.export.Dim("batch"), torch.export.Dim("sequence", max=512)
    # A padded sample: with an all-ones mask the exporter would bake in "no padding".
    sample = torch.ones((2, 8), dtype=torch.long)
    mask = sample.clone()
    mask[1, 5:] = 0
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # exporter chatter; the result is checked by tests
            torch.onnx.export(
                _Encoder(model).eval(),
                (sample, mask, torch.zeros_like(sample)),
                str(partial),
                input_names=["input_ids", "attention_mask", "token_type_ids"],
                output_names=["last_hidden_state"],
                dynamic_shapes=({0: batch, 1: seq},) * 3,
                dynamo=True,
                verbose=False,
            )
    except Exception as exc:
        raise ModelUnavailable(
            f"ONNX export of {root} failed: {type(exc).__name__}: {exc}"
        ) from exc
    partial.replace(path)  # atomic: a half-written file is never loaded


def read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}
