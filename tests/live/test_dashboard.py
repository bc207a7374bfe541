"""deploy/grafana: the committed generated files match their generator; every panel
query is valid PromQL and reads only series ragpulse exports or recording rules."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import yaml
from support.deploy_support import (
    DASHBOARD,
    GRAFANA_ALERTS,
    check_exprs_with_promtool,
    load_build,
    metric_names,
    panel_exprs,
    recorded_names,
    rules,
)

from ragpulse.collector.intake.kafka import KafkaMetrics
from ragpulse.exporters.prometheus import PrometheusSink
from ragpulse.telemetry import CollectorMetrics


def test_generated_files_are_up_to_date() -> None:
    build = load_build()
    stale = [str(p) for p, text in build.generated().items() if p.read_text() != text]
    assert not stale, f"run `python deploy/build.py`: {stale}"
    assert build.main(["--check"]) == 0


def test_dashboard_covers_the_overview() -> None:
    board = json.loads(DASHBOARD.read_text())
    titles = " | ".join(p["title"] for p in board["panels"]).lower()
    topics = ["spans received", "judge-tier share", "faithfulness", "context relevance",
              "injection hits", "lowest 1h mean", "judge tokens", "kafka consumer lag",
              "conversations closed", "share of conversations frustrated",
              "model-tier devices", "partial and revised records"]  # fmt: skip
    for topic in topics:
        assert topic in titles, topic
    exemplar_targets = [
        t for p in board["panels"] for t in p.get("targets", []) if t.get("exemplar")
    ]
    assert exemplar_targets and all(
        "ragpulse_eval_score_bucket" in t["expr"] for t in exemplar_targets
    ), "exemplars live on the histogram buckets"


def test_every_panel_query_parses(tmp_path: Path) -> None:
    exprs = [expr for _, expr in panel_exprs()]
    assert len(exprs) > 30
    check_exprs_with_promtool(exprs, tmp_path)


def _grafana_alert_exprs() -> list[str]:
    doc = yaml.safe_load(GRAFANA_ALERTS.read_text())
    return [d["model"]["expr"] for g in doc["groups"] for r in g["rules"] for d in r["data"]
            if "expr" in d["model"]]  # fmt: skip


def test_grafana_alerts_mirror_the_prometheus_alerts(tmp_path: Path) -> None:
    doc = yaml.safe_load(GRAFANA_ALERTS.read_text())
    titles = {r["title"] for g in doc["groups"] for r in g["rules"]}
    assert titles == {r["alert"] for r in rules() if "alert" in r}
    check_exprs_with_promtool(_grafana_alert_exprs(), tmp_path)


def registered_series() -> set[str]:
    """Every series name ragpulse can export, from its metric classes (the live
    check against `ragpulse serve` is in test_prometheus_live.py)."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    metrics = CollectorMetrics(registry)
    PrometheusSink(metrics.registry)
    KafkaMetrics(registry)  # the judge's series come with CollectorMetrics
    names = set()
    for family in registry.collect():
        kind = family.type
        base = family.name + ("_total" if kind == "counter" else "")
        names.add(base)
        if kind == "histogram":
            names.update(family.name + s for s in ("_bucket", "_sum", "_count"))
    return names


def test_every_referenced_series_is_exported_or_recorded() -> None:
    known = registered_series() | recorded_names()
    exprs = [e for _, e in panel_exprs()] + [r["expr"] for r in rules()] + _grafana_alert_exprs()
    used = set().union(*(metric_names(e) for e in exprs))
    assert used - known == set()
    assert {"ragpulse_eval_score_bucket", "ragpulse_kafka_consumer_lag"} <= used


_METRIC_MATCHER = re.compile(r'\bmetric\s*(=~|=)\s*"([^"]*)"')


def _metrics_shown(expr: str) -> Callable[[str], bool]:
    """Whether ``expr``'s score queries select a metric (metric="x" or metric=~"x|y")."""
    found = _METRIC_MATCHER.findall(expr)

    def shows(metric: str) -> bool:
        return any(
            value == metric if op == "=" else re.fullmatch(value, metric) is not None
            for op, value in found
        )

    return shows


def test_every_default_evaluator_has_its_series_in_a_panel() -> None:
    """Each evaluator that runs by default (once its tier is on: a judge configured, the
    models extra installed) has its ``ragpulse_eval_score`` in a panel: none is scored
    unseen."""
    from ragpulse.plugins import evaluator_classes

    shown = [
        _metrics_shown(expr)
        for _, expr in panel_exprs()
        if "ragpulse_eval_score" in expr or ":ragpulse_eval_score:" in expr
    ]
    defaults = sorted(
        name for name, cls in evaluator_classes().items()
        if cls.default_enabled and not cls.requires_reference
    )  # fmt: skip
    assert "consistency/rules" in defaults and len(defaults) > 15
    missing = [n for n in defaults if not any(s(n.split("/")[0]) for s in shown)]
    assert missing == [], f"default evaluators in no dashboard panel: {missing}"
