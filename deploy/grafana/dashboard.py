"""The ragpulse overview dashboard, as code (grafana-foundation-sdk, Grafana 11 line).

Every query reads series that `ragpulse serve` exports or recording rules from
deploy/prometheus/recording.rules.yaml; tests/live/test_dashboard.py checks both, and
that each query parses as PromQL. Regenerate the JSON with
`python deploy/build.py` after editing.
"""

from __future__ import annotations

import json
from typing import Any

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import heatmap, prometheus, stat, table, timeseries
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

UID = "ragpulse-overview"
DS = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
# Filters every score query takes from the dashboard's variables.
SEL = 'service=~"$service", route=~"$route"'
RATE = "$__rate_interval"
SR = "metric_method_service_route:ragpulse_eval_score"  # recording-rule prefix

# (metric, title, what a high score means) for the per-metric rows.
METRICS: list[tuple[str, str, str]] = [
    ("faithfulness", "Faithfulness", "answer supported by the documents"),
    ("context_relevance", "Context relevance", "documents match the question"),
    ("answer_relevance", "Answer relevance", "answer addresses the question"),
    ("answer_reward", "Answer reward", "reward model's preference (opt-in)"),
    ("injection", "Injection risk", "risk of a prompt injection (a detection)"),
    ("refusal", "Refusal", "answer declines or does not know (a detection)"),
    ("consistency", "Consistency", "answer agrees with the conversation's earlier answers"),
]


def query(expr: str, legend: str = "", ref: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref).datasource(DS)


def series_panel(title: str, unit: str = "short", width: int = 12) -> timeseries.Panel:
    return (
        timeseries.Panel()
        .title(title)
        .datasource(DS)
        .unit(unit)
        .span(width)
        .height(8)
        .fill_opacity(10)
    )


def score_panel(title: str) -> timeseries.Panel:
    return series_panel(title, "percentunit").min(0).max(1)


def stat_panel(title: str, expr: str, unit: str = "short") -> stat.Panel:
    return (
        stat.Panel()
        .title(title)
        .datasource(DS)
        .unit(unit)
        .span(4)
        .height(4)
        .with_target(query(expr))
    )


def overview_row(d: dash.Dashboard) -> None:
    d.with_row(dash.Row("Traffic"))
    for title, expr, unit in [
        ("Spans received /s", f"sum(rate(ragpulse_spans_received_total[{RATE}]))", "reqps"),
        ("Records evaluated /s", f"sum(rate(ragpulse_records_evaluated_total[{RATE}]))", "reqps"),
        ("Model-tier share", 'tier:ragpulse_sampled:share5m{tier="model"}', "percentunit"),
        ("Judge-tier share", 'tier:ragpulse_sampled:share5m{tier="judge"}', "percentunit"),
        ("Open traces", "sum(ragpulse_open_traces)", "short"),
        ("Kafka lag (messages)", "sum(topic:ragpulse_kafka_consumer_lag:sum)", "short"),
    ]:
        d.with_panel(stat_panel(title, expr, unit))
    d.with_panel(
        series_panel("Traces and records /s", "reqps")
        .with_target(query(f"sum(rate(ragpulse_spans_received_total[{RATE}]))", "spans", "A"))
        .with_target(
            query(
                f"sum by (trigger) (rate(ragpulse_traces_completed_total[{RATE}]))",
                "traces closed ({{trigger}})",
                "B",
            )
        )
        .with_target(
            query(f"sum(rate(ragpulse_records_evaluated_total[{RATE}]))", "records evaluated", "C")
        )
    )
    d.with_panel(
        series_panel("Skipped and dropped /s", "reqps")
        .with_target(
            query(
                f"sum by (reason) (rate(ragpulse_traces_skipped_total[{RATE}]))",
                "skipped: {{reason}}",
                "A",
            )
        )
        .with_target(
            query(
                f"sum by (reason) (rate(ragpulse_dropped_total[{RATE}]))",
                "dropped: {{reason}}",
                "B",
            )
        )
    )
    d.with_panel(
        series_panel("Sampled share by tier", "percentunit").with_target(
            query("tier:ragpulse_sampled:share5m", "{{tier}}")
        )
    )
    d.with_panel(
        series_panel("Sampling reasons /s", "reqps").with_target(
            query(
                f'sum by (tier, reason) (rate(ragpulse_sampled_total{{tier!="cheap"}}[{RATE}]))',
                "{{tier}}: {{reason}}",
            )
        )
    )


