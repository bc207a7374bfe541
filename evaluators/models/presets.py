"""Named detector presets: ``model: hhem-2.1-open`` instead of a hub id and a label map.

One table for every model-backed family. A preset names the model on the Hugging
Face hub, how to read its output (which label means supported, relevant,
hallucinated or injection), its window and its licence. ``model:`` takes a
preset name, a local directory or a hub id; a local directory holding one of
these models is read with the preset's label map when ``preset:`` names it
(hub downloads are off unless ``HF_HUB_OFFLINE=0``, so production points
``model:`` at a directory and ``preset:`` at the row below).

The presets table in docs/how-to/detectors.md is :func:`markdown_table`'s output (a test keeps
them equal).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from ragpulse.errors import ConfigError

Family = Literal["faithfulness/nli", "faithfulness/spans", "context_relevance/cross_encoder",
                 "injection/classifier"]  # fmt: skip
Head = Literal["sequence", "token", "hhem"]


@dataclass(frozen=True)
class Preset:
    name: str
    family: Family
    hub_id: str
    head: Head
    positive: tuple[str | int, ...]
    """Label names or indices whose probability is the score's (supported, relevant,
    hallucinated, injection); empty for a single-logit model (sigmoid)."""
    licence: str
    architecture: str
    max_tokens: int = 512
    notes: str = ""


PRESETS: dict[str, Preset] = {
    p.name: p
    for p in (
        Preset("hhem-2.1-open", "faithfulness/nli", "vectara/hallucination_evaluation_model",
               "hhem", (1,), "Apache-2.0", "flan-t5-base encoder (HHEM-2.1-open)",
               notes="reads flan-t5-base's config and tokenizer: option foundation"),
        Preset("minicheck-roberta-large", "faithfulness/nli", "lytang/MiniCheck-RoBERTa-Large",
               "sequence", (1,), "MIT", "RoBERTa-large"),
        Preset("minicheck-deberta-v3-large", "faithfulness/nli",
               "lytang/MiniCheck-DeBERTa-v3-Large", "sequence", (1,), "MIT", "DeBERTa-v3-large"),
        Preset("nli-deberta-v3-base", "faithfulness/nli",
               "MoritzLaurer/DeBERTa-v3-base-mnli-fever-anli", "sequence", ("entailment",),
               "MIT", "DeBERTa-v3-base, 3-way NLI"),
        Preset("lettucedetect-base", "faithfulness/spans",
               "KRLabsOrg/lettucedect-base-modernbert-en-v1", "token", (1,), "MIT",
               "ModernBERT-base token classifier", max_tokens=4096),
        Preset("lettucedetect-large", "faithfulness/spans",
               "KRLabsOrg/lettucedect-large-modernbert-en-v1", "token", (1,), "MIT",
               "ModernBERT-large token classifier", max_tokens=4096),
        Preset("ms-marco-minilm-l6", "context_relevance/cross_encoder",
               "cross-encoder/ms-marco-MiniLM-L6-v2", "sequence", (), "Apache-2.0",
               "BERT (MiniLM-L6), one logit"),
        Preset("ms-marco-minilm-l12", "context_relevance/cross_encoder",
               "cross-encoder/ms-marco-MiniLM-L12-v2", "sequence", (), "Apache-2.0",
               "BERT (MiniLM-L12), one logit"),
        Preset("bge-reranker-base", "context_relevance/cross_encoder", "BAAI/bge-reranker-base",
               "sequence", (), "MIT", "XLM-RoBERTa-base, one logit"),
        Preset("bge-reranker-v2-m3", "context_relevance/cross_encoder", "BAAI/bge-reranker-v2-m3",
               "sequence", (), "Apache-2.0", "XLM-RoBERTa-large (bge-m3), one logit",
               max_tokens=1024),
        Preset("prompt-guard-2-22m", "injection/classifier", "meta-llama/Llama-Prompt-Guard-2-22M",
               "sequence", ("LABEL_1",), "Llama 4 Community License (gated)",
               "DeBERTa-v3-xsmall; LABEL_1 = malicious"),
        Preset("prompt-guard-2-86m", "injection/classifier", "meta-llama/Llama-Prompt-Guard-2-86M",
               "sequence", ("LABEL_1",), "Llama 4 Community License (gated)",
               "mDeBERTa-v3-base; LABEL_1 = malicious"),
        Preset("protectai-deberta-v3-base-v2", "injection/classifier",
               "protectai/deberta-v3-base-prompt-injection-v2", "sequence", ("INJECTION",),
               "Apache-2.0", "DeBERTa-v3-base; INJECTION vs SAFE"),
    )
}  # fmt: skip


def preset(name: str | None, family: str) -> Preset | None:
    """The preset called ``name`` for ``family``; None when ``name`` is not a preset name.

    A preset of another family is a ConfigError that says which family it belongs to.
    """
    if name is None or name not in PRESETS:
        return None
    found = PRESETS[name]
    if found.family != family:
        raise ConfigError(
            f"preset {name!r} belongs to {found.family}, not to {family}; "
            f"{family} presets: {', '.join(names(family))}"
        )
    return found


def names(family: str) -> list[str]:
    return [p.name for p in PRESETS.values() if p.family == family]


def markdown_table() -> str:
    """The presets as a Markdown table (docs/how-to/detectors.md shows it)."""
    lines = [
        "| preset | method | hub id | model | reads | licence |",
        "|---|---|---|---|---|---|",
    ]
    for p in PRESETS.values():
        reads = (
            "sigmoid of the one logit"
            if not p.positive
            else "P(label " + " or ".join(str(x) for x in p.positive) + ")"
        )
        if p.head == "token":
            reads = f"per answer token, {reads}"
        note = f"; {p.notes}" if p.notes else ""
        lines.append(
            f"| `{p.name}` | `{p.family}` | `{p.hub_id}` | {p.architecture}{note} | {reads} "
            f"| {p.licence} |"
        )
    return "\n".join(lines)
