"""Conversations: the turns of a chat session, joined, and closed into conversation records.

Every exported turn record that carries a conversation id (``RagRecord.conversation_id``)
is kept in its conversation, its results with it (costly tiers' results and late
feedback join the turn as they come). A conversation closes when no turn came for
``conversations.idle_s``, at once when a turn carries the end marker
(``ragpulse.conversation.end``), at the end of an offline run, or when the collector
stops: it becomes a :class:`~ragpulse.record.ConversationRecord` that the conversation
evaluators score and every sink receives (an export item, ``Sink.export_conversation``). A
conversation of one turn gets no record (its turn record says it all; counted). A closed
conversation is kept for ``conversations.keep_closed_s``: if it resumes, its record is
revised (``revision`` + 1, the same identifier, exported as a ``revision``: a backend
replaces the earlier one).

Before a turn is evaluated, :meth:`ConversationStage.prepare` numbers it when its spans
did not, and joins the earlier turns as its history when its spans carried none (apps
traced by ragpulse's decorators): their questions and answers, and their documents as
evidence (``conversations.join_turns`` turns, bounded). *Earlier* means started earlier
(``start_time_ns``; by the turn numbers when both turns' spans carry one; by arrival for
the same start, as rows without times have). Turns reach the stage out of order (a tool
that serves the newest trace first, an exporter's batches, a slow agent turn), and a
turn never gets a later one as its history or evidence. A turn is scored once, with the
earlier turns that had arrived: one that arrives after a later turn was scored does not
revise that turn's record, but the conversation record, made at close, puts every turn
in its place by start time and numbers the turns numbered on arrival by their place.

With Kafka (``source: kafka``), a conversation's turns pass through different replicas:
the source routes them (:meth:`ConversationStage.hold_elsewhere`) to the conversation
topic instead of this stage keeping them, and the member of the conversation group that
owns their partition feeds them to its stage with :meth:`ConversationStage.add_turn`,
rebuilding conversations read again after a restart with
:meth:`ConversationStage.restore` (see :mod:`ragpulse.collector.conversations.turn_consumer`).

State is bounded: at most ``conversations.max_open`` conversations (open and kept closed;
past it the least recently active one is closed early, ``evicted``), at most
``conversations.max_turns`` turns each; texts are kept cut. Thread-safe.

Costly conversation metrics (the judges) never hold the ticker: a closed conversation
sampled for the judge (its rate drawn from the conversation id, priority rules) is
exported with its cheap results and ``pending``, and the judge's results follow
as an update of the same record from a worker of their own
(:mod:`ragpulse.collector.conversations.tiers`). A stage that was not started (an offline
run, a test driving ``tick``) judges inline instead: one export with every result.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from ragpulse import semconv as sc
from ragpulse.collector.conversations.tiers import (
    ConversationJob,
    CostlyConversations,
    Export,
    evaluate,
    loaded,
)
from ragpulse.collector.evaluate.sampling import SamplingPolicy
from ragpulse.collector.extract.history import joined_history, standalone
from ragpulse.collector.lifecycle import Deadline
from ragpulse.config import ConversationSettings
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.base import ConversationEvaluator, Tier
from ragpulse.plugin_context import PluginContext
from ragpulse.record import (
    ClosedBy,
    ConversationRecord,
    Direction,
    Document,
    DocumentSource,
    EvalResult,
    ExportItem,
    ExportKind,
    RagRecord,
    TurnSummary,
)
from ragpulse.source import TurnRoute
from ragpulse.telemetry import CollectorMetrics

log = logging.getLogger(__name__)

END_MARKER = sc.RAGPULSE_CONVERSATION_END
"""A turn's attribute that closes its conversation at once (true)."""
KEPT_CHARS = 500
"""Characters kept of a turn's question and answer in its conversation's state."""
KEPT_DOCUMENTS = 3
"""Documents kept per turn for joining into a later turn without history."""
KEPT_DOCUMENT_CHARS = 1_000
NUMBERED_KEPT = 10_000
"""Turns remembered as numbered on arrival (a turn is exported within seconds of that)."""


