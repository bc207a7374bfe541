"""Conversations in ``ragpulse eval``: turns scored in conversation order, and one
conversation record per conversation at the end of the run.

The turns of a file's conversations go through the collector's own conversation stage
(:class:`~ragpulse.collector.conversations.stage.ConversationStage`), so that an offline
conversation is what a live one is: a turn whose row shows no history is numbered in
file order and given the earlier turns as its history and evidence; each turn is kept
with its results; :meth:`OfflineConversations.close` closes every conversation at the end
of the run (``closed_by: "end_of_run"``) into a conversation record that the conversation
metrics score. A conversation of one turn gets no record (its turn says it all).

A turn is scored once per conversation: when several rows of one conversation show the
same earlier turns (each row a model call's input, the conversation so far), an earlier
turn a row shows is scored only if no row before showed it; a row's own (last) turn is
always scored. State is bounded as live (``conversations.max_open``, ``max_turns``).
"""

from __future__ import annotations

import inspect
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ragpulse.collector.conversations.stage import ConversationStage
from ragpulse.collector.extract.history import joined_history, standalone
from ragpulse.config import ConversationSettings
from ragpulse.evaluation import evaluate_records
from ragpulse.evaluators.base import AnyEvaluator, ConversationEvaluator
from ragpulse.record import (
    ConversationRecord,
    Document,
    DocumentSource,
    EvalResult,
    ExportItem,
    RagRecord,
)
from ragpulse.redaction import Redactor
from ragpulse.results import conversation_line


class OfflineConversations:
    """The conversations of one offline run. Not thread-safe; one per run."""

    def __init__(
        self,
        settings: ConversationSettings,
        evaluators: Sequence[AnyEvaluator],
        redactor: Redactor | None = None,
    ) -> None:
        self.settings = settings
        self.evaluators = [e for e in evaluators if isinstance(e, ConversationEvaluator)]
        self._redactor = redactor
        self._stage = ConversationStage(settings, self.evaluators, self._closed)
        self._shown: OrderedDict[str, int] = OrderedDict()  # the last turn number seen
        self.lines: list[str] = []
        """The conversation lines closed so far (``{"conversation", "results"}``)."""
        self.results: list[EvalResult] = []
        """Every conversation metric's result so far."""
        self.turns = 0
        """Turns of a conversation scored."""
        self.repeated = 0
        """Earlier turns a row showed that an earlier row of its conversation had shown."""

    def is_new(self, record: RagRecord, own: bool) -> bool:
        """Whether to score ``record``: a row's own turn always; an earlier turn a row
        shows only when no earlier row of its conversation showed it."""
        cid = record.conversation_id
        if not cid:
            return True
        shown = self._shown.pop(cid, 0)
        new = own or record.turn is None or record.turn > shown
        if new:
            shown = max(shown, record.turn or shown + 1)
        else:
            self.repeated += 1
        self._shown[cid] = shown
        while len(self._shown) > self.settings.max_open:
            self._shown.popitem(last=False)
        return new

    def evaluate(
        self, records: Sequence[RagRecord], evaluators: Sequence[AnyEvaluator]
    ) -> tuple[list[RagRecord], list[list[EvalResult]]]:
        """Score ``records`` (in file order) as :func:`evaluate_records` does, each turn
        of a conversation after the turns before it: (the records as scored, numbered and
        given their history; their results)."""
        prepared: list[RagRecord | None] = [None] * len(records)
        results: list[list[EvalResult]] = [[] for _ in records]
        pending = list(range(len(records)))
        while pending:
            # One turn per conversation at a time: the next one joins it as history.
            wave, later, busy = [], [], set()
            for i in pending:
                cid = records[i].conversation_id
                if cid and cid in busy:
                    later.append(i)
                    continue
                if cid:
                    busy.add(cid)
                wave.append(i)
            ready = [self._stage.prepare(_named(records[i])) for i in wave]
            for i, record, scored in zip(
                wave, ready, evaluate_records(ready, evaluators), strict=True
            ):
                prepared[i], results[i] = record, scored
                if record.conversation_id:
                    self.turns += 1
                    self._stage.observe(record, scored)
            pending = later
        return [r for r in prepared if r is not None], results

    def close(self) -> list[str]:
        """Close every open conversation (``end_of_run``); every conversation line."""
        self._stage.close_all("end_of_run")
        return self.lines

    def _closed(self, item: ExportItem[ConversationRecord]) -> None:
        self.lines.append(conversation_line(item, self._redactor))
        self.results.extend(item.results)


def _named(record: RagRecord) -> RagRecord:
    """A turn of a conversation named by its input line when its row gave it no span id
    (the stage tells turns apart by trace and span id)."""
    if not record.conversation_id or record.span_id:
        return record
    return record.model_copy(update={"span_id": f"line-{record.attributes.get('line')}"})


# --- Conversations replayed (eval --replay, the harness) --------------------------------


def conversation_order(records: Sequence[RagRecord]) -> list[list[int]]:
    """Indices of ``records`` grouped by conversation, each group in turn order (turn
    number, then input order); a record outside any conversation is a group of its own.
    Groups come in the order of their first record."""
    groups: dict[str, list[int]] = {}
    out: list[list[int]] = []
    for i, record in enumerate(records):
        cid = record.conversation_id
        if not cid:
            out.append([i])
        elif cid in groups:
            groups[cid].append(i)
        else:
            groups[cid] = [i]
            out.append(groups[cid])
    for group in out:
        group.sort(key=lambda i: (records[i].turn or 0, i))
    return out


def history_messages(earlier: Sequence[tuple[str, str | None]]) -> list[dict[str, str]]:
    """What a replayed turn's function is given as ``history``: the earlier turns'
    questions and answers as OpenAI-style messages (an answer that failed, None, is left
    out: its question stays)."""
    out = []
    for question, answer in earlier:
        out.append({"role": "user", "content": question})
        if answer is not None:
            out.append({"role": "assistant", "content": answer})
    return out


def call_keywords(
    fn: Callable[..., Any], conversation_id: str | None, history: list[dict[str, str]]
) -> dict[str, Any]:
    """The keywords a replayed turn's function takes: ``history`` (the conversation so
    far, :func:`history_messages`) and ``conversation_id``, each only when the function
    has a parameter of that name (none for a turn outside a conversation)."""
    if not conversation_id:
        return {}
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return {}
    out: dict[str, Any] = {}
    if "history" in params:
        out["history"] = history
    if "conversation_id" in params:
        out["conversation_id"] = conversation_id
    return out


def joined(record: RagRecord, earlier: Sequence[RagRecord], join_turns: int = 5) -> RagRecord:
    """``record`` given its conversation's ``earlier`` turns as history, with their own
    documents (the last ``join_turns`` turns') as evidence, when it has no history of its
    own: what the collector does for a live turn whose spans carry none."""
    if record.history or not earlier:
        return record
    history = joined_history((past.turn, past.question, past.answer) for past in earlier)
    carried = [
        Document(id=d.id, content=d.content,
                 source=DocumentSource(kind="history", turn=past.turn, index=index,
                                       tool=d.source.tool if d.source else ""))
        for past in (earlier[-join_turns:] if join_turns else [])
        for index, d in enumerate(x for x in past.documents if not x.carried)
    ]  # fmt: skip
    return record.model_copy(
        update={
            "history": history,
            "documents": [*record.documents, *carried],
            "standalone_question": standalone(record.question, history),
        }
    )
