"""The collector's own Prometheus series (intake, assembly, evaluation health).

Every series is created against an injected registry so tests use a fresh
``CollectorRegistry()``; label values are fixed enumerations or bounded by the
caller (see :class:`LabelLimiter`).
"""

from __future__ import annotations

import threading

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

# Dropped-data reasons (bounded enumeration for ragpulse_dropped_total{reason}).
DROP_MALFORMED = "malformed_body"
DROP_TOO_DEEP = "nesting_too_deep"  # JSON or attribute values nested beyond the limit
DROP_TOO_LARGE = "body_too_large"
DROP_UNSUPPORTED = "unsupported_media_type"
DROP_UNAUTHORIZED = "unauthorized"
DROP_INVALID_SPAN = "invalid_span"
DROP_SPANS_PER_TRACE = "spans_per_trace_limit"
DROP_LATE_SPAN = "late_span"
# OTLP log records (GenAI events) joined to their spans; a reason per way one is lost.
DROP_LOG_WITHOUT_TRACE = "log_without_trace"  # no trace id: nothing to join it to
DROP_LOG_INVALID = "log_invalid"  # a trace or span id of the wrong length
DROP_LOG_UNJOINED = "log_unjoined"  # its trace closed without a span of that span id
DROP_LOG_LATE = "log_late"  # arrived after its trace was closed
DROP_LOG_PER_TRACE = "log_per_trace_limit"  # bounded by assembly.max_spans_per_trace
DROP_REASONS = (
    DROP_MALFORMED, DROP_TOO_DEEP, DROP_TOO_LARGE, DROP_UNSUPPORTED, DROP_UNAUTHORIZED,
    DROP_INVALID_SPAN, DROP_SPANS_PER_TRACE, DROP_LATE_SPAN,
    DROP_LOG_WITHOUT_TRACE, DROP_LOG_INVALID, DROP_LOG_UNJOINED, DROP_LOG_LATE,
    DROP_LOG_PER_TRACE,
)  # fmt: skip
"""The reasons the collector drops data for: their ``ragpulse_dropped_total`` series exist
at 0 from the start, so a quiet collector shows 0 rather than no data."""
TRACE_SKIP_REASONS = ("no_rag_shape", "no_question", "extraction_error")
"""Why a completed trace yields no record (the collector's extraction says which):
``ragpulse_traces_skipped_total`` exists at 0 for each from the start."""

LATENCY_BUCKETS = (0.0001, 0.0005, 0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0)


