"""Scores as Prometheus histograms with trace-id exemplars.

Exemplars appear only in the OpenMetrics exposition, which Prometheus
negotiates on scrape (``--enable-feature=exemplar-storage`` keeps them). Each
bucket shows one exemplar, refreshed at most every ``prometheus_series.EXEMPLAR_EVERY_S``.

Exemplars carry only the trace and span ids (hex), never content. The
``service`` and ``route`` label values come from the app and may hold user input
(``/users/jane@example.com``), so they are redacted (the ``redaction`` section,
path ``prometheus``) before they are bounded and exposed.

Agent turns (records of kind ``agent``) also count in series of their own: turns,
steps per turn (tool and model calls), tool calls by outcome, and turns with an
injection found in a tool's result by that tool. Their ``tool`` label is the tool's
name only when the ``agents.tools`` setting lists it, ``other`` for every other tool,
so that the series stay bounded and every replica labels alike. A (service, tool)
pair's series start at 0 the first time the pair is seen, so that the first error or
injection shows in ``rate()`` / ``increase()``.

A record exported again after a costly tier (an update) adds that tier's scores and
injections; the agent turn was counted when it came first. A record rebuilt from more
spans (a revision) counts in ``ragpulse_records_revised{service,route}``: a histogram
cannot take back what it observed, so each metric's score is observed once per record
(``record_id``): a revision, and the costly tiers' updates of it, add only the scores the
record had not had (a first build without its root had no answer to score, say), and
the agent turn, its steps and injections are counted once; a record exported anew while
remembered (a trace read again after a restart) is not observed twice either. The
records remembered for this are bounded (``OBSERVED_KEPT``, least recent forgotten
first).

Closed conversations (:meth:`PrometheusSink.export_conversation`) count in
``ragpulse_conversation_records{service,route,closed_by,outcome}`` (outcome ``new`` for a
conversation's first record, ``revised`` for each revision: a resumed conversation counts
again, under its own outcome), ``ragpulse_conversation_turns{service,route}`` (turns per
record, a revision observed again) and
``ragpulse_conversation_frustrated{service,route,method}`` (records that a
``user_frustration`` method labelled ``frustrated``; by method, so that a conversation
judged by rules and by the judge counts once per method). Their conversation metrics'
scores go into ``ragpulse_eval_score`` like every other metric's (the metric names are
the conversation metrics' own), with the first turn's trace as exemplar, so that the
score panels, recording rules and alerts take them as they are. A judge's update adds
its scores and frustration only: the record was counted when it came first.

Settings: ``sinks.prometheus`` (:class:`PrometheusSink.Options`).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from pydantic import Field

from ragpulse.config import AgentSettings, RedactionSettings, Settings
from ragpulse.exporters.base import Sink
from ragpulse.exporters.support.prometheus_series import ScoreSeries
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import (
    ConversationRecord,
    EvalResult,
    ExportItem,
    ExportKind,
    RagRecord,
    ToolCall,
)
from ragpulse.redaction import Redactor
from ragpulse.telemetry import LabelLimiter, PairLimiter

_LABEL_CACHE = 10_000
"""Redacted label values remembered (raw -> redacted); past it each value is redacted anew."""
OBSERVED_KEPT = 10_000
"""Records whose observed scores are remembered, so that a revision observes none twice."""
_TURN = "agent_turn"
"""Stands, among a record's observed names, for its agent turn having been counted."""
OTHER_TOOL = "other"
"""The ``tool`` label of every tool that ``agents.tools`` does not list."""
STEP_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 128)
"""Steps (tool calls + model calls) per agent turn: a plain answer is 1, a search and an
answer 3, a runaway loop tens to hundreds."""
TOOL_OUTCOMES = ("ok", "error", "no_result")
TURN_BUCKETS = (2, 3, 4, 5, 6, 8, 10, 15, 20, 30, 50, 100)
"""Turns per conversation record: a record has two turns at least (one turn gets none)."""
FRUSTRATION = "user_frustration"
FRUSTRATED = "frustrated"
"""The label a ``user_frustration`` result carries over its method's threshold."""


def tool_outcome(call: ToolCall) -> str:
    """``error`` (the span's status or an error output), ``no_result`` (the call was made
    and no result was seen: no result on its span nor in a tool message), else ``ok``."""
    if call.status == "error":
        return "error"
    if call.status == "no_result" or (call.status == "unset" and call.result is None):
        return "no_result"
    return "ok"


def injection_locations(result: EvalResult) -> set[str]:
    """``question`` and/or ``document`` for an injection result that fired."""
    if result.label != "injection":
        return set()
    findings = result.details.get("findings")
    if not isinstance(findings, list):  # a plug-in's malformed details count nothing
        return set()
    where = {str(f.get("where", "")).split(":")[0] for f in findings if isinstance(f, dict)}
    return {w for w in where if w in ("question", "document")}