def metric_row(d: dash.Dashboard, metric: str, title: str, meaning: str) -> None:
    m = f'metric="{metric}", {SEL}'
    d.with_row(dash.Row(f"{title} ({meaning})"))
    # Exemplars ride on the histogram buckets, so the trend queries the buckets
    # (p50); the datasource turns each exemplar's trace_id into a trace link.
    d.with_panel(
        score_panel(f"{title}: median and mean by method (dots: exemplar traces)")
        .with_target(
            query(
                f"histogram_quantile(0.5, sum by (le, method) "
                f"(rate(ragpulse_eval_score_bucket{{{m}}}[{RATE}])))",
                "p50 {{method}}",
                "A",
            ).exemplar(True)
        )
        .with_target(
            query(
                f"sum by (method) (rate(ragpulse_eval_score_sum{{{m}}}[{RATE}]))"
                f" / sum by (method) (rate(ragpulse_eval_score_count{{{m}}}[{RATE}]))",
                "mean {{method}}",
                "B",
            )
        )
        .with_target(
            query(
                f"avg by (method) ({SR}:mean1h_avg1d{{{m}}})",
                "1-day baseline {{method}}",
                "C",
            )
        )
        .span(8)
    )
    d.with_panel(
        heatmap.Panel()
        .title(f"{title}: score distribution")
        .datasource(DS)
        .span(8)
        .height(8)
        .calculate(False)
        .with_target(
            query(f"sum by (le) (increase(ragpulse_eval_score_bucket{{{m}}}[{RATE}]))", "{{le}}")
            .format(PromQueryFormat.HEATMAP)
            .exemplar(True)
        )
    )
    d.with_panel(
        score_panel(f"{title}: failure ratio by route (5m)")
        .with_target(query(f"{SR}:failure_ratio5m{{{m}}}", "{{service}} {{route}} {{method}}"))
        .span(8)
    )


def injection_row(d: dash.Dashboard) -> None:
    d.with_row(dash.Row("Injections by location"))
    d.with_panel(
        series_panel("Injection hits /s by location", "reqps").with_target(
            query(f"sum by (where) (rate(ragpulse_injection_detected_total[{RATE}]))", "{{where}}")
        )
    )
    d.with_panel(
        series_panel("Share of records with an injection (10m) vs 1-day average", "percentunit")
        .with_target(query("where:ragpulse_injection_detected:ratio10m", "{{where}}", "A"))
        .with_target(
            query("where:ragpulse_injection_detected:ratio10m_avg1d", "{{where}} 1-day avg", "B")
        )
    )


AGENT_SIGNALS = "tool_error|tool_loop|unsupported_answer|agent_steps|injection_followed"
"""The agent evaluators' metrics (every one lower is better)."""


