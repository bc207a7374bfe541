"""What ``ragpulse demo`` prints: the score table (compact on a terminal narrower than
it), what became of the agent turn, the conversation and the hijack, and what the scores
can see (kept to a screen: the full table where it fits, else the methods and what to
switch on, with a pointer to the rest)."""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from ragpulse.evaluators.base import AnyEvaluator
    from ragpulse.exporters.memory import InMemorySink
    from ragpulse.record import EvalResult, RagRecord
    from ragpulse.redaction import Redactor

SCREEN_LINES = 40
"""The most lines the "what these scores can see" table may take (a screen)."""
GUIDE_TITLE = "what these scores can see (dev AUROC; alerts read scores at 0.5)"
GUIDE_POINTER = (
    "what each method separates and misses, measured on the dev sets: "
    "docs/explanation/tiers.md; what one scores and its options: ragpulse metrics NAME"
)


TURN_SHOWN = ("faithfulness/lexical", "unsupported_answer/lexical", "agent_steps/count")
RECORD_SHOWN = ("conversation_groundedness/rules", "user_frustration/rules", "abandonment/rules")


def _all_results(sink: InMemorySink) -> Iterator[EvalResult]:
    """Every turn's results, then every conversation record's."""
    for item in sink.items:
        yield from item.results
    for conversation in sink.conversations.values():
        yield from conversation.results


def score_table(
    sink: InMemorySink, evaluators: Sequence[AnyEvaluator], title: str, console: Console
) -> Table:
    """One row per evaluator that runs (a tier with nothing yet is a visible row): n, mean,
    min and labels; the compact form (no tier or min, a label a line) when the full one is
    wider than ``console``."""
    scores: dict[str, list[float]] = defaultdict(list)
    labels: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for r in _all_results(sink):
        if r.score is not None:
            scores[r.name].append(r.score)
        if r.label:
            labels[r.name][r.label] += 1
    tiers = {e.name: e.tier.value for e in evaluators}
    rows = []
    for name in sorted(set(tiers) | set(scores)):
        vals = scores.get(name, [])
        counted = [f"{k}={v}" for k, v in sorted(labels[name].items())]
        mean = f"{statistics.fmean(vals):.3f}" if vals else "-"
        low = f"{min(vals):.2f}" if vals else "-"
        rows.append((name, tiers.get(name, "?"), str(len(vals)), mean, low, counted))
    full = Table(title=title)
    for col in ("metric/method", "tier", "n", "mean", "min", "labels"):
        left = col in ("metric/method", "tier", "labels")
        # Names are never cut (the labels column wraps instead).
        no_wrap = col in ("metric/method", "tier")
        full.add_column(col, justify="left" if left else "right", no_wrap=no_wrap)
    for name, tier, n, mean, low, counted in rows:
        full.add_row(name, tier, n, mean, low, ", ".join(counted))
    unbounded = console.options.update(width=1_000_000)  # the width the table wants
    if console.measure(full, options=unbounded).maximum <= console.width:
        return full
    compact = Table(title=title)
    compact.add_column("metric/method", no_wrap=True)
    compact.add_column("n", justify="right")
    compact.add_column("mean", justify="right")
    compact.add_column("labels", overflow="fold")
    for name, _, n, mean, _, counted in rows:
        compact.add_row(name, n, mean, "\n".join(counted))
    return compact


def _scored(results: Sequence[EvalResult], *names: str) -> str:
    """``name score label`` of the named results, the way the story quotes them."""
    shown = []
    for r in results:
        if r.name in names:
            score = "n/a" if r.score is None else f"{r.score:.2f}"
            shown.append(f"{r.name} {score}" + (f" ({r.label})" if r.label else ""))
    return ", ".join(shown)


def _is_hijack(results: Sequence[EvalResult]) -> bool:
    return any(r.name == "injection_followed/agent" and r.label == "hijacked" for r in results)


def story(sink: InMemorySink, redactor: Redactor) -> list[Text]:
    """What became of the demo's agent turn, its first conversation and the hijack, each
    with the results that tell it, redacted as the terminal's path (``logs``) asks: the
    hijack's destination reads as the sinks show it."""
    from ragpulse.exporters.support.results import redact_results

    lines: list[Text] = []
    items = sink.items

    def agent_turn(record: RagRecord, results: Sequence[EvalResult]) -> bool:
        searched = any(c.retrieval and c.status == "ok" for c in record.tool_calls)
        return record.kind == "agent" and searched and not _is_hijack(results)

    turn = next((i for i in items if agent_turn(i.record, i.results)), None)
    if turn is not None:
        calls = ", ".join(c.name for c in turn.record.tool_calls)
        scored = _scored(turn.results, *TURN_SHOWN)
        lines.append(
            Text.assemble(
                ("agent turn ", "bold"),
                f"{turn.record.question!r}: {turn.record.model_calls} model calls, tools "
                f"{calls}, {len(turn.record.documents)} passages as its documents; {scored}",
            )
        )
    conversations = sorted(sink.conversations.values(), key=lambda c: c.record.start_time_ns)
    if conversations:
        record, results = conversations[0].record, conversations[0].results
        asked = " / ".join(repr(t.question) for t in record.turns)
        lines.append(
            Text.assemble(
                ("conversation ", "bold"),
                f"{record.conversation_id} ({len(record.turns)} turns, closed by "
                f"{record.closed_by}): {asked}; its record: {_scored(results, *RECORD_SHOWN)}",
            )
        )
    hijack = next((i for i in items if _is_hijack(i.results)), None)
    if hijack is not None:
        shown = redact_results(hijack.record, hijack.results, redactor)
        [followed] = [r for r in shown if r.name == "injection_followed/agent"]
        injection = _scored(hijack.results, "injection/rules")
        lines.append(
            Text.assemble(
                ("hijack ", "bold red"),
                f"{hijack.record.question!r}: {injection}; injection_followed/agent "
                f"{followed.label}: {followed.explanation}",
            )
        )
    return lines


def signal_table() -> Table:
    """What each local score can see, and what to switch on for accuracy: the full table."""
    from ragpulse.evaluators.signal_guide import COLUMNS, rows

    table = Table(title=GUIDE_TITLE)
    for col in COLUMNS:
        table.add_column(col, overflow="fold")  # names are never cut
    for row in rows():
        table.add_row(*(cell.replace("`", "") for cell in row))
    return table


def signal_guide(console: Console) -> RenderableType:
    """:func:`signal_table` where it fits in :data:`SCREEN_LINES` at ``console``'s width;
    else each method and what to switch on, with where to read the rest."""
    from ragpulse.evaluators.signal_guide import rows

    full = signal_table()
    if len(console.render_lines(full, console.options, pad=False)) <= SCREEN_LINES:
        return full
    table = Table(title=GUIDE_TITLE, caption=GUIDE_POINTER, caption_justify="left")
    table.add_column("method", no_wrap=True)
    table.add_column("switch on for accuracy", overflow="fold")
    for method, *_, upgrade in rows():
        table.add_row(method, upgrade.replace("`", ""))
    return table
