"""Shared by the deploy tests: the deploy files, PromQL metric names, promtool."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from support.helpers import http_get, stop_process
from support.kafka_env import free_port, wait_until

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


class Prometheus:
    """A running Prometheus server's HTTP API."""

    def __init__(self, url: str) -> None:
        self.url = url

    def api(self, path: str, **params: str) -> Any:
        body = json.loads(http_get(f"{self.url}/api/v1/{path}?{urllib.parse.urlencode(params)}"))
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("query", query=expr)["result"]
        return result


@contextmanager
def prometheus_server(metrics_url: str, tmp_path: Path) -> Iterator[Prometheus]:
    """Debian's Prometheus on 127.0.0.1, scraping ``metrics_url`` every second with the
    deploy rule files loaded (evaluated every second), until the block ends."""
    binary = require("prometheus")
    target = urllib.parse.urlsplit(metrics_url).netloc
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [str(p) for p in RULE_FILES],
        "scrape_configs": [{"job_name": "ragpulse", "static_configs": [{"targets": [target]}]}],
    }
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen(
        [binary, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={tmp_path / 'data'}", f"--web.listen-address=127.0.0.1:{port}",
         "--enable-feature=exemplar-storage", "--log.level=warn"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(
            lambda: proc.poll() is None and http_get(f"{url}/-/ready"), 60,
            "Prometheus did not get ready", 0.2, ignore=(OSError,),
        )  # fmt: skip
        yield Prometheus(url)
    finally:
        stop_process(proc)
        log.close()
