"""Shared by the deploy tests: the deploy files, PromQL metric names, promtool."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PROM = DEPLOY / "prometheus"
RULE_FILES = [PROM / "recording.rules.yaml", PROM / "alerts.rules.yaml"]
DASHBOARD = DEPLOY / "grafana" / "dashboards" / "ragpulse-overview.json"
GRAFANA_ALERTS = DEPLOY / "grafana" / "provisioning" / "alerting" / "ragpulse.yaml"

# What Grafana substitutes before a query reaches Prometheus.
GRAFANA_VARIABLES = {
    "$__rate_interval": "1m",
    "$__interval": "15s",
    "$__range": "1h",
    "$service": ".*",
    "$route": ".*",
}


def require(binary: str) -> str:
    path = shutil.which(binary)
    if path is None:
        pytest.skip(
            f"{binary} not on PATH: install Debian's `prometheus` package "
            "(`make test` tries apt-get itself)"
        )
    return path


def load_build() -> ModuleType:
    """deploy/build.py (not a package: loaded from its path)."""
    spec = importlib.util.spec_from_file_location("ragpulse_deploy_build", DEPLOY / "build.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def rules() -> list[dict[str, Any]]:
    return [
        r
        for path in RULE_FILES
        for g in yaml.safe_load(path.read_text())["groups"]
        for r in g["rules"]
    ]


def recorded_names() -> set[str]:
    return {r["record"] for r in rules() if "record" in r}


def panel_exprs(dashboard: dict[str, Any] | None = None) -> list[tuple[str, str]]:
    """(panel title, expr) for every query of every panel, variables substituted."""
    board = dashboard if dashboard is not None else json.loads(DASHBOARD.read_text())
    out = []
    for panel in board["panels"]:
        for target in panel.get("targets", []):
            expr = target["expr"]
            for var, value in GRAFANA_VARIABLES.items():
                expr = expr.replace(var, value)
            assert "$" not in expr, f"unknown variable in {panel['title']}: {expr}"
            out.append((panel["title"], expr))
    return out


_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_MATCHERS = re.compile(r"\{[^{}]*\}")
_RANGE = re.compile(r"\[[^\[\]]*\]")
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_IDENT = re.compile(r"(?<![\w:.])([A-Za-z_:][\w:]*)(\s*\()?")
_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or",
             "unless", "offset", "inf", "nan"}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects (functions, keywords, labels,
    strings, durations and numbers removed): enough PromQL for rules and panels."""
    text = _GROUPING.sub(" ", _RANGE.sub("", _MATCHERS.sub("", _STRING.sub('""', expr))))
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if not call and name.lower() not in _KEYWORDS:
            names.add(name)
    return names


def exported_series(exposition: str) -> set[str]:
    """Series names a Prometheus text exposition declares (# TYPE lines), samples or not."""
    suffixes = {
        "counter": ["", "_created"],
        "gauge": [""],
        "histogram": ["_bucket", "_sum", "_count", "_created"],
        "summary": ["", "_sum", "_count"],
    }
    names = set()
    for line in exposition.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split()
            names.update(name + s for s in suffixes.get(kind, [""]))
    return names


def check_exprs_with_promtool(exprs: list[str], tmp_path: Path) -> None:
    """Every expr parses as PromQL: wrapped as recording rules for `promtool check rules`."""
    promtool = require("promtool")
    groups = [
        {
            "name": "exprs",
            "rules": [{"record": f"expr_{i}", "expr": e} for i, e in enumerate(exprs)],
        }
    ]
    path = tmp_path / "exprs.rules.yaml"
    path.write_text(yaml.safe_dump({"groups": groups}))
    proc = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