def agents_row(d: dash.Dashboard) -> None:
    """Agent turns: steps, tool calls and their failures, loops, unsupported answers,
    injections that came in through a tool's result and the turns that followed them."""
    svc = 'service=~"$service"'
    signals = f'metric=~"{AGENT_SIGNALS}", {SEL}'
    d.with_row(dash.Row("Agents (tool calls, loops, unsupported answers, injections via tools)"))
    d.with_panel(
        series_panel("Agent turns /s and steps per turn", "short", 8)
        .with_target(
            query(f"sum by (service) (rate(ragpulse_agent_turns_total{{{svc}}}[{RATE}]))",
                  "turns/s {{service}}", "A")
        )
        .with_target(
            query("histogram_quantile(0.5, sum by (le) "
                  f"(rate(ragpulse_agent_steps_bucket{{{svc}}}[{RATE}])))", "steps p50", "B")
        )
        .with_target(
            query("histogram_quantile(0.95, sum by (le) "
                  f"(rate(ragpulse_agent_steps_bucket{{{svc}}}[{RATE}])))", "steps p95", "C")
        )
    )  # fmt: skip
    d.with_panel(
        series_panel("Tool calls /s by tool and outcome", "reqps", 8).with_target(
            query(
                f"sum by (tool, outcome) (rate(ragpulse_agent_tool_calls_total{{{svc}}}[{RATE}]))",
                "{{tool}}: {{outcome}}",
            )
        )
    )
    d.with_panel(
        score_panel("Tool errors: share of calls that failed, by tool (15m)")
        .with_target(
            query(f"service_tool:ragpulse_agent_tool_calls:error_ratio15m{{{svc}}}",
                  "{{service}} {{tool}}")
        )
        .span(8)
    )  # fmt: skip
    d.with_panel(
        score_panel("Agent signals: mean and p90 by metric (dots: exemplar traces)")
        .with_target(
            query(
                f"sum by (metric, method) (rate(ragpulse_eval_score_sum{{{signals}}}[{RATE}])) / "
                f"sum by (metric, method) (rate(ragpulse_eval_score_count{{{signals}}}[{RATE}]))",
                "mean {{metric}}/{{method}}",
                "A",
            )
        )
        .with_target(
            query(
                "histogram_quantile(0.9, sum by (le, metric, method) "
                f"(rate(ragpulse_eval_score_bucket{{{signals}}}[{RATE}])))",
                "p90 {{metric}}/{{method}}",
                "B",
            ).exemplar(True)
        )
        .span(8)
    )

    def flagged(metric: str, le: str) -> str:
        m = f'metric="{metric}", {SEL}'
        return (
            f'1 - sum(rate(ragpulse_eval_score_bucket{{{m}, le="{le}"}}[{RATE}]))'
            f" / sum(rate(ragpulse_eval_score_count{{{m}}}[{RATE}]))"
        )

    d.with_panel(
        score_panel("Share of agent turns flagged")
        .with_target(query(flagged("tool_error", "0.1"), "a tool call failed (over 10%)", "A"))
        .with_target(query(flagged("tool_loop", "0.1"), "calls repeated (over 10%)", "B"))
        .with_target(
            query(flagged("unsupported_answer", "0.7"), "answer unsupported by any tool", "C")
        )
        .span(8)
    )
    d.with_panel(
        series_panel("Injections via tools /s by tool, and hijacked turns", "short", 8)
        .with_target(
            query(
                f"sum by (tool) (rate(ragpulse_agent_tool_injections_total{{{svc}}}[{RATE}]))",
                "injection in {{tool}}'s result",
                "A",
            )
        )
        .with_target(
            query(
                "sum by (service) (increase("
                f"instance_service_route:ragpulse_agent_hijacked_turns:count{{{svc}}}[1h]))",
                "hijacked turns in the last hour: {{service}}",
                "B",
            )
        )
    )


CONVERSATION_METRICS = (
    "user_frustration|abandonment|conversation_groundedness|conversation_injection|"
    "conversation_tool_errors|conversation_completeness|knowledge_retention"
)
"""The conversation evaluators' metrics (scored once per closed conversation record)."""


def conversations_row(d: dash.Dashboard) -> None:
    """Closed conversations: how many, how long, how many left the user frustrated, and
    the conversation metrics' scores (exemplars: each conversation's first trace)."""
    svc = 'service=~"$service"'
    metrics = f'metric=~"{CONVERSATION_METRICS}", {SEL}'
    d.with_row(dash.Row("Conversations (closed records, turns, frustration)"))
    d.with_panel(
        series_panel(
            "Conversations closed /s by outcome and why they closed", "reqps", 8
        ).with_target(
            query(
                "sum by (outcome, closed_by) "
                f"(rate(ragpulse_conversation_records_total{{{SEL}}}[{RATE}]))",
                "{{outcome}}: {{closed_by}}",
            )
        )
    )
    d.with_panel(
        series_panel("Turns per conversation", "short", 8)
        .with_target(
            query("histogram_quantile(0.5, sum by (le) "
                  f"(rate(ragpulse_conversation_turns_bucket{{{SEL}}}[{RATE}])))", "p50", "A")
        )
        .with_target(
            query("histogram_quantile(0.9, sum by (le) "
                  f"(rate(ragpulse_conversation_turns_bucket{{{SEL}}}[{RATE}])))", "p90", "B")
        )
    )  # fmt: skip
    d.with_panel(
        score_panel("Share of conversations frustrated (1h) vs 1-day average")
        .with_target(
            query(f"service_method:ragpulse_conversation_frustrated:ratio1h{{{svc}}}",
                  "{{service}} {{method}}", "A")
        )
        .with_target(
            query(f"service_method:ragpulse_conversation_frustrated:ratio1h_avg1d{{{svc}}}",
                  "{{service}} {{method}} 1-day avg", "B")
        )
        .span(8)
    )  # fmt: skip
    d.with_panel(
        score_panel("Conversation metrics: mean and p90 (dots: the conversations' first traces)")
        .with_target(
            query(
                f"sum by (metric, method) (rate(ragpulse_eval_score_sum{{{metrics}}}[{RATE}])) / "
                f"sum by (metric, method) (rate(ragpulse_eval_score_count{{{metrics}}}[{RATE}]))",
                "mean {{metric}}/{{method}}",
                "A",
            )
        )
        .with_target(
            query(
                "histogram_quantile(0.9, sum by (le, metric, method) "
                f"(rate(ragpulse_eval_score_bucket{{{metrics}}}[{RATE}])))",
                "p90 {{metric}}/{{method}}",
                "B",
            ).exemplar(True)
        )
        .span(24)
    )


