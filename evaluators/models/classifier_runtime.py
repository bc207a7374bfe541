"""A Hugging Face classifier on torch or onnxruntime: the engine of the detector families.

Three heads cover the detectors teams use:

- ``sequence``: ``AutoModelForSequenceClassification`` over one text or a pair
  (NLI, MiniCheck, cross-encoder rerankers, Prompt Guard, ProtectAI);
- ``token``: ``AutoModelForTokenClassification`` (LettuceDetect-style span detectors);
- ``hhem``: Vectara's HHEM-2.1-open layout (a flan-t5 encoder with a token
  classification head read at the first token, over a premise/hypothesis prompt),
  loaded without ``trust_remote_code``: the weights are read into transformers'
  own ``T5ForTokenClassification``.

Both backends run the same wrapper module (``logits = f(input_ids, attention_mask
[, token_type_ids])``): onnxruntime runs it exported once to
``$RAGPULSE_CACHE_DIR/onnx`` (optionally int8-quantised), so scores agree within
float noise. torch runs it on the model tier's device in its number format
(:mod:`~ragpulse.evaluators.models.placement`); onnxruntime on the CUDA execution
provider when the device is a CUDA GPU and ``onnxruntime-gpu`` provides it, else on the
CPU. Callers tokenise (:meth:`Classifier.tokenize`, one fast-tokenizer call per batch,
holding a lock: a fast tokenizer must not be reconfigured from two threads at once) and
put the rows on the model's :class:`~ragpulse.evaluators.models.forward_queue.ForwardQueue`,
whose one thread runs the passes; one instance serves every thread.
"""

from __future__ import annotations

import hashlib
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.models.forward_queue import ForwardQueue
from ragpulse.evaluators.models.loading import _quiet_transformers, load_model, placed, resolve
from ragpulse.evaluators.models.onnx_backend import cache_dir, providers, read_json
from ragpulse.evaluators.models.placement import Placement, out_of_memory

if TYPE_CHECKING:  # numpy is imported where it is used: deciding which
    import numpy as np  # evaluators run must not pay for it

Head = Literal["sequence", "token", "hhem"]
Backend = Literal["torch", "onnx"]
HHEM_PROMPT = (
    "<pad> Determine if the hypothesis is true given the premise?\n\n"
    "Premise: {text1}\n\nHypothesis: {text2}"
)


@dataclass(frozen=True)
class Tokens:
    """A batch tokenised without padding: per row its ids, its token type ids (None when
    the tokenizer gives none), and, when asked, each token's character offsets and which
    sequence (0, 1, or None for special tokens) it belongs to."""

    ids: list[list[int]]
    types: list[list[int]] | None
    offsets: list[list[tuple[int, int]]] | None = None
    sequence_ids: list[list[int | None]] | None = None


