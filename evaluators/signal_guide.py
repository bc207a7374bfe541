"""What each local score can see, measured on the labelled dev sets, and what to switch on
for real accuracy. One table, shown by ``ragpulse demo`` and in the README's quick start
(a test keeps the two and the evaluators' label lines in step).

Figures: AUROC on ``shared/data/dev`` (``bench/lexical_dev.py``, ``bench/model_tier.py``,
``bench/injection_dev.py``); the probe's ARES figure is grouped cross-validation (it was
trained on those rows). The label line is where a method's label flips; the alerts and the
failure-ratio series read every score at 0.5 (on the quality scale).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Signal:
    method: str
    default: bool
    sees: str
    misses: str
    label_line: float | None
    """Where the label flips (score >= line: faithful / injection / followed); None: no label."""
    upgrade: str


SIGNALS: tuple[Signal, ...] = (
    Signal("faithfulness/lexical", True,
           "invented words and numbers (ARES NQ 0.971)",
           "paraphrases and subtle edits (SummEdits 0.495, HaluEval dialogue 0.473)",
           None, "`faithfulness/nli` `model: hhem-2.1-open` or `minicheck-roberta-large`; "
           "`faithfulness/llm_judge`"),
    Signal("faithfulness/probe", False,
           "a little of the subtle edits (SummEdits 0.591, HaluEval 0.615, ARES 0.931)",
           "most of them: near chance on hard sets",
           0.41, "as above; labels `faithful` from P 0.41 (trained), not 0.5"),
    Signal("context_relevance/lexical", True,
           "off-topic documents (ARES NQ 0.999)",
           "on-topic documents that lack the answer",
           None, "`context_relevance/cross_encoder` `model: ms-marco-minilm-l6` or "
           "`bge-reranker-base`; `context_relevance/llm_judge`"),
    Signal("answer_relevance/lexical", True,
           "answers that ignore the question (ARES NQ 0.642; embedding 0.919)",
           "relevant answers in other words",
           None, "`answer_relevance/embedding`; `answer_relevance/llm_judge`"),
    Signal("injection/rules", True,
           "explicit attacks (precision 1.000, recall 0.390, AUROC 0.819; "
           "0.5% false alarms on benign traffic)",
           "paraphrased and persuasive attacks",
           0.5, "`injection/classifier` `model: prompt-guard-2-86m` (benign gate on); "
           "`injection/llm_judge`"),
    Signal("injection_followed/rules", True,
           "answers that carry a flagged document's link, contact or code word",
           "obedience with nothing checkable; documents the rules do not flag",
           0.5, "the offline canary `injection_resistance/canary` in `ragpulse eval`"),
)  # fmt: skip

COLUMNS = ("method", "on", "separates (dev AUROC)", "blind to", "label line", "for real accuracy")


def rows() -> list[tuple[str, ...]]:
    return [
        (
            s.method,
            "yes" if s.default else "opt-in",
            s.sees,
            s.misses,
            "score only" if s.label_line is None else f"{s.label_line:g}",
            s.upgrade,
        )
        for s in SIGNALS
    ]


def markdown() -> str:
    """The table in Markdown (the README's quick start)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| `" + r[0] + "` | " + " | ".join(r[1:]) + " |" for r in rows()]
    return "\n".join(lines)