_Result = tuple[str, str, float | None, str | None, Direction]
"""A kept result: metric, method, score, label, direction (a tuple: a pydantic result per
turn and metric would be most of an open conversation's memory)."""


@dataclass(slots=True)
class _Turn:
    """A turn as its conversation holds it, compactly, until the conversation closes."""

    turn: int
    trace_id: str
    span_id: str
    question: str
    answer: str
    start_time_ns: int
    end_time_ns: int
    tool_calls: int
    results: list[_Result]
    documents: list[str]
    on_arrival: bool = False  # numbered here (its spans did not say): renumbered by its place

    def summary(self) -> TurnSummary:
        return TurnSummary(
            turn=self.turn,
            trace_id=self.trace_id,
            span_id=self.span_id,
            question=self.question,
            answer=self.answer,
            start_time_ns=self.start_time_ns,
            end_time_ns=self.end_time_ns,
            results=[
                EvalResult(metric=m, method=k, score=v, label=label, direction=d)
                for m, k, v, label, d in self.results
            ],
            tool_calls=self.tool_calls,
        )

    @classmethod
    def of(cls, summary: TurnSummary, documents: Sequence[str] = ()) -> _Turn:
        """A summary held compactly (number 0: numbered on arrival)."""
        return cls(
            summary.turn, summary.trace_id, summary.span_id,
            summary.question[:KEPT_CHARS], summary.answer[:KEPT_CHARS],
            summary.start_time_ns, summary.end_time_ns, summary.tool_calls,
            _compact(summary.results),
            [d[:KEPT_DOCUMENT_CHARS] for d in documents][:KEPT_DOCUMENTS],
            on_arrival=not summary.turn,
        )  # fmt: skip

    @classmethod
    def of_record(
        cls, record: RagRecord, results: Sequence[EvalResult], *, on_arrival: bool = False
    ) -> _Turn:
        """A turn record held compactly (no pydantic summary on the way)."""
        return cls(
            record.turn or 0, record.trace_id, record.span_id,
            record.question[:KEPT_CHARS], record.answer[:KEPT_CHARS],
            record.start_time_ns, record.end_time_ns, len(record.tool_calls),
            _compact(results), kept_documents(record),
            on_arrival=on_arrival or record.turn is None,
        )  # fmt: skip

    def is_before(self, turn: int | None, start_time_ns: int) -> bool:
        """Whether this turn came before one that started at ``start_time_ns`` (``turn``:
        its number when its spans gave one): by the numbers when both spans gave one, else
        by start time; the same start (rows without times) by arrival: this one, here
        already, came first."""
        if turn is not None and not self.on_arrival:
            return self.turn < turn
        return self.start_time_ns <= start_time_ns


@dataclass
class _Conversation:
    conversation_id: str
    service: str
    route: str | None
    last: float
    turns: dict[tuple[str, str], _Turn] = field(default_factory=dict)
    revision: int = 0  # records exported so far
    closed_at: float | None = None
    dropped: int = 0

    def ordered(self) -> list[_Turn]:
        """The turns in conversation order, those numbered on arrival renumbered by their
        place (a turn that started earlier may have arrived later). Under the stage's lock."""
        turns = _in_order(self.turns.values())
        for place, turn in enumerate(turns, 1):
            if turn.on_arrival:
                turn.turn = place
        return turns


def _in_order(turns: Iterable[_Turn]) -> list[_Turn]:
    """By the numbers their spans gave when every turn has one, else by start time (the
    same start by arrival)."""
    listed = list(turns)
    if any(t.on_arrival for t in listed):
        return sorted(listed, key=lambda t: t.start_time_ns)
    return sorted(listed, key=lambda t: (t.turn, t.start_time_ns))


def _key(turn: _Turn) -> tuple[str, str]:
    return (turn.trace_id, turn.span_id)


