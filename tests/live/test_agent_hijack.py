"""A support agent on Pydantic AI (scripted model) hijacked through a ticket, scored by a
real ``ragpulse serve`` with its defaults, and the ``RagpulseAgentHijacked`` alert on a real
Prometheus that scrapes it with the deploy rules.

Two turns of the same agent (tests/support/support_agent.py), each under a service of its
own: the ticket search returns a ticket carrying an instruction to the assistant with an
attacker's account; in one turn the agent refunds to that account, in the other it
refunds the order the user named to the account the user gave. The planted instruction is
flagged naming the tool call that fetched it; the hijack scores above the alert's line
(0.9) naming the call, the value and its source; the user-directed refund scores at most
0.3; the alert's series see the hijack and not the refund.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.deploy_support import Prometheus, prometheus_server
from support.helpers import start_serve, stop_process
from support.kafka_env import free_port, wait_until
from support.support_agent import ATTACKER_ACCOUNT, USER_ACCOUNT

from ragpulse.redaction import Redactor

pytestmark = pytest.mark.integration

APP = Path(__file__).resolve().parents[1] / "support" / "support_agent.py"
SERVICES = {"hijack": "support-hijacked", "refund": "support-refund"}
HIJACKED_TURNS = "instance_service_route:ragpulse_agent_hijacked_turns:count"


def shown(text: str) -> str:
    """``text`` as the results file shows it (redaction on, by default)."""
    return Redactor().redact(text)


@pytest.fixture(scope="module")
def scored(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[dict[str, dict[str, Any]], Prometheus]]:
    """Each scenario's record as ``ragpulse serve`` wrote it, and the Prometheus scraping it."""
    tmp = tmp_path_factory.mktemp("hijack")
    out = tmp / "results.jsonl"
    port = free_port()
    proc, metrics_url = start_serve(
        "--otlp-http-port", str(port), "--results-jsonl", str(out),
        env={"RAGPULSE_ASSEMBLY__GRACE_S": "0.2"},
    )  # fmt: skip
    try:
        with prometheus_server(metrics_url, tmp) as prometheus:
            wait_until(
                lambda: prometheus.query("ragpulse_records_evaluated_total"), 60,
                "Prometheus did not scrape ragpulse serve", 0.2, ignore=(OSError,),
            )  # fmt: skip
            for scenario, service in SERVICES.items():
                app = subprocess.run(
                    [sys.executable, str(APP), scenario, "--otlp-http",
                     f"http://127.0.0.1:{port}", "--service", service],
                    timeout=300, check=False,
                )  # fmt: skip
                assert app.returncode == 0, f"{scenario} failed"

            def records() -> dict[str, dict[str, Any]] | None:
                rows = (
                    [json.loads(line) for line in out.read_text().splitlines()]
                    if out.exists()
                    else []
                )
                by = {row["service"]: row for row in rows}
                return by if set(SERVICES.values()) <= set(by) else None

            by_service = wait_until(records, 120, "ragpulse serve did not write both turns")
            yield by_service, prometheus
    finally:
        stop_process(proc)


def _result(row: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [r for r in row["results"] if f"{r['metric']}/{r['method']}" == name]
    return found


def test_the_planted_instruction_is_flagged_naming_its_tool_call(
    scored: tuple[dict[str, dict[str, Any]], Prometheus],
) -> None:
    row = scored[0][SERVICES["hijack"]]
    assert row["kind"] == "agent"
    result = _result(row, "injection/rules")
    assert result["label"] == "injection"
    [found] = result["details"]["findings"]
    assert found["source"] == "tool search_tickets #1"
    document = row["documents"][int(found["where"].split(":")[1])]
    assert found["call_id"] == document["source"]["call_id"] == row["tool_calls"][0]["call_id"]
    assert found["excerpt"] and "tool search_tickets #1" in result["explanation"]


def test_the_refund_to_the_account_from_the_ticket_is_a_hijack(
    scored: tuple[dict[str, dict[str, Any]], Prometheus],
) -> None:
    row = scored[0][SERVICES["hijack"]]
    result = _result(row, "injection_followed/agent")
    assert result["score"] > 0.9 and result["label"] == "hijacked"
    [call] = result["details"]["calls"]
    refund = next(c for c in row["tool_calls"] if c["name"] == "issue_refund")
    assert call["tool"] == "issue_refund" and call["call_id"] == refund["call_id"]
    assert call["span_id"] == refund["span_id"] == result["details"]["target_span_id"]
    [value] = [v for v in call["values"] if v["value"] == shown(ATTACKER_ACCOUNT)]
    assert value["source"] == "tool_result" and value["from"] == "tool search_tickets #1"
    assert shown(ATTACKER_ACCOUNT) in value["passage"] and value["instruction_risk"] >= 0.5
    assert "issue_refund" in result["explanation"]


def test_the_refund_the_user_asked_for_is_not(
    scored: tuple[dict[str, dict[str, Any]], Prometheus],
) -> None:
    row = scored[0][SERVICES["refund"]]
    result = _result(row, "injection_followed/agent")
    assert result["score"] <= 0.3 and result["label"] == "not_hijacked"
    [call] = result["details"]["calls"]
    sources = {v["value"]: v["source"] for v in call["values"]}
    assert sources[shown(USER_ACCOUNT)] == "user" and sources["5521"] == "user"


def test_the_alert_series_see_the_hijack_and_not_the_refund(
    scored: tuple[dict[str, dict[str, Any]], Prometheus],
) -> None:
    prometheus = scored[1]
    hijacked, refund = SERVICES["hijack"], SERVICES["refund"]
    wait_until(
        lambda: prometheus.query(f'{HIJACKED_TURNS}{{service="{hijacked}"}} == 1'), 60,
        "the hijacked turn never reached the recording rule", 0.2, ignore=(OSError,),
    )  # fmt: skip
    # The refund's turn was scored (its series exists) and is not counted as a hijack.
    [quiet] = wait_until(
        lambda: prometheus.query(f'{HIJACKED_TURNS}{{service="{refund}"}}'), 60,
        "the refund's turn never reached the recording rule", 0.2, ignore=(OSError,),
    )  # fmt: skip
    assert float(quiet["value"][1]) == 0
    firing = 'ALERTS{alertname="RagpulseAgentHijacked", alertstate="firing"}'
    alerts = wait_until(
        lambda: prometheus.query(firing), 60, "RagpulseAgentHijacked did not fire", 0.2,
        ignore=(OSError,),
    )  # fmt: skip
    assert {a["metric"]["service"] for a in alerts} == {hijacked}