def worst_routes_row(d: dash.Dashboard) -> None:
    d.with_row(dash.Row("Worst routes (last hour)"))
    for metric, title in [("faithfulness", "Faithfulness"), ("context_relevance", "Relevance")]:
        d.with_panel(
            table.Panel()
            .title(f"{title}: lowest 1h mean")
            .datasource(DS)
            .span(12)
            .height(8)
            .unit("percentunit")
            .with_target(
                query(f'bottomk(10, {SR}:mean1h{{metric="{metric}", {SEL}}})')
                .instant()
                .format(PromQueryFormat.TABLE)
            )
        )


def judge_row(d: dash.Dashboard) -> None:
    d.with_row(dash.Row("LLM judge: cost and budget"))
    d.with_panel(
        series_panel("Judge tokens /s", "short", 8).with_target(
            query("model_kind:ragpulse_judge_tokens:rate5m", "{{model}} {{kind}}")
        )
    )
    d.with_panel(
        series_panel("Judge calls /s by outcome", "reqps", 8).with_target(
            query(f"sum by (outcome) (rate(ragpulse_judge_calls_total[{RATE}]))", "{{outcome}}")
        )
    )
    d.with_panel(
        series_panel("Budget skips /s and cache hit ratio", "short", 8)
        .with_target(
            query(
                f"sum by (metric, reason) (rate(ragpulse_judge_skipped_total[{RATE}]))",
                "skipped {{metric}} ({{reason}})",
                "A",
            )
        )
        .with_target(
            query(
                f'sum(rate(ragpulse_judge_cache_total{{result="hit"}}[{RATE}]))'
                f" / sum(rate(ragpulse_judge_cache_total[{RATE}]))",
                "cache hit ratio",
                "B",
            )
        )
    )
    d.with_panel(
        series_panel("Judge latency p95", "s").with_target(
            query(
                "histogram_quantile(0.95, sum by (le, model) "
                f"(rate(ragpulse_judge_latency_seconds_bucket[{RATE}])))",
                "{{model}}",
            )
        )
    )
    d.with_panel(
        series_panel("Judge tokens per hour", "short").with_target(
            query("sum by (model) (increase(ragpulse_judge_tokens_total[1h]))", "{{model}}")
        )
    )


def health_row(d: dash.Dashboard) -> None:
    d.with_row(dash.Row("Collector health and Kafka lag"))
    d.with_panel(
        series_panel("Kafka consumer lag by partition", "short", 8)
        .with_target(
            query(
                "max by (topic, partition) (ragpulse_kafka_consumer_lag)",
                "{{topic}}/{{partition}}",
                "A",
            )
        )
        .with_target(query("topic:ragpulse_kafka_consumer_lag:sum", "{{topic}} total", "B"))
    )
    d.with_panel(
        series_panel("Backlog, open traces, paused", "short", 8)
        .with_target(query("sum(ragpulse_eval_backlog_traces)", "evaluation backlog", "A"))
        .with_target(query("sum(ragpulse_open_traces)", "open traces", "B"))
        .with_target(query("sum(ragpulse_kafka_paused)", "replicas paused", "C"))
    )
    d.with_panel(
        series_panel("Evaluator error ratio", "percentunit", 8).with_target(
            query("metric_method:ragpulse_eval_results:error_ratio5m", "{{metric}}/{{method}}")
        )
    )
    d.with_panel(
        series_panel("Evaluator latency p95 per batch", "s").with_target(
            query(
                "histogram_quantile(0.95, sum by (le, metric, method) "
                f"(rate(ragpulse_evaluator_duration_seconds_bucket[{RATE}])))",
                "{{metric}}/{{method}}",
            )
        )
    )
    d.with_panel(
        series_panel("Kafka messages /s by outcome", "reqps").with_target(
            query(f"sum by (outcome) (rate(ragpulse_kafka_messages_total[{RATE}]))", "{{outcome}}")
        )
    )