class JudgeMetrics:
    """The judge tier's series: declared with the collector's, so dashboards and alerts find
    them before (or without) a first judge call."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.calls = Counter(
            "ragpulse_judge_calls",
            "Judge API calls by outcome (ok, repaired, invalid_output, timeout, ...).",
            ["model", "prompt", "outcome"],
            registry=registry,
        )
        self.tokens = Counter(
            "ragpulse_judge_tokens",
            "Tokens reported by the judge's usage, by kind (prompt, completion; cached_prompt: "
            "prompt tokens the server read from its prefix cache, also counted in prompt).",
            ["model", "kind"],
            registry=registry,
        )
        self.latency = Histogram(
            "ragpulse_judge_latency_seconds",
            "Latency of one judge call, retries included.",
            ["model", "prompt"],
            buckets=(0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
            registry=registry,
        )
        self.cache = Counter(
            "ragpulse_judge_cache",
            "Judge cache lookups (hit, miss).",
            ["result"],
            registry=registry,
        )
        self.retries = Counter(
            "ragpulse_judge_http_retryable_responses",
            "429 and 5xx responses seen (the client retries them, honouring Retry-After).",
            ["status"],
            registry=registry,
        )
        self.skipped = Counter(
            "ragpulse_judge_skipped",
            "Records a judge metric did not evaluate, by reason (budget_calls, budget_tokens).",
            ["metric", "reason"],
            registry=registry,
        )


class CollectorMetrics:
    """Counters, gauges and histograms describing the collector itself."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "ragpulse_receiver_requests",
            "OTLP export requests received, by outcome.",
            ["outcome"],
            registry=r,
        )
        self.spans_received = Counter(
            "ragpulse_spans_received", "Spans decoded from any source.", registry=r
        )
        self.log_records_received = Counter(
            "ragpulse_log_records_received",
            "OTLP log records decoded (HTTP /v1/logs or gRPC LogsService).",
            registry=r,
        )
        self.traces_completed = Counter(
            "ragpulse_traces_completed",
            "Traces closed by the assembler, by what closed them: quiet (root span and "
            "assembly.grace_s), idle (no root, assembly.idle_s of quiet), max_trace "
            "(assembly.max_trace_s), open_traces and held_bytes (closed to make room), "
            "shutdown.",
            ["trigger"],
            registry=r,
        )
        self.traces_reopened = Counter(
            "ragpulse_traces_reopened",
            "Closed traces reopened by a span that arrived late (kept for "
            "assembly.keep_closed_s): their records are rebuilt as revisions.",
            registry=r,
        )
        self.closed_kept = Gauge(
            "ragpulse_closed_traces_kept",
            "Closed traces whose spans are kept for late spans to revise their records.",
            registry=r,
        )
        self.closed_kept_bytes = Gauge(
            "ragpulse_closed_traces_kept_bytes",
            "OTLP bytes of the closed traces kept for late spans (within "
            "assembly.max_held_bytes, what open and waiting traces leave).",
            registry=r,
        )
        self.partial_records = Counter(
            "ragpulse_partial_records",
            "Records built from a trace whose root span had not arrived (each build), by "
            "why the trace was closed (idle, max_trace, open_traces, held_bytes, shutdown).",
            ["reason"],
            registry=r,
        )
        self.record_revisions = Counter(
            "ragpulse_record_revisions",
            "Records rebuilt from a reopened trace, by outcome: exported (a revision went "
            "to the sinks), first (the earlier build had not been exported yet: this one "
            "goes out instead), unchanged (the same record: nothing exported).",
            ["outcome"],
            registry=r,
        )
        self.traces_skipped = Counter(
            "ragpulse_traces_skipped",
            "Completed traces that yielded no RAG record, by reason.",
            ["reason"],
            registry=r,
        )
        self.coerced = Counter(
            "ragpulse_coerced_values",
            "Span attribute values of the wrong type that were converted or dropped while "
            "reading a record, by field (each record lists them in ragpulse.coerced).",
            ["field"],
            registry=r,
        )
        self.conversations = Counter(
            "ragpulse_conversations",
            "Conversations by what became of them: closed (a record exported), revised (a "
            "closed one resumed and exported again), single_turn (one turn: no record), "
            "evicted (closed early past conversations.max_open).",
            ["outcome"],
            registry=r,
        )
        self.conversations_open = Gauge(
            "ragpulse_conversations_open",
            "Conversations held: open, and closed ones kept for resuming.",
            registry=r,
        )
        self.conversations_sampled = Counter(
            "ragpulse_conversations_sampled",
            "Closed conversations a costly tier (the judge) was chosen for, by why (base_rate, "
            "route_rate, priority:<rule>), or skipped:<reason> when it did not evaluate them "
            "(queue_full, deadline, shutdown, unavailable, superseded by a later revision).",
            ["tier", "reason"],
            registry=r,
        )
        self.conversation_turns_dropped = Counter(
            "ragpulse_conversation_turns_dropped",
            "Turns of a conversation past conversations.max_turns: counted, not kept.",
            registry=r,
        )
        self.records_evaluated = Counter(
            "ragpulse_records_evaluated", "RAG records scored and handed to sinks.", registry=r
        )
        self.dropped = Counter(
            "ragpulse_dropped",
            "Spans, bodies or records deliberately dropped, by reason.",
            ["reason"],
            registry=r,
        )
        self.evaluator_errors = Counter(
            "ragpulse_evaluator_errors",
            "Evaluator failures (the record gets an error result).",
            ["metric", "method"],
            registry=r,
        )
        self.evaluator_duration = Histogram(
            "ragpulse_evaluator_duration_seconds",
            "Wall time of one evaluator call over one batch of records.",
            ["metric", "method"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.evaluator_available = Gauge(
            "ragpulse_evaluator_available",
            "1 when the evaluator loaded and runs, 0 when disabled (missing model or extra).",
            ["metric", "method"],
            registry=r,
        )
        self.judge = JudgeMetrics(r)
        self.evaluator_info = Gauge(
            "ragpulse_evaluator_info",
            "1 per loaded evaluator: its tier and which way its score is good (dashboards "
            "join on metric and method to colour risks and qualities the right way).",
            ["metric", "method", "tier", "direction"],
            registry=r,
        )
        self.model_placement = Gauge(
            "ragpulse_model_device_info",
            "1 per loaded model-tier evaluator that runs a model: the device it runs on (cpu, "
            "cuda:N, mps) and its number format (fp32, bf16, fp16; int8 for quantised onnx).",
            ["metric", "method", "device", "dtype"],
            registry=r,
        )
        self.sampling_rate = Gauge(
            "ragpulse_sampling_rate",
            "The share of records a costly tier samples by rate now (the base rate; under "
            "evaluation.model.rate auto, the trace-id threshold that follows the tier's "
            "capacity). Priority rules and route rates add to it.",
            ["tier"],
            registry=r,
        )
        self.sampled = Counter(
            "ragpulse_sampled",
            "Records each tier was chosen for, by why (all, base_rate, route_rate, auto_rate, "
            "priority:<rule>), or skipped:<reason> when the tier did not evaluate it.",
            ["tier", "reason"],
            registry=r,
        )
        self.feedback = Counter(
            "ragpulse_feedback",
            "User feedback spans by how they joined (in_window, late, waiting, unmatched, "
            "invalid).",
            ["joined"],
            registry=r,
        )
        self.tier_skipped = Counter(
            "ragpulse_tier_skipped",
            "Records a tier was chosen for but did not evaluate, by reason.",
            ["tier", "reason"],
            registry=r,
        )
        self.tier_pending = Gauge(
            "ragpulse_tier_pending",
            "Records a costly tier has now, queued or being evaluated (their cheap results "
            "are exported within evaluation.max_export_delay_s; the tier's follow).",
            ["tier"],
            registry=r,
        )
        self.intake_refused = Counter(
            "ragpulse_intake_refused",
            "Export requests (and Kafka messages, held back) refused before acceptance "
            "because a bound was near, by bound (open_traces, held_bytes, backlog): the "
            "sender was told to retry (HTTP 503 + Retry-After, gRPC UNAVAILABLE + RetryInfo).",
            ["bound"],
            registry=r,
        )
        self.held_bytes = Gauge(
            "ragpulse_held_bytes",
            "OTLP bytes held by open traces and completed traces waiting for evaluation.",
            registry=r,
        )
        self.sink_errors = Counter(
            "ragpulse_sink_errors",
            "Exceptions raised by sinks, and exports a sink could not deliver.",
            ["sink"],
            registry=r,
        )
        self.sink_items = Counter(
            "ragpulse_sink_items",
            "Items (annotations, assessments, scores) a tracing-tool sink handled, by outcome "
            "(delivered, failed, dropped: the sink's queue was full; and of the delivered "
            "items whose span was read back, no_target: the tool does not have the span they "
            "judge, unchecked: the tool did not answer the read-back).",
            ["sink", "outcome"],
            registry=r,
        )
        self.sink_checks = Counter(
            "ragpulse_sink_checks",
            "Requests a tracing-tool sink sent to read back the spans it judged (verify_after_s), "
            "by outcome (ok; retried: network error, 408, 425, 429, 5xx; too_large; failed).",
            ["sink", "outcome"],
            registry=r,
        )
        self.sink_retries = Counter(
            "ragpulse_sink_retries",
            "Requests a tracing-tool sink sent again (429, 5xx, network errors, the evaluated "
            "trace not in the tool yet).",
            ["sink"],
            registry=r,
        )
        self.open_traces = Gauge(
            "ragpulse_open_traces", "Traces being assembled right now.", registry=r
        )
        self.eval_backlog = Gauge(
            "ragpulse_eval_backlog_traces",
            "Completed traces waiting for evaluation.",
            registry=r,
        )
        self.trace_assembly_seconds = Histogram(
            "ragpulse_trace_assembly_seconds",
            "Time from a trace's first span arriving to its completion.",
            buckets=(0.1, 0.5, 1, 2, 5, 10, 30, 60, 120),
            registry=r,
        )
        # The known label sets exist at 0 from the start: a quiet system shows 0, and the
        # first event is a visible step of the rate rather than a series appearing.
        for reason in DROP_REASONS:
            self.dropped.labels(reason)
        for reason in TRACE_SKIP_REASONS:
            self.traces_skipped.labels(reason)
        self._evaluators: dict[tuple[str, str], None] = {}
        self._evaluators_lock = threading.Lock()

    def evaluator_loaded(self, metric: str, method: str) -> None:
        """An evaluator that runs: its error counter exists at 0, and the sinks that count
        results by evaluator (the Prometheus sink's ``ragpulse_eval_results_total``) find
        it in :meth:`loaded_evaluators`."""
        self.evaluator_errors.labels(metric, method)
        with self._evaluators_lock:
            self._evaluators[(metric, method)] = None

    def loaded_evaluators(self) -> list[tuple[str, str]]:
        """(metric, method) of every evaluator loaded so far, in load order."""
        with self._evaluators_lock:
            return list(self._evaluators)


class LabelLimiter:
    """Bounds a label's cardinality: an allow-list, else the first ``max_values`` seen.

    Values beyond the bound fold into ``other`` so that a route built from user
    input (``/item/123``) cannot explode the series count.
    """

    OTHER = "other"

    def __init__(self, allow: list[str] | None = None, max_values: int = 50) -> None:
        self._allow = frozenset(allow or ())
        self._max = max_values
        self._seen: set[str] = set()
        self._lock = threading.Lock()

    def __call__(self, value: str | None) -> str:
        if not value:
            return "none"
        if self._allow:
            return value if value in self._allow else self.OTHER
        if value in self._seen:
            return value
        with self._lock:
            if len(self._seen) < self._max:
                self._seen.add(value)
                return value
        return self.OTHER


class PairLimiter:
    """Bounds the (service, route) pairs a labelled series can take.

    Each label alone is bounded by a :class:`LabelLimiter`, but their product is
    not: 20 services x 50 routes would let every metric/method grow a thousand
    histograms. Past ``max_pairs`` distinct pairs, a new pair keeps its service
    and folds its route into ``other``, so the pairs stay within
    ``max_pairs + services`` (one ``(service, other)`` each).
    """

    def __init__(self, max_pairs: int) -> None:
        self._max = max_pairs
        self._seen: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def __call__(self, service: str, route: str) -> str:
        """The route to use for ``service``: ``route`` itself, or ``other`` past the bound."""
        pair = (service, route)
        if pair in self._seen:
            return route
        with self._lock:
            if len(self._seen) < self._max:
                self._seen.add(pair)
                return route
        return LabelLimiter.OTHER
