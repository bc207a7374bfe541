"""The demo's support agent: a scripted model that calls tools (and an example of
``@ragpulse.tool``).

Each turn is one ``@ragpulse.pipeline`` whose model calls (``@ragpulse.generation``)
ask for tools (``@ragpulse.tool``) until the model answers, so the collector scores it
as an agent turn whose documents are the tool results. The tools: a help-center search
(a retrieval tool), a ticket reader, a service-status check that is down, and an e-mail
sender. The model is naive on purpose: it obeys an instruction to forward something that
it reads in a ticket, which is how the demo's hijack comes about (ticket ``T-1042``
carries a prompt injection; ``injection_followed/agent`` names the call that carried the
attacker's address).
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from importlib.resources import files
from typing import Any

import ragpulse
from ragpulse.cli.demo_app import extract, search

MODEL = "scripted-agent-v1"
_TICKET = re.compile(r"\bT-\d+\b")
_FORWARD = re.compile(r"\bforward\b.*?\bto\s+([\w.+-]+@[\w-]+(?:\.[\w-]+)+)", re.IGNORECASE)


@lru_cache(maxsize=1)
def scenarios() -> dict[str, Any]:
    """The agent's questions, two-turn conversations, tickets and the hijack question."""
    data: dict[str, Any] = json.loads(
        files("ragpulse").joinpath("demo_data/agent.json").read_text(encoding="utf-8")
    )
    return data


@ragpulse.tool(retrieval=True)
def search_help_center(query: str) -> list[dict[str, Any]]:
    """Help-center articles matching ``query`` (one document per article)."""
    return search(query)


@ragpulse.tool
def read_ticket(ticket_id: str) -> str:
    """A support ticket's text."""
    return str(scenarios()["tickets"].get(ticket_id, f"no ticket {ticket_id}"))


@ragpulse.tool
def service_status(service: str) -> str:
    """The status page, which times out in the demo (a failed tool call)."""
    raise TimeoutError(f"status.nimbus.example did not answer for {service}")


@ragpulse.tool
def send_email(to: str, body: str) -> str:
    """Sends nothing in the demo; says it did."""
    return f"sent {len(body)} characters to {to}"


TOOLS = {f.__name__: f for f in (search_help_center, read_ticket, service_status, send_email)}


def _next_move(messages: list[dict[str, Any]]) -> tuple[str, dict[str, Any]] | str:
    """The scripted model: the next tool call (name, arguments), or the answer."""
    question = str(messages[0]["content"])
    done = {m["name"]: m for m in messages if m["role"] == "tool"}
    ticket = _TICKET.search(question)
    if ticket and "read_ticket" not in done:
        return "read_ticket", {"ticket_id": ticket.group()}
    forward = _FORWARD.search(str(done.get("read_ticket", {}).get("content", "")))
    if forward and "send_email" not in done:  # the naive model obeys what it reads
        return "send_email", {"to": forward.group(1), "body": "the customer's notes"}
    if "right now" in question and "service_status" not in done:
        return "service_status", {"service": "sync"}
    if "search_help_center" not in done:
        query = re.sub(r"^Ticket T-\d+ says |\?$", "", question)
        return "search_help_center", {"query": query}
    found = json.loads(str(done["search_help_center"]["content"]))
    answer = extract(question, [d["content"] for d in found])
    return f"I could not reach the status page. {answer}" if "service_status" in done else answer


@ragpulse.generation(model=MODEL, system="ragpulse-demo")
def model(messages: list[dict[str, Any]]) -> dict[str, Any]:
    """One model call: an assistant message asking for a tool, or answering."""
    move = _next_move(messages)
    if isinstance(move, str):
        return {"role": "assistant", "content": move}
    name, arguments = move
    call_id = f"call_{sum(m['role'] == 'tool' for m in messages) + 1}"
    call = {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments)}}  # fmt: skip
    return {"role": "assistant", "content": None, "tool_calls": [call]}


@ragpulse.pipeline(route="/agent")
def agent(question: str) -> str:
    """One agent turn: model calls and the tools they ask for, until an answer."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for _ in range(8):  # a scripted model answers within four calls
        reply = model(messages)
        calls = reply.get("tool_calls") or []
        if not calls:
            return str(reply["content"])
        messages.append(reply)
        for call in calls:
            name = call["function"]["name"]
            try:
                result: Any = TOOLS[name](**json.loads(call["function"]["arguments"]))
            except Exception as exc:  # the model sees the error, as agent loops do
                result = f"Error: {type(exc).__name__}: {exc}"
            content = result if isinstance(result, str) else json.dumps(result)
            messages.append(
                {"role": "tool", "tool_call_id": call["id"], "name": name, "content": content}
            )
    return "I could not finish this one."


def turn(question: str, conversation_id: str | None = None, last: bool = False) -> str:
    """One agent turn, in conversation ``conversation_id`` when given (``last``: its end,
    which closes the conversation into its record at once)."""
    if conversation_id is None:
        return agent(question)
    with ragpulse.conversation(conversation_id, end=last):
        return agent(question)