class Classifier:
    """A loaded classifier; build with :func:`load_classifier`. Thread-safe."""

    def __init__(
        self,
        location: str,
        head: Head,
        backend: Backend,
        *,
        quantize: bool = False,
        threads: int | None = None,
        foundation: str | None = None,
        placement: Placement | None = None,
        max_batch_tokens: int | None = None,
    ) -> None:
        _quiet_transformers()
        placement = placement or Placement()
        self.head = head
        self.backend = backend
        self.prompt: str | None = None
        self._model, self.tokenizer = _load(location, head, foundation, self)
        config = self._model.config
        self.id2label = {int(k): str(v) for k, v in (config.id2label or {}).items()}
        self.num_labels = int(getattr(config, "num_labels", len(self.id2label)) or 1)
        positions = getattr(config, "max_position_embeddings", None)
        if head == "hhem" or getattr(config, "model_type", "") == "t5":
            positions = None  # relative positions: no hard limit from the model
        self.max_positions: int | None = int(positions) if positions else None
        self._inputs = ["input_ids", "attention_mask"]
        if int(getattr(config, "type_vocab_size", 0) or 0) > 1:
            self._inputs.append("token_type_ids")
        self._lock = threading.Lock()
        self._wrapper = _logits_module(self._model, head).eval()
        self._session: Any = None
        self.placement = placement
        """Where it runs: the device and number format (onnx: fp32, or int8 quantised)."""
        if backend == "onnx":
            self._session, device = _onnx_session(
                location, head, self, quantize, threads, placement
            )
            self.placement = Placement(device, "fp32")
            self.dtype_name = "int8" if quantize else "fp32"
        else:
            self._wrapper = placed(self._wrapper, placement, location)
            self.dtype_name = placement.dtype
        pad = self.tokenizer.pad_token_id
        self.queue = ForwardQueue(
            self.logits,
            pad_id=int(pad if pad is not None else 0),
            inputs=self._inputs,
            token_head=head == "token",
            max_batch_tokens=placement.max_batch_tokens(max_batch_tokens),
            name=Path(location).name or location,
        )

    # -- tokenising -------------------------------------------------------------------
    def count(self, texts: list[str]) -> list[int]:
        """Tokens of each text, without special tokens."""
        if not texts:
            return []
        with self._lock:
            ids = self.tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]
        return [len(x) for x in ids]

    def specials(self, pair: bool) -> int:
        with self._lock:
            return int(self.tokenizer.num_special_tokens_to_add(pair=pair))

    def spans(self, text: str) -> list[tuple[int, int]]:
        """Character (start, end) of each token of ``text`` (no special tokens)."""
        return self.spans_of([text])[0]

    def spans_of(self, texts: list[str]) -> list[list[tuple[int, int]]]:
        """Character (start, end) of each token of each text (no special tokens): one call."""
        if not texts:
            return []
        with self._lock:
            enc = self.tokenizer(
                texts, add_special_tokens=False, return_offsets_mapping=True, verbose=False
            )
        return [[(int(a), int(b)) for a, b in row] for row in enc["offset_mapping"]]

    def tokenize(
        self, first: list[str], second: list[str] | None = None, *, offsets: bool = False
    ) -> Tokens:
        """Tokenise a batch (texts, or pairs with ``second``) in one call, unpadded, never
        truncated (callers window texts to fit first)."""
        if not first:
            return Tokens([], None, [] if offsets else None, [] if offsets else None)
        with self._lock:
            enc = self.tokenizer(
                first,
                second,
                padding=False,
                truncation=False,
                return_offsets_mapping=offsets,
                return_token_type_ids="token_type_ids" in self._inputs,
                verbose=False,
            )
            sequence_ids = [enc.sequence_ids(i) for i in range(len(first))] if offsets else None
        types = enc.get("token_type_ids") if "token_type_ids" in self._inputs else None
        spans = (
            [[(int(a), int(b)) for a, b in row] for row in enc["offset_mapping"]]
            if offsets
            else None
        )
        return Tokens(list(enc["input_ids"]), types, spans, sequence_ids)

    # -- inference --------------------------------------------------------------------
    def logits(self, inputs: dict[str, np.ndarray]) -> np.ndarray:
        """(batch, labels) for sequence and hhem heads, (batch, tokens, labels) for token.

        Called by the model's queue thread (or directly, one batch at a time)."""
        import numpy as np

        if self._session is not None:
            feed = {name: inputs[name] for name in self._inputs}
            out: np.ndarray = self._session.run(None, feed)[0]
            return out.astype(np.float32)
        import torch

        device = self.placement.device
        with torch.inference_mode():
            tensors = [
                torch.from_numpy(inputs[name]).to(device, non_blocking=True)
                for name in self._inputs
            ]
            result: np.ndarray = self._wrapper(*tensors).float().cpu().numpy()
        return result

    def check_fits(self, length: int) -> None:
        """On a GPU, run one full pass (``max_batch_tokens`` of ``length``-token rows) so
        that a model that does not fit fails now, at load, with the fix."""
        if not self.placement.accelerator:
            return
        import numpy as np

        length = max(8, min(length, self.max_positions or length))
        rows = max(1, self.queue.max_batch_tokens // length)
        ids = np.full((rows, length), 100, dtype=np.int64)
        inputs = {"input_ids": ids, "attention_mask": np.ones_like(ids),
                  "token_type_ids": np.zeros_like(ids)}  # fmt: skip
        try:
            self.logits(inputs)
        except Exception as exc:
            if not out_of_memory(exc):
                raise
            raise ModelUnavailable(
                f"does not fit on {self.placement}: a pass of {rows} x {length} tokens "
                f"(evaluation.model.max_batch_tokens {self.queue.max_batch_tokens}) ran out "
                "of device memory; lower max_batch_tokens, choose a smaller model or dtype, "
                "or set evaluation.model.device to cpu"
            ) from exc


def _logits_module(model: Any, head: Head) -> Any:
    import torch

    class Logits(torch.nn.Module):
        """The one graph both backends run: logits from ids, mask (and token types)."""

        def __init__(self, model: Any, head: Head) -> None:
            super().__init__()
            self.model = model
            self.first_token = head == "hhem"

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            kwargs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                kwargs["token_type_ids"] = token_type_ids
            logits = self.model(**kwargs).logits
            return logits[:, 0, :] if self.first_token else logits

    return Logits(model, head)


def _load(location: str, head: Head, foundation: str | None, owner: Classifier) -> tuple[Any, Any]:
    from transformers import (
        AutoModelForSequenceClassification,
        AutoModelForTokenClassification,
        AutoTokenizer,
    )

    if head == "hhem":
        return _load_hhem(location, foundation, owner)
    auto = (
        AutoModelForTokenClassification if head == "token" else AutoModelForSequenceClassification
    )
    model = auto.from_pretrained(location).eval()
    return model, AutoTokenizer.from_pretrained(location)


def _load_hhem(location: str, foundation: str | None, owner: Classifier) -> tuple[Any, Any]:
    """HHEM-2.1-open: ``config.json`` names its flan-t5 ``foundation`` and ``prompt``; the
    weights are a ``T5ForTokenClassification`` under the ``t5.`` prefix."""
    from transformers import AutoConfig, AutoTokenizer, T5ForTokenClassification

    root = Path(location)
    config = read_json(root / "config.json")
    base = resolve(foundation or str(config.get("foundation") or "google/flan-t5-base"))
    owner.prompt = str(config.get("prompt") or HHEM_PROMPT)
    t5_config = AutoConfig.from_pretrained(base)
    t5_config.num_labels = 2
    model: Any = T5ForTokenClassification(t5_config)
    state = _state_dict(root)
    prefixed = {k.removeprefix("t5."): v for k, v in state.items() if k.startswith("t5.")}
    missing, unexpected = model.load_state_dict(prefixed or state, strict=False)
    missing = [k for k in missing if "embed_tokens" not in k]  # tied to shared.weight
    if missing or unexpected:
        raise ModelUnavailable(
            f"{location} is not an HHEM checkpoint: missing {missing[:3]}, "
            f"unexpected {unexpected[:3]}"
        )
    return model.eval(), AutoTokenizer.from_pretrained(base)


def _state_dict(root: Path) -> dict[str, Any]:
    safetensors = sorted(root.glob("*.safetensors"))
    if safetensors:
        from safetensors.torch import load_file

        state: dict[str, Any] = {}
        for path in safetensors:
            state.update(load_file(str(path)))
        return state
    bins = sorted(root.glob("pytorch_model*.bin"))
    if not bins:
        raise ModelUnavailable(f"no weights (*.safetensors, pytorch_model.bin) in {root}")
    import torch

    state = {}
    for path in bins:
        state.update(torch.load(path, map_location="cpu", weights_only=True))
    return state


# -- onnxruntime ------------------------------------------------------------------------
def _onnx_session(
    location: str,
    head: Head,
    owner: Classifier,
    quantize: bool,
    threads: int | None,
    placement: Placement,
) -> tuple[Any, str]:
    """(an inference session, the device it runs on): the CUDA execution provider on a
    CUDA device when onnxruntime has it (``onnxruntime-gpu``), else the CPU's."""
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise ModelUnavailable(
            "onnxruntime not installed: install the onnx extra (pip install 'ragpulse[onnx]')"
        ) from exc
    path = _exported(Path(location), head, owner, quantize)
    options = ort.SessionOptions()
    if threads:
        options.intra_op_num_threads = threads
    chosen, device = providers(placement, ort)
    session = ort.InferenceSession(str(path), options, providers=chosen)
    return session, device


def _exported(root: Path, head: Head, owner: Classifier, quantize: bool) -> Path:
    """The cached ONNX file of this model and head, exported (and quantised) the first time."""
    weights = sorted(root.glob("*.safetensors")) + sorted(root.glob("*.bin"))
    mtimes = ",".join(str(p.stat().st_mtime_ns) for p in weights)
    stamp = hashlib.sha256(f"{root.resolve()}:{head}:{mtimes}".encode()).hexdigest()[:16]
    path = cache_dir() / f"{root.name}-{head}-{stamp}.onnx"
    if not path.exists():
        _export(owner, path)
    if not quantize:
        return path
    int8 = path.with_name(path.stem + "-int8.onnx")
    if not int8.exists():
        from onnxruntime.quantization import QuantType, quantize_dynamic

        partial = int8.with_suffix(".partial")
        quantize_dynamic(str(path), str(partial), weight_type=QuantType.QInt8)
        partial.replace(int8)
    return int8


def _export(owner: Classifier, path: Path) -> None:
    import torch

    names = list(owner._inputs)
    sample = torch.ones((2, 8), dtype=torch.long)
    mask = sample.clone()
    mask[1, 5:] = 0  # a padded row: else the exporter may bake in "no padding"
    args = (sample, mask, torch.zeros_like(sample))[: len(names)]
    axes = {name: {0: "batch", 1: "sequence"} for name in names}
    axes["logits"] = {0: "batch", 1: "sequence"} if owner.head == "token" else {0: "batch"}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # exporter chatter; tests compare the outputs
            # The TorchScript exporter: it exports T5, DeBERTa-v2, RoBERTa, ModernBERT and
            # BERT alike (the dynamo one fails on T5's attention reshape) and in a tenth the time.
            torch.onnx.export(
                owner._wrapper,
                args,
                str(partial),
                input_names=names,
                output_names=["logits"],
                dynamic_axes=axes,
                dynamo=False,
            )
    except Exception as exc:
        raise ModelUnavailable(
            f"ONNX export to {path} failed: {type(exc).__name__}: {exc}"
        ) from exc
    partial.replace(path)  # atomic: a half-written file is never loaded


def is_hhem(location: str) -> bool:
    """Whether ``location`` is a local HHEM-2.x checkpoint (its config says so)."""
    config = read_json(Path(location) / "config.json")
    return config.get("model_type") == "HHEMv2" or any(
        "HHEM" in str(a) for a in config.get("architectures") or []
    )


def load_classifier(
    name: str,
    head: Head,
    backend: Backend,
    *,
    quantize: bool = False,
    threads: int | None = None,
    foundation: str | None = None,
    placement: Placement | None = None,
    max_batch_tokens: int | None = None,
) -> Classifier:
    """Load ``name`` (a local directory or a hub id) onto ``placement`` (the CPU by
    default); ModelUnavailable says the fix."""
    needs = ("torch", "transformers") + (("onnxruntime",) if backend == "onnx" else ())
    kind = f"{head}-classifier"

    def build(location: str) -> Classifier:
        chosen: Head = "hhem" if head == "sequence" and is_hhem(location) else head
        return Classifier(
            location,
            chosen,
            backend,
            quantize=quantize,
            threads=threads,
            foundation=foundation,
            placement=placement,
            max_batch_tokens=max_batch_tokens,
        )

    return load_model(kind, name, build, needs=needs)