class PrometheusSink(Sink["PrometheusSink.Options"]):
    name = "prometheus"
    default_enabled = True

    class Options(PluginOptions):
        """Label bounds of the score histograms.

        ``ragpulse_eval_score`` has at most ``methods x (max_route_pairs + max_services + 1)
        x 14`` series per replica (11 buckets, sum, count, created): with the defaults, about
        6,400 for the 9 methods on by default, about 10,700 with the model tier's 6 more.
        """

        routes: list[str] = Field(
            default_factory=list, description="Route allow-list (else first N)."
        )
        max_routes: int = Field(30, ge=1)
        services: list[str] = Field(default_factory=list)
        max_services: int = Field(10, ge=1)
        max_route_pairs: int = Field(
            40,
            ge=1,
            description="Distinct (service, route) pairs; past it a new pair's route is 'other'.",
        )
        redaction: RedactionSettings = Field(
            default_factory=RedactionSettings,
            description="the top-level redaction section (path prometheus: route/service)",
        )
        agent_tools: list[str] = Field(
            default_factory=list,
            description="the agents.tools setting: tool names kept as the tool label of the "
            "agent series, every other tool being 'other'",
        )

    def __init__(
        self,
        registry: CollectorRegistry,
        settings: Options | None = None,
        redaction: RedactionSettings | None = None,
        agents: AgentSettings | None = None,
        evaluators: Callable[[], Iterable[tuple[str, str]]] | None = None,
    ) -> None:
        """``evaluators``: the (metric, method) of the evaluators that run, whose result
        counters exist at 0 before their first result (:class:`ScoreSeries`)."""
        settings = settings or self.Options()
        update: dict[str, Any] = {}
        if redaction is not None:
            update["redaction"] = redaction
        if agents is not None:
            update["agent_tools"] = list(agents.tools)
        if update:
            settings = settings.model_copy(update=update)
        super().__init__(settings)
        self._tools = frozenset(settings.agent_tools)
        self._tool_pairs: set[tuple[str, str]] = set()  # (service, tool) with series at 0
        self._redactor = Redactor.for_path(settings.redaction, "prometheus")
        self._redacted: dict[str, str] = {}
        self._routes = LabelLimiter(settings.routes, settings.max_routes)
        self._services = LabelLimiter(settings.services, settings.max_services)
        self._pairs = PairLimiter(settings.max_route_pairs)
        self.series = ScoreSeries(registry, evaluators)
        # record id -> the results (metric/method) scored into the histograms, and _TURN.
        self._observed: OrderedDict[str, set[str]] = OrderedDict()
        self.records_revised = Counter(
            "ragpulse_records_revised",
            "Records exported again, rebuilt from more spans (a revision): counted here, "
            "their scores not observed a second time.",
            ["service", "route"],
            registry=registry,
        )
        self.injections = Counter(
            "ragpulse_injection_detected",
            "Records with a prompt injection detected, by where it was found.",
            ["where"],
            registry=registry,
        )
        self.agent_turns = Counter(
            "ragpulse_agent_turns",
            "Agent turns evaluated (records of kind agent).",
            ["service"],
            registry=registry,
        )
        self.agent_steps = Histogram(
            "ragpulse_agent_steps",
            "Steps per agent turn: its tool calls plus its model calls.",
            ["service"],
            buckets=STEP_BUCKETS,
            registry=registry,
        )
        self.agent_tool_calls = Counter(
            "ragpulse_agent_tool_calls",
            "Tool calls of agent turns by outcome (ok, error, no_result); tool is the tool's "
            "name when agents.tools lists it, else other.",
            ["service", "tool", "outcome"],
            registry=registry,
        )
        self.agent_tool_injections = Counter(
            "ragpulse_agent_tool_injections",
            "Agent turns with a prompt injection found in a tool's result, by that tool "
            "(agents.tools, else other).",
            ["service", "tool"],
            registry=registry,
        )

        self.conversation_records = Counter(
            "ragpulse_conversation_records",
            "Conversation records exported, by how the conversation closed (idle, end, "
            "end_of_run, evicted, shutdown) and outcome (new, or revised when a closed "
            "conversation resumed).",
            ["service", "route", "closed_by", "outcome"],
            registry=registry,
        )
        self.conversation_turns = Histogram(
            "ragpulse_conversation_turns",
            "Turns per conversation record (a revision is observed again).",
            ["service", "route"],
            buckets=TURN_BUCKETS,
            registry=registry,
        )
        self.conversation_frustrated = Counter(
            "ragpulse_conversation_frustrated",
            "Conversation records a user_frustration method labelled frustrated, by method.",
            ["service", "route", "method"],
            registry=registry,
        )

    @classmethod
    def section(cls, settings: Settings) -> dict[str, Any]:
        return {
            "redaction": settings.redaction.model_dump(),
            "agent_tools": list(settings.agents.tools),
        }

    @classmethod
    def create(cls, options: PrometheusSink.Options, context: PluginContext) -> PrometheusSink:
        metrics = context.metrics
        return cls(metrics.registry, options, evaluators=metrics.loaded_evaluators)

    def _label(self, value: str | None) -> str | None:
        """``value`` redacted; a dict read for values seen before (labels repeat)."""
        if not value or not self._redactor.enabled:
            return value
        if (known := self._redacted.get(value)) is not None:
            return known
        redacted = self._redactor.redact(value)
        if len(self._redacted) < _LABEL_CACHE:
            self._redacted[value] = redacted
        return redacted

    def export(self, item: ExportItem[RagRecord]) -> None:
        record = item.record
        service = self._services(self._label(record.service))
        route = self._pairs(service, self._routes(self._label(record.route)))
        if item.kind is ExportKind.REVISION:
            self.records_revised.labels(service, route).inc()
        # A record without ids (a hand-made one) has no identity to be observed once by.
        identified = bool(record.trace_id and record.span_id)
        observed = self._observed_of(record.record_id, item.kind) if identified else set()
        if observed is None:
            return  # a revision of a record no longer remembered: nothing observed twice
        results = [r for r in item.results if r.name not in observed]
        observed.update(r.name for r in results if r.score is not None and not r.error)
        self.series.add(
            results, service, route, {"trace_id": record.trace_id, "span_id": record.span_id}
        )
        for result in results:
            if result.label == "injection":
                for where in injection_locations(result):
                    self.injections.labels(where).inc()
        if record.kind == "agent":
            if item.kind is not ExportKind.UPDATE and _TURN not in observed:
                observed.add(_TURN)
                self._agent_turn(record, service)
            for tool in self._injected_tools(record, results):
                self.agent_tool_injections.labels(service, tool).inc()

    def _observed_of(self, record_id: str, kind: ExportKind) -> set[str] | None:
        """What was observed of the record so far (a new record: nothing); None for a
        revision of a record forgotten meanwhile."""
        observed = self._observed.get(record_id)
        if observed is not None:
            self._observed.move_to_end(record_id)
            return observed
        if kind is ExportKind.REVISION:
            return None
        observed = self._observed[record_id] = set()
        while len(self._observed) > OBSERVED_KEPT:
            self._observed.popitem(last=False)
        return observed

    def export_conversation(self, item: ExportItem[ConversationRecord]) -> None:
        conversation, results = item.record, item.results
        service = self._services(self._label(conversation.service))
        route = self._pairs(service, self._routes(self._label(conversation.route)))
        if conversation.turns:
            first = conversation.first
            exemplar = {"trace_id": first.trace_id, "span_id": first.span_id}
            self.series.add(results, service, route, exemplar)
        for method in {
            r.method for r in results if r.metric == FRUSTRATION and r.label == FRUSTRATED
        }:
            self.conversation_frustrated.labels(service, route, method).inc()
        if item.kind is ExportKind.UPDATE:
            return  # a judge's results for a record counted when it came first
        outcome = "revised" if item.kind is ExportKind.REVISION else "new"
        self.conversation_records.labels(service, route, conversation.closed_by, outcome).inc()
        self.conversation_turns.labels(service, route).observe(len(conversation.turns))

    def _tool(self, name: str) -> str:
        return name if name in self._tools else OTHER_TOOL

    def _agent_turn(self, record: RagRecord, service: str) -> None:
        """The turn, its steps and its tool calls: once, when the turn is first exported."""
        self.agent_turns.labels(service).inc()
        self.agent_steps.labels(service).observe(len(record.tool_calls) + record.model_calls)
        counts: dict[tuple[str, str], int] = {}
        for call in record.tool_calls:
            key = (self._tool(call.name), tool_outcome(call))
            counts[key] = counts.get(key, 0) + 1
        for tool in {tool for tool, _ in counts}:
            if (service, tool) not in self._tool_pairs:  # bounded: services x (tools + 1)
                self._tool_pairs.add((service, tool))
                for outcome in TOOL_OUTCOMES:
                    self.agent_tool_calls.labels(service, tool, outcome)
                self.agent_tool_injections.labels(service, tool)
        for (tool, outcome), count in counts.items():  # one locked increment per series
            self.agent_tool_calls.labels(service, tool, outcome).inc(count)

    def _injected_tools(self, record: RagRecord, results: Sequence[EvalResult]) -> set[str]:
        """The tools (labels) whose results an injection detector flagged, over every
        injection method: a turn counts once per tool."""
        tools: set[str] = set()
        for result in results:
            if result.metric != "injection" or result.label != "injection":
                continue
            findings = result.details.get("findings")
            for finding in findings if isinstance(findings, list) else ():
                where = finding.get("where") if isinstance(finding, dict) else None
                index = where.removeprefix("document:") if isinstance(where, str) else ""
                if index.isdigit() and int(index) < len(record.documents):
                    source = record.documents[int(index)].source
                    if source is not None:
                        tools.add(self._tool(source.tool))
        return tools
