"""deploy/prometheus: promtool checks the config and rules and runs the rule unit
tests; every alert documents itself and is unit-tested firing and quiet."""

from __future__ import annotations

import subprocess

import pytest
import yaml
from support.deploy_support import PROM, RULE_FILES, require, rules

TEST_FILES = sorted((PROM / "tests").glob("*_test.yaml"))


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([require("promtool"), *args], capture_output=True, text=True, timeout=60)


def test_promtool_check_config_and_rules() -> None:
    # check config also checks the rule files it names (both, relative to it).
    proc = promtool("check", "config", str(PROM / "prometheus.yml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 rule files found" in proc.stdout
    proc = promtool("check", "rules", *map(str, RULE_FILES))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_promtool_rule_unit_tests() -> None:
    assert len(TEST_FILES) >= 3
    proc = promtool("test", "rules", *map(str, TEST_FILES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("SUCCESS") == len(TEST_FILES)


def alerts() -> list[dict]:
    return [r for r in rules() if "alert" in r]


@pytest.mark.parametrize("rule", alerts(), ids=lambda r: r["alert"])
def test_alert_is_documented(rule: dict) -> None:
    assert rule["labels"]["severity"] in ("info", "warning", "critical")
    for key in ("summary", "description", "runbook"):
        assert len(rule["annotations"].get(key, "")) > 20, key


def test_every_alert_has_firing_and_quiet_unit_tests() -> None:
    firing, quiet = set(), set()
    for path in TEST_FILES:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                (firing if check.get("exp_alerts") else quiet).add(check["alertname"])
    names = {r["alert"] for r in alerts()}
    assert names >= {
        "RagpulseFaithfulnessDrop", "RagpulseContextRelevanceDrop",
        "RagpulseInjectionSpikeQuestion", "RagpulseInjectionSpikeDocument",
        "RagpulseEvaluatorErrors", "RagpulseJudgeBudgetExhausted",
        "RagpulseConsumerLagGrowing", "RagpulseNoData",
    }  # fmt: skip
    assert names - firing == set(), "alerts never tested firing"
    assert names - quiet == set(), "alerts never tested quiet"