def model_tier_row(d: dash.Dashboard) -> None:
    """Where the model tier runs, the rate it samples at (under ``rate: auto`` it follows
    the tier's capacity) and what it sheds; and the agent turns that outlast assembly's
    bounds, kept as partial records and revised when their late spans come."""
    d.with_row(dash.Row("Model tier and slow turns"))
    d.with_panel(
        table.Panel()
        .title("Model-tier devices")
        .datasource(DS)
        .span(8)
        .height(8)
        .with_target(
            query("max by (metric, method, device, dtype) (ragpulse_model_device_info)")
            .instant()
            .format(PromQueryFormat.TABLE)
        )
    )
    d.with_panel(
        series_panel("Model-tier rate and pending records", "short", 8)
        .with_target(
            query('min(ragpulse_sampling_rate{tier="model"})', "rate now (lowest replica)", "A")
        )
        .with_target(query('sum(ragpulse_tier_pending{tier="model"})', "pending records", "B"))
    )
    d.with_panel(
        series_panel("Model-tier skips /s by reason", "reqps", 8).with_target(
            query(
                f'sum by (reason) (rate(ragpulse_tier_skipped_total{{tier="model"}}[{RATE}]))',
                "{{reason}}",
            )
        )
    )
    d.with_panel(
        series_panel("Partial and revised records /s", "reqps")
        .with_target(
            query(
                f"sum by (reason) (rate(ragpulse_partial_records_total[{RATE}]))",
                "partial ({{reason}})",
                "A",
            )
        )
        .with_target(
            query(
                f"sum by (outcome) (rate(ragpulse_record_revisions_total[{RATE}]))",
                "revision ({{outcome}})",
                "B",
            )
        )
        .with_target(
            query(f"sum(rate(ragpulse_traces_reopened_total[{RATE}]))", "traces reopened", "C")
        )
    )
    d.with_panel(
        series_panel("Closed traces kept for late spans", "bytes").with_target(
            query("sum(ragpulse_closed_traces_kept_bytes)", "OTLP bytes kept")
        )
    )


def variables(d: dash.Dashboard) -> None:
    d.with_variable(dash.DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
    for name, source in [
        ("service", "ragpulse_eval_score_count"),
        ("route", 'ragpulse_eval_score_count{service=~"$service"}'),
    ]:
        d.with_variable(
            dash.QueryVariable(name)
            .label(name)
            .datasource(DS)
            .query(f"label_values({source}, {name})")
            .current(model.VariableOption(selected=True, text="All", value="$__all"))
            .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
            .sort(model.VariableSort.ALPHABETICAL_ASC)
            .multi(True)
            .include_all(True)
            .all_value(".*")
        )


def build() -> dict[str, Any]:
    d = (
        dash.Dashboard("ragpulse: RAG quality overview")
        .uid(UID)
        .tags(["ragpulse", "rag", "llm"])
        .description("Live reference-less scores of RAG traffic, sampling, judge cost, lag.")
        .refresh("30s")
        .time("now-6h", "now")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
    )
    variables(d)
    overview_row(d)
    for metric, title, meaning in METRICS:
        metric_row(d, metric, title, meaning)
    injection_row(d)
    agents_row(d)
    conversations_row(d)
    worst_routes_row(d)
    judge_row(d)
    model_tier_row(d)
    health_row(d)
    encoded: dict[str, Any] = json.loads(JSONEncoder().encode(d.build()))
    return encoded