def _is_revision(conversation: _Conversation, revision: int) -> bool:
    """Whether ``revision`` is still the conversation's latest record."""
    return conversation.revision == revision


def _compact(results: Sequence[EvalResult]) -> list[_Result]:
    """What a conversation keeps of a turn's results: metric, method, score, label."""
    return [(r.metric, r.method, r.score, r.label, r.direction) for r in results if r.error is None]


def summarize(record: RagRecord, results: Sequence[EvalResult]) -> TurnSummary:
    """What a conversation keeps of a turn: ids, texts cut to ``KEPT_CHARS``, compact
    results. Its number is the record's (0 when it has none: numbered on arrival)."""
    return _Turn.of_record(record, results).summary()


def kept_documents(record: RagRecord) -> list[str]:
    """The turn's own documents (cut) kept for joining into a later turn without history."""
    return [d.content[:KEPT_DOCUMENT_CHARS] for d in record.documents if not d.carried][
        :KEPT_DOCUMENTS
    ]


class ConversationStage:
    """``export`` hands a conversation record to the sinks. ``sampler``, ``context`` and
    ``export_lock`` serve the costly conversation metrics: which conversations they judge
    (default: the context's evaluation settings), what they load with, and the lock every
    export of a conversation record is made under (the sinks', so that a judge update and
    a later revision never cross, and no sink is called by two threads at once)."""

    name = "conversations"

    def __init__(
        self,
        settings: ConversationSettings,
        evaluators: Sequence[ConversationEvaluator],
        export: Export,
        metrics: CollectorMetrics | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        sampler: SamplingPolicy | None = None,
        context: PluginContext | None = None,
        export_lock: AbstractContextManager[Any] | None = None,
    ) -> None:
        self.settings = settings
        self.evaluators = list(evaluators)
        self._export = export
        self._metrics = metrics if metrics is not None else CollectorMetrics()
        self._clock = clock
        self._lock = threading.Lock()
        self._context = context if context is not None else PluginContext()
        self._sampler = sampler or SamplingPolicy(self._context.settings.evaluation)
        self._guard: AbstractContextManager[Any] = export_lock or threading.RLock()
        self._elsewhere: TurnRoute | None = None  # where turns go when not held here (Kafka)
        self._cheap = [e for e in self.evaluators if e.tier == Tier.CHEAP]
        self._costly = {
            tier: CostlyConversations(
                tier, evs, self._out, self._guard,
                self._context.settings.evaluation.tier(
                    "model" if tier is Tier.MODEL else "judge"
                ),
                self._context, self._metrics,
            )
            for tier in (Tier.MODEL, Tier.JUDGE)
            if (evs := [e for e in self.evaluators if e.tier == tier])
        }  # fmt: skip
        self._started = False
        # By last activity, least recent first: open and kept-closed conversations alike.
        self._held: OrderedDict[str, _Conversation] = OrderedDict()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        # Turns this stage numbered by their arrival (their spans did not say), most recent
        # last: where conversations are held elsewhere (Kafka), that holder numbers them.
        self._numbered: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Turns prepared but not yet exported, per conversation: two turns of one
        # conversation in one batch (an app's exporter sends spans every few seconds) are
        # prepared before either is observed, and the second still joins the first.
        self._pending: dict[str, dict[tuple[str, str], _Turn]] = {}
        self._pending_order: OrderedDict[tuple[str, str], str] = OrderedDict()

    # -- the turn, before it is evaluated ------------------------------------------------

    def prepare(self, record: RagRecord) -> RagRecord:
        """``record`` numbered (when its spans did not say) and, when its spans carried no
        history, with its conversation's earlier turns joined as its history: the turns
        held or prepared here that started before it (see the module's doc)."""
        cid = record.conversation_id
        if not cid:
            return record
        key = (record.trace_id, record.span_id)
        with self._lock:
            held = self._held.get(cid)
            turns = held.ordered() if held else []
            known = held.turns.get(key) if held else None
            # Prepared, not exported yet (a turn held already may be prepared again).
            turns += [
                t for k, t in self._pending.get(cid, {}).items() if not held or k not in held.turns
            ]
            earlier = _in_order(
                t
                for t in turns
                if _key(t) != key and t.is_before(record.turn, record.start_time_ns)
            )
        update: dict[str, Any] = {}
        if record.turn is None:
            update["turn"] = known.turn if known else len(earlier) + 1
            self._numbered_here(record)
        if not record.history and earlier and self.settings.join_turns:
            joined = earlier[-self.settings.join_turns :]
            history = joined_history((t.turn, t.question, t.answer) for t in joined)
            carried = [
                Document(
                    content=text,
                    source=DocumentSource(kind="history", turn=t.turn, index=i),
                )
                for t in joined
                for i, text in enumerate(t.documents)
            ]
            update.update(
                history=history,
                documents=[*record.documents, *carried],
                standalone_question=standalone(record.question, history),
            )
        prepared = record.model_copy(update=update) if update else record
        self._hold_pending(cid, key, prepared, on_arrival=record.turn is None)
        return prepared

    def _hold_pending(
        self, cid: str, key: tuple[str, str], record: RagRecord, *, on_arrival: bool
    ) -> None:
        """Remember a prepared turn until its export (bounded: a turn never exported, e.g.
        refused downstream, is forgotten after ``NUMBERED_KEPT`` later ones)."""
        with self._lock:
            self._pending.setdefault(cid, {})[key] = _Turn.of_record(
                record, (), on_arrival=on_arrival
            )
            self._pending_order[key] = cid
            while len(self._pending_order) > NUMBERED_KEPT:
                self._forget_pending(*self._pending_order.popitem(last=False))

    def hold_elsewhere(self, route: TurnRoute) -> None:
        """From now on exported turns and conversation records go to ``route`` as well (the
        Kafka turn topic, read by whoever holds the conversation), turns are not kept
        here, and a stop leaves open conversations open (they are read again). Called
        before the start."""
        self._elsewhere = route

    def turn_exported(
        self,
        record: RagRecord,
        results: Sequence[EvalResult],
        *,
        first: bool,
        replaces: RagRecord | None = None,
    ) -> None:
        """A turn went to the sinks (``first``: its first export, or a revision that
        ``replaces`` the turn exported before; else an update): kept here
        (:meth:`observe`), or routed to where its conversation is held."""
        if self._elsewhere is None:
            self.observe(record, results, replaces=replaces)
            return
        self._elsewhere.turn(record, results, replaces=replaces)
        if first:
            self._forget_prepared(record)

    def _forget_prepared(self, record: RagRecord) -> None:
        """A prepared turn went out without :meth:`observe` (its conversation is held
        elsewhere): forget it here."""
        key = (record.trace_id, record.span_id)
        with self._lock:
            cid = self._pending_order.pop(key, None)
            if cid is not None:
                self._forget_pending(key, cid)

    def _forget_pending(self, key: tuple[str, str], cid: str) -> None:
        """Called with the lock held."""
        turns = self._pending.get(cid)
        if turns is not None:
            turns.pop(key, None)
            if not turns:
                del self._pending[cid]

    def _numbered_here(self, record: RagRecord) -> None:
        with self._lock:
            self._numbered[(record.trace_id, record.span_id)] = None
            while len(self._numbered) > NUMBERED_KEPT:
                self._numbered.popitem(last=False)

    def numbered_on_arrival(self, trace_id: str, span_id: str) -> bool:
        """Whether :meth:`prepare` numbered this turn in order of arrival (recent turns)."""
        with self._lock:
            return (trace_id, span_id) in self._numbered

    # -- every export of a turn -------------------------------------------------------------

    def observe(
        self,
        record: RagRecord,
        results: Sequence[EvalResult],
        *,
        replaces: RagRecord | None = None,
    ) -> None:
        """Keep a turn (its first export) or its later results (an update's); a revision
        (``replaces``: the turn as exported before) takes the earlier turn's place."""
        cid = record.conversation_id
        if not cid:
            return
        numbered = self.numbered_on_arrival(record.trace_id, record.span_id)
        self._keep(
            cid,
            record.service,
            record.route,
            _Turn.of_record(record, results, on_arrival=numbered),
            end=record.attributes.get(END_MARKER) is True,
            replaces=(replaces.trace_id, replaces.span_id) if replaces is not None else None,
        )

    def add_turn(
        self,
        conversation_id: str,
        service: str,
        route: str | None,
        summary: TurnSummary,
        *,
        documents: Sequence[str] = (),
        end: bool = False,
        replaces: str | None = None,
    ) -> None:
        """Keep a turn summarised elsewhere (a replica's export read from the Kafka turn
        topic; :func:`summarize`). ``summary.turn`` 0: numbered here, after the turns held
        that started before it. ``replaces``: the span id of the turn (same trace) that
        this revision of it takes the place of."""
        replaced = (summary.trace_id, replaces) if replaces is not None else None
        self._keep(
            conversation_id, service, route, _Turn.of(summary, documents), end=end,
            replaces=replaced,
        )  # fmt: skip

    def _keep(
        self,
        conversation_id: str,
        service: str,
        route: str | None,
        new: _Turn,
        *,
        end: bool,
        replaces: tuple[str, str] | None = None,
    ) -> None:
        """Keep a turn. A turn kept already gains the results it did not have; a repeat (a
        redelivered trace) changes nothing, so it neither resumes nor revises a closed
        conversation. A revision (``replaces``: the earlier turn's key) takes the earlier
        turn's place and number, with its own results only."""
        closing: list[tuple[_Conversation, ClosedBy]] = []
        key = _key(new)
        with self._lock:
            if self._pending_order.pop(key, None) is not None:
                self._forget_pending(key, conversation_id)
            now = self._clock()
            held = self._held.get(conversation_id)
            if held is not None and replaces is not None:
                earlier = held.turns.pop(replaces, None) or held.turns.pop(key, None)
                if earlier is not None and new.on_arrival:
                    new.turn, new.on_arrival = earlier.turn, earlier.on_arrival
                elif earlier is not None and not new.turn:
                    new.turn = earlier.turn
            turn = held.turns.get(key) if held is not None else None
            if turn is not None:  # an update (a costly tier, feedback): more results
                added = [r for r in new.results if r not in turn.results]
                if not added:
                    return
                turn.results.extend(added)
            if held is None:
                held = self._held[conversation_id] = _Conversation(
                    conversation_id, service, route, now
                )
            elif held.closed_at is not None:
                held.closed_at = None  # it resumes: the next close revises its record
            held.last = now
            self._held.move_to_end(conversation_id)
            if turn is None and len(held.turns) >= self.settings.max_turns:
                held.dropped += 1
                self._metrics.conversation_turns_dropped.inc()
            elif turn is None:
                if not new.turn:  # after the turns held that started before it
                    start = new.start_time_ns
                    new.turn = 1 + sum(t.is_before(None, start) for t in held.turns.values())
                held.turns[key] = new
            if end:
                closing.append((held, "end"))
            closing += self._over_bound()
            self._metrics.conversations_open.set(len(self._held))
        for conversation, why in closing:
            self._close(conversation, why)

    def _over_bound(self) -> list[tuple[_Conversation, ClosedBy]]:
        """Conversations past ``max_open``, least recently active first: an open one is
        closed early (evicted), a kept closed one forgotten. Called with the lock held."""
        out: list[tuple[_Conversation, ClosedBy]] = []
        while len(self._held) > self.settings.max_open:
            _, oldest = self._held.popitem(last=False)
            if oldest.closed_at is None:
                out.append((oldest, "evicted"))
        return out

    # -- closing -----------------------------------------------------------------------------

    def tick(self) -> None:
        """Close the conversations idle for ``idle_s``; forget closed ones past
        ``keep_closed_s``."""
        now = self._clock()
        idle, keep = self.settings.idle_s, self.settings.keep_closed_s
        closing: list[_Conversation] = []
        # ``_held`` is in order of last activity: past the first conversation active within
        # min(idle, keep), none is idle long enough to close or closed long enough to forget.
        recent = min(idle, keep)
        with self._lock:
            forget = []
            for cid, held in self._held.items():
                if now - held.last < recent:
                    break
                closed = held.closed_at
                if closed is None and now - held.last >= idle:
                    held.closed_at = now
                    closing.append(held)
                elif closed is not None and now - closed >= keep:
                    forget.append(cid)
            for cid in forget:
                del self._held[cid]
            self._metrics.conversations_open.set(len(self._held))
        for conversation in closing:
            self._close(conversation, "idle")

    def close_all(self, why: ClosedBy) -> None:
        """Close every open conversation now (the end of an offline run, a shutdown)."""
        with self._lock:
            open_ = [h for h in self._held.values() if h.closed_at is None]
            now = self._clock()
            for held in open_:
                held.closed_at = now
        for conversation in open_:
            self._close(conversation, why)

    # -- state held elsewhere too (the Kafka turn topic) -----------------------------------

    def holds(self, conversation_id: str) -> bool:
        with self._lock:
            return conversation_id in self._held

    def held_ids(self) -> set[str]:
        """The conversations held now, open or kept closed."""
        with self._lock:
            return set(self._held)

    def drop(self, conversation_ids: Iterable[str]) -> int:
        """Forget conversations without closing them (another process holds them now);
        returns how many were held."""
        with self._lock:
            gone = sum(self._held.pop(cid, None) is not None for cid in conversation_ids)
            self._metrics.conversations_open.set(len(self._held))
        return gone

    def restore(self, record: ConversationRecord, closed_ago_s: float) -> bool:
        """Take a conversation's state from its record as exported ``closed_ago_s`` ago (by
        this stage or another), so that a resumed conversation is revised, not started anew.

        Turns held that the record lacks stay, and keep the conversation open; a record
        older than one held (by revision) changes nothing. True when the stage now holds
        what the record says and nothing more: the record alone can rebuild it.
        """
        keys = {(t.trace_id, t.span_id) for t in record.turns}
        closing: list[tuple[_Conversation, ClosedBy]] = []
        with self._lock:
            now = self._clock()
            held = self._held.get(record.conversation_id)
            if held is not None and held.revision >= record.revision:
                return (
                    held.revision == record.revision
                    and held.closed_at is not None
                    and set(held.turns) <= keys
                )
            if held is None:
                if closed_ago_s >= self.settings.keep_closed_s:
                    return True  # past keeping: nothing to hold
                held = self._held[record.conversation_id] = _Conversation(
                    record.conversation_id, record.service, record.route, now
                )
            for summary in record.turns:
                key = (summary.trace_id, summary.span_id)
                turn = held.turns.get(key)
                if turn is None:
                    held.turns[key] = _Turn.of(summary)
                elif len(summary.results) > len(turn.results):
                    held.turns[key] = _Turn.of(summary, turn.documents)
                    held.turns[key].on_arrival = turn.on_arrival
            held.revision = record.revision
            dropped = record.attributes.get(sc.RAGPULSE_CONVERSATION_TURNS_DROPPED)
            held.dropped = max(held.dropped, dropped if isinstance(dropped, int) else 0)
            covered = set(held.turns) <= keys
            if covered:  # closed then, as the record says; else it has resumed since
                held.closed_at = now - closed_ago_s
            self._held.move_to_end(record.conversation_id)
            closing += self._over_bound()
            self._metrics.conversations_open.set(len(self._held))
        for conversation, why in closing:
            self._close(conversation, why)
        return covered

    def _close(self, conversation: _Conversation, why: ClosedBy) -> None:
        with self._lock:
            turns = [t.summary() for t in conversation.ordered()]
            if conversation.closed_at is None:
                conversation.closed_at = self._clock()
            if len(turns) < 2:
                self._metrics.conversations.labels("single_turn").inc()
                return
            conversation.revision += 1
            revision = conversation.revision
        record = ConversationRecord(
            conversation_id=conversation.conversation_id,
            service=conversation.service,
            route=conversation.route,
            turns=turns,
            revision=revision,
            closed_by=why,
            start_time_ns=min(t.start_time_ns for t in turns),
            end_time_ns=max(t.end_time_ns for t in turns),
            attributes={sc.RAGPULSE_CONVERSATION_TURNS_DROPPED: conversation.dropped}
            if conversation.dropped
            else {},
        )
        results = evaluate(self._cheap, record)
        self._metrics.conversations.labels(
            "evicted" if why == "evicted" else "revised" if revision > 1 else "closed"
        ).inc()
        sampled = {
            tier: reason
            for tier, costly in self._costly.items()
            if (reason := self._sampler.conversation_reason(record, tier, results)) is not None
        }
        inline = not self._started  # an offline run, a test: the costly tiers judge now
        if sampled and inline:
            for tier, reason in sampled.items():
                costly = self._costly[tier]
                results += evaluate(loaded(costly.evaluators, self._context), record)
                costly.count(reason)
        reasons = {tier.value: reason for tier, reason in sampled.items()}
        item = ExportItem(
            record,
            results,
            ExportKind.REVISION if revision > 1 else ExportKind.FIRST,
            sampled=reasons,
            pending=() if inline else tuple(reasons),
        )
        with self._guard:
            try:
                self._out(item)
            except Exception:  # the sinks are guarded one by one; this guards the stage
                log.exception("exporting conversation %s failed", conversation.conversation_id)
        if not sampled or inline:
            return
        deadline = time.monotonic()
        for tier, reason in sampled.items():
            costly = self._costly[tier]
            job = ConversationJob(
                record, tier, reason, deadline + costly.max_delay_s,
                partial(_is_revision, conversation, revision), reasons,
            )  # fmt: skip
            refused = costly.offer(job)
            if refused is not None:
                costly.skip(job, refused)

    def _out(self, item: ExportItem[ConversationRecord]) -> None:
        """A conversation record to the sinks, then to where conversations are held (its
        state, for the next holder); called with the export lock held."""
        self._export(item)
        if self._elsewhere is not None:
            self._elsewhere.conversation(item.record, item.results)

    # -- the ticker -----------------------------------------------------------------------

    def start(self) -> None:
        """Load the cheap metrics; start the ticker, and the costly metrics' workers (they
        load their evaluators)."""
        if self._thread is None:
            self._stop.clear()
            self._cheap = load_evaluators_safely(self._cheap, self._context)
            for costly in self._costly.values():
                costly.start()
            self._started = True
            self._thread = threading.Thread(
                target=self._run, name="ragpulse-conversations", daemon=True
            )
            self._thread.start()

    def stop(
        self, deadline: Deadline | None = None, *, close: ClosedBy | None = "shutdown"
    ) -> None:
        """Stop the ticker; close what is open (``close``: why; None, or conversations held
        elsewhere, leaves it open); let the costly metrics judge what is queued until
        ``deadline.drain`` (default 5 s from now), the rest skipped (shutdown)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        if close is not None and self._elsewhere is None:
            self.close_all(close)
        end = deadline.drain if deadline is not None else time.monotonic() + 5.0
        for costly in self._costly.values():
            costly.stop(end)
        self._started = False

    def close(self) -> None:
        pass

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Until the costly metrics have judged (or skipped) every closed conversation."""
        end = time.monotonic() + timeout
        return all(c.wait_idle(max(0.0, end - time.monotonic())) for c in self._costly.values())

    def _run(self) -> None:
        while not self._stop.wait(self.settings.tick_s):
            try:
                self.tick()
            except Exception:
                log.exception("closing idle conversations failed")
