"""``ragpulse metrics [NAME]``: every registered evaluator, or what one of them does.

Without a name, one line per evaluator: its tier, which way is good, and whether it runs
by default here. With ``metric/method`` (or a bare metric name: each of its methods), its
description, tier, what it applies to, and its options with their types, defaults and
meaning, as the settings take them (``evaluation.options.<metric/method>``).
"""

from __future__ import annotations

import argparse
import inspect
import json
import re
from enum import Enum
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ragpulse.cli.common import console
from ragpulse.options import bounds, default_of, type_name

if TYPE_CHECKING:
    from ragpulse.config import EvaluationSettings
    from ragpulse.evaluators.base import AnyEvaluator

APPLIES_TO = {"rag": "RAG turn", "agent": "agent turn", "retrieval": "retrieval only"}
"""What a record kind is called where the command says what an evaluator scores."""

TIERS = {
    "cheap": "cheap (rules and counts, no model: on all traffic)",
    "model": "model (a local model on the CPU: on a sample, needs the models extra)",
    "judge": "judge (an LLM judge: on a budgeted sample, needs a configured judge)",
}


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    metrics = sub.add_parser(
        "metrics",
        parents=[common],
        help="list every registered metric/method, its tier and whether it is on by default; "
        "with a NAME, what it does and its options",
        description="Without NAME, every registered evaluator: its tier, which way its score "
        "is good and whether it runs by default here. With NAME (metric/method, or a bare "
        "metric for each of its methods): its description, tier, what it applies to, and its "
        "options with their types, defaults and meaning.",
    )
    metrics.add_argument(
        "name", nargs="?", help="an evaluator (faithfulness/lexical) or a metric (faithfulness)"
    )


def run(args: argparse.Namespace, out: Console) -> int:
    from ragpulse.config import EvaluationSettings

    settings = EvaluationSettings()
    if args.name is None:
        out.print(_catalogue(settings))
        return 0
    from ragpulse.plugins import evaluator_class, evaluator_names
    from ragpulse.suggestions import did_you_mean

    registered = evaluator_names()
    names = [args.name] if args.name in registered else []
    names = names or [n for n in registered if n.split("/")[0] == args.name]
    if not names:
        metrics = {n.split("/")[0] for n in registered}
        hint = did_you_mean(args.name, [*registered, *metrics])
        said = f"{args.name}{hint}; `ragpulse metrics` lists the registered ones"
        console.print(Text.assemble(("unknown evaluator: ", "red"), said), soft_wrap=True)
        return 2
    for i, name in enumerate(names):
        if i:
            out.print()
        out.print(describe(evaluator_class(name), settings))
    return 0


def _catalogue(settings: EvaluationSettings) -> Table:
    from ragpulse.plugins import evaluator_classes

    table = Table("metric/method", "tier", "better", "by default", title="registered evaluators")
    for name, cls in sorted(evaluator_classes().items()):
        on = _default(cls, settings)
        table.add_row(name, cls.tier.value, cls.direction.value, on)
    return table


def _default(cls: type[AnyEvaluator], settings: EvaluationSettings) -> str:
    why = cls.missing() or cls.unconfigured(settings)
    if cls.default_enabled and not why:
        return "on"
    return why.split(" (")[0] if why else "opt-in"


def applies_to(cls: type[AnyEvaluator]) -> str:
    """What ``cls`` scores, in words: RAG turn, agent turn, conversation, retrieval only."""
    from ragpulse.evaluators.base import ConversationEvaluator

    if issubclass(cls, ConversationEvaluator):
        return "conversation (a conversation record, scored when it closes)"
    kinds = [words for kind, words in APPLIES_TO.items() if kind in cls.applies_to]
    said = ", ".join(kinds) or "nothing"
    if cls.requires_reference:
        said += " (rows that carry references, in ragpulse eval)"
    return said


def describe(cls: type[AnyEvaluator], settings: EvaluationSettings) -> Group:
    """``cls`` as ``ragpulse metrics NAME`` prints it."""
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    facts.add_row("tier", TIERS.get(cls.tier.value, cls.tier.value))
    facts.add_row("applies to", applies_to(cls))
    facts.add_row("better", cls.direction.value.replace("_", " "))
    facts.add_row("by default", _default(cls, settings))
    summary, detail = _module_doc(cls)
    title = Text(cls.name, style="bold")
    if summary:
        title.append(f": {summary}")
    parts: list[Any] = [title, Text(), facts, Text()]
    said = "\n\n".join(p for p in (_prose(cls.__doc__), detail) if p)
    if said:
        parts += [Text(said), Text()]
    fields = cls.Options.model_fields
    if fields:
        options = Table(
            "option", "type", "default", "meaning",
            title=f"options (evaluation.options: {{{cls.name}: {{OPTION: VALUE}}}})",
            title_justify="left",
        )  # fmt: skip
        for option, info in fields.items():
            options.add_row(
                option,
                type_name(info.annotation) + bounds(info),
                _default_value(info),
                escape(_prose(info.description)),
            )
        parts.append(options)
    else:
        parts.append(Text("options: none"))
    return Group(*parts)


def _module_doc(cls: type[AnyEvaluator]) -> tuple[str, str]:
    """What the evaluator's module says: a module that opens with the evaluator's name
    gives a summary and the longer account; a module of several (the retrieval metrics)
    gives its account of them all."""
    import sys

    doc = getattr(sys.modules.get(cls.__module__), "__doc__", None) or ""
    text = _prose(doc)
    head = f"`{cls.name}`"
    if not text.startswith(head):
        return "", text
    summary, _, detail = text[len(head) :].lstrip(": ").partition("\n\n")
    return summary.strip(), detail.strip()


def _prose(doc: str | None) -> str:
    """A docstring as plain text: reStructuredText roles and double backquotes dropped."""
    if not doc:
        return ""
    text = inspect.cleandoc(doc)
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    text = text.replace("``", "`")
    paragraphs = [_joined(p) for p in text.split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def _joined(paragraph: str) -> str:
    """A paragraph's lines joined, each item of a list ("- ...") on a line of its own."""
    items: list[list[str]] = []
    for line in paragraph.split("\n"):
        words = line.split()
        if not words:
            continue
        if not items or words[0] in ("-", "*"):
            items.append([])
        items[-1].extend(words)
    return "\n".join(" ".join(item) for item in items)


def _default_value(info: FieldInfo) -> str:
    value = default_of(info)
    if value is PydanticUndefined:
        return "required"
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, Enum):
        value = value.value
    return escape(json.dumps(value, default=str))
