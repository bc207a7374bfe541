"""What each local score can see, measured on the labelled dev sets, and what to switch on
for real accuracy. One table, shown by ``ragpulse demo`` and in the docs (explanation/tiers.md)
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
    label_line: float | str | None
    """Where the label flips (score >= line: faithful / injection / followed); None: no
    label; a text: labelled by a rule that it names (the agent signals)."""
    upgrade: str


SIGNALS: tuple[Signal, ...] = (
    Signal("faithfulness/lexical", True,
           "invented words, numbers (ARES 0.97)",
           "paraphrase, subtle edits (SummEdits 0.50, HaluEval 0.47)",
           None, "`faithfulness/nli` `hhem-2.1-open`; `llm_judge`"),
    Signal("faithfulness/probe", False,
           "some subtle edits (SummEdits 0.59, HaluEval 0.62)",
           "most of them",
           0.41, "as above"),
    Signal("context_relevance/lexical", True,
           "off-topic documents (ARES 1.00)",
           "on-topic documents without the answer",
           None, "`cross_encoder` `ms-marco-minilm-l6`; `llm_judge`"),
    Signal("answer_relevance/lexical", True,
           "ignored questions (ARES 0.83 where it scores; short answers not applicable)",
           "answers in other words",
           None, "`embedding` (ARES 0.92); `llm_judge`"),
    Signal("injection/rules", True,
           "explicit attacks (0.82; precision 1.00, recall 0.39)",
           "paraphrased, persuasive attacks",
           0.5, "`classifier` `prompt-guard-2-86m`; `llm_judge`"),
    Signal("injection_followed/rules", True,
           "answers carrying a flagged document's link, contact, code word",
           "obedience that leaves nothing to check",
           0.5, "the canary in `ragpulse eval`"),
    # Agent turns only (labels by rule, not by a line on the score: see how-to agents).
    Signal("agent_steps/count", True,
           "turns that wander or loop (steps against a budget)",
           "whether the steps were needed",
           "by rule: over_budget past max_steps", "`tool_loop/rules` for repeats"),
    Signal("tool_error/rules", True,
           "error statuses and error outputs of tool calls",
           "a tool that answers wrongly without saying so",
           "by rule: any failed call", "`faithfulness` on the tool results"),
    Signal("tool_loop/rules", True,
           "the same tool called again with the same arguments",
           "near-identical arguments",
           "by rule: loop at 3 repeats", "`agent_steps/count`"),
    Signal("unsupported_answer/lexical", True,
           "answers no single tool result grounds",
           "answers grounded in other words",
           "by rule: support below 0.3", "`faithfulness/nli`; `llm_judge`"),
    Signal("injection_followed/agent", True,
           "a value from an instruction-like tool result in a sensitive call the user did "
           "not ask for (InjecAgent held out: AUROC 0.995)",
           "hijacks through tools not named in `agents.sensitive_tools`",
           "0.9: hijacked (0.5: suspect)", "`injection/llm_judge` (sees the calls and where "
           "their values came from)"),
    # A follow-up turn against the earlier answers in its history.
    Signal("consistency/rules", True,
           "a restated fact with another number or name (synthetic pairs: precision 1.00, "
           "recall 0.40)",
           "contradictions in other words, through a pronoun",
           0.5, "`consistency/llm_judge`"),
    # Conversations, when one closes (how-to conversations).
    Signal("conversation_groundedness/rules", True,
           "conversations with ungrounded turns, and the weakest turn",
           "what its turns' faithfulness misses",
           "score only", "a judge for the turns' faithfulness"),
    Signal("conversation_injection/rules", True,
           "any turn carrying an injection, or one followed",
           "what the turns' injection methods miss",
           "by rule: any turn flagged", "`injection/llm_judge` on the turns"),
    Signal("conversation_tool_errors/rules", True,
           "conversations whose tools keep failing",
           "failures a tool does not report",
           "score only", "`tool_error/rules` on the turns"),
    Signal("user_frustration/rules", True,
           "questions asked again, negative feedback",
           "frustration said in other words",
           "by rule: a third of follow-ups", "`user_frustration/llm_judge`"),
    Signal("abandonment/rules", True,
           "users leaving right after an unsupported answer",
           "users leaving satisfied with a wrong answer",
           "by rule: the last answer unsupported", "the turns' faithfulness"),
)  # fmt: skip

COLUMNS = ("method", "separates (dev AUROC)", "misses", "label line", "switch on")


def rows() -> list[tuple[str, ...]]:
    return [
        (
            s.method + ("" if s.default else " (opt-in)"),
            s.sees,
            s.misses,
            "score only"
            if s.label_line is None
            else s.label_line
            if isinstance(s.label_line, str)
            else f"{s.label_line:g}",
            s.upgrade,
        )
        for s in SIGNALS
    ]


def markdown() -> str:
    """The table in Markdown (docs/explanation/tiers.md shows it)."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for method, *rest in rows():
        name, _, note = method.partition(" ")
        lines.append(f"| `{name}`{' ' + note if note else ''} | " + " | ".join(rest) + " |")
    return "\n".join(lines)
