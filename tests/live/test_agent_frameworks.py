"""Agent turns from real frameworks, scored by a real ``ragpulse serve`` with its defaults.

Each framework's app (tests/support/agent_apps.py: Pydantic AI, the OpenAI Agents SDK,
LangGraph, a tool loop traced by opentelemetry-instrumentation-openai-v2, Haystack) runs
once, in a process of its own, scripted models and all, and sends its own spans over
OTLP/HTTP to one ``ragpulse serve`` shared by this module. For every turn: one record
whose documents are every passage its tools returned, whose answer is the final answer,
whose ``faithfulness/lexical`` is >= 0.7 for the answer copied from a tool result and
below for the invented one; the planted injection is flagged naming the tool call that
fetched it; the scripted hijack (``send_email`` to the attacker's address read in a tool
result) is scored above 0.9 by ``injection_followed/agent``, naming the call and where the
address came from, and the turn without it is not.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from support.agent_apps import APPS, ATTACKER, PASSAGES, TURNS
from support.helpers import start_serve, stop_process
from support.kafka_env import free_port, wait_until

pytestmark = pytest.mark.integration

APP = Path(__file__).resolve().parents[1] / "support" / "agent_apps.py"
AGENTS = ("pydantic_ai", "openai_agents", "langgraph", "openai_v2")
EXPECTED = {**{a: len(TURNS) for a in AGENTS}, "haystack": 4}  # 3 RAG turns + a search
BY_NAME = {t.name: t for t in TURNS}


def shown(text: str, hijacked: bool = False) -> str:
    """``text`` as the results file shows it: e-mail addresses redacted (the default); in
    the hijacked turn the attacker's address is a destination, and keeps its domain."""
    domain = ATTACKER.split("@")[1]
    return text.replace(ATTACKER, f"[EMAIL]@{domain}" if hijacked else "[EMAIL]")


@pytest.fixture(scope="module")
def scored(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, list[dict[str, Any]]]]:
    """Every app's records (with their results) as ``ragpulse serve`` wrote them, by app."""
    out = tmp_path_factory.mktemp("agents") / "results.jsonl"
    port = free_port()
    proc, _ = start_serve(
        "--otlp-http-port",
        str(port),
        "--results-jsonl",
        str(out),
        env={"RAGPULSE_ASSEMBLY__GRACE_S": "0.2"},
    )
    try:
        apps = [
            subprocess.Popen([sys.executable, str(APP), app, "--otlp-http", f"http://127.0.0.1:{port}"])
            for app in APPS
        ]  # fmt: skip
        for app in apps:
            assert app.wait(300) == 0, f"{app.args} failed"

        def records() -> dict[str, list[dict[str, Any]]] | None:
            rows = (
                [json.loads(line) for line in out.read_text().splitlines()] if out.exists() else []
            )
            by_app: dict[str, list[dict[str, Any]]] = {}
            for row in rows:
                by_app.setdefault(row["service"].removeprefix("agent-"), []).append(row)
            done = all(len(by_app.get(a, [])) >= n for a, n in EXPECTED.items())
            return by_app if done else None

        yield wait_until(records, 120, "ragpulse serve did not write every turn's record")
    finally:
        stop_process(proc)


def _turn(rows: list[dict[str, Any]], turn: str) -> dict[str, Any]:
    [row] = [r for r in rows if r["question"] == BY_NAME[turn].question]
    return row


def _result(row: dict[str, Any], name: str) -> dict[str, Any]:
    [found] = [r for r in row["results"] if f"{r['metric']}/{r['method']}" == name]
    return found


@pytest.mark.parametrize("app", AGENTS)
def test_every_turn_is_one_agent_record_with_its_tool_passages(
    scored: dict[str, list[dict[str, Any]]], app: str
) -> None:
    rows = scored[app]
    assert len(rows) == len(TURNS)
    for turn in TURNS:
        row = _turn(rows, turn.name)
        assert row["kind"] == "agent"
        assert row["answer"] == turn.answer
        passages = {shown(p["content"], turn.name == "hijacked") for p in PASSAGES[turn.topic]}
        contents = {d["content"] for d in row["documents"]}
        assert passages <= contents, (app, turn.name)
        searched = [d for d in row["documents"] if d["content"] in passages]
        assert all(d["source"]["tool"] == "search_docs" for d in searched)
        assert all(d["source"]["query"] == turn.calls[0][1]["query"] for d in searched)
        assert [c["name"] for c in row["tool_calls"]] == [name for name, _ in turn.calls]
        assert row["model_calls"] == len(turn.calls) + 1


@pytest.mark.parametrize("app", [*AGENTS, "haystack"])
def test_faithfulness_separates_a_copied_answer_from_an_invented_one(
    scored: dict[str, list[dict[str, Any]]], app: str
) -> None:
    copied = _result(_turn(scored[app], "copied"), "faithfulness/lexical")
    invented = _result(_turn(scored[app], "invented"), "faithfulness/lexical")
    assert copied["score"] >= 0.7 > invented["score"]


@pytest.mark.parametrize("app", [*AGENTS, "haystack"])
def test_the_injected_document_is_flagged_naming_where_it_came_from(
    scored: dict[str, list[dict[str, Any]]], app: str
) -> None:
    row = _turn(scored[app], "injected")
    result = _result(row, "injection/rules")
    assert result["label"] == "injection"
    [found] = [f for f in result["details"]["findings"] if f["where"].startswith("document:")]
    document = row["documents"][int(found["where"].split(":")[1])]
    assert "[EMAIL]" in document["content"]  # the attacker's address, redacted
    if app == "haystack":  # a pipeline's retriever: the document's id names it
        assert found["document_id"] == "vc-2"
    else:
        assert found["source"] == "tool search_docs #2"
        assert found["call_id"] == document["source"]["call_id"]
        assert "tool search_docs #2" in result["explanation"]


@pytest.mark.parametrize("app", AGENTS)
def test_the_hijack_is_caught_and_the_turn_without_it_is_not(
    scored: dict[str, list[dict[str, Any]]], app: str
) -> None:
    hijacked = _result(_turn(scored[app], "hijacked"), "injection_followed/agent")
    assert hijacked["label"] == "hijacked" and hijacked["score"] > 0.9
    [first, *_] = hijacked["details"]["calls"]
    assert first["tool"] == "send_email" and first["sensitive"]
    destination = shown(ATTACKER, hijacked=True)  # where the data went, the address redacted
    [value] = [v for v in first["values"] if v["kind"] == "email"]
    assert value["value"] == destination and value["source"] == "tool_result"
    assert value["from"] == "tool search_docs #2"
    assert hijacked["details"]["destinations"] == [destination]
    assert f"carries email '{destination}'" in hijacked["explanation"]
    clean = _result(_turn(scored[app], "injected"), "injection_followed/agent")
    assert clean["label"] == "not_hijacked" and clean["score"] == 0.0


def test_haystack_reads_the_answer_text_and_a_search_alone_is_a_retrieval(
    scored: dict[str, list[dict[str, Any]]],
) -> None:
    rows = scored["haystack"]
    copied = _turn(rows, "copied")
    assert copied["kind"] == "rag" and copied["answer"] == BY_NAME["copied"].answer
    [search] = [r for r in rows if r["kind"] == "retrieval"]
    assert search["answer"] == "" and search["documents"]
    names = {f"{r['metric']}/{r['method']}" for r in search["results"]}
    assert "context_relevance/lexical" in names
    assert not names & {"faithfulness/lexical", "answer_relevance/lexical", "refusal/rules"}
