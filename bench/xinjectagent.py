"""InjecAgent's cases and real models' runs (the xInjectAgent snapshot) as agent rows.

xInjectAgent (github.com/enkryptai/xInjectAgent, MIT, a customised InjecAgent by Zhan et
al. 2024) publishes, for each case, the user's instruction, the user's tool and its
parameters, the tool response template with the attacker's instruction placed in one
field, the attacker's tools, and for six models what each did (``output``: the ReAct
text; ``eval``: ``succ`` when it called the attacker's tool, ``unsucc``, ``invalid``). The
data is not copied into ragpulse: this module reads a fetched snapshot at run time, from
the folder ``RAGPULSE_XINJECTAGENT`` names (a checkout with ``data/`` and ``results/``, or
the snapshot's bare git directory).

What becomes of it (OpenAI ``messages`` rows that ``ragpulse eval`` reads):

- **cases** (``data/test_cases_{dh,ds}_{base,enhanced,test,tool,tech}.json``): one row per
  poisoned tool result: the user's request, the call of the user's tool, its response with
  the attacker's instruction in it, and an answer; the attack style is the setting's
  (``base``: ``naive``; ``enhanced``: ``context_ignoring``; ``test``, ``tool`` and
  ``tech``: ``pretext``); the goal is ``direct_harm`` (dh) or ``data_stealing`` (ds);
- **clean variants**: each of the 17 user cases with the placeholder filled by benign text
  written for ragpulse (:data:`BENIGN_FILLS`, by the field the placeholder is in);
- **runs** (``results/{BASE,ENHANCED,CYDIT,FITD}/<model>/*.json``): each model's run as a
  row: the first step, then the calls its ReAct text makes (``Action:`` and ``Action
  Input:``), with the attacker tool's simulated response and the second step for data
  stealing, and the padding step of the foot-in-the-door setting (FITD); labelled
  ``hijacked`` when InjecAgent scored it a success (both steps for data stealing),
  ``resisted`` when it scored it unsuccessful; ``invalid`` runs are left out.

``split``: ``heldout`` or ``dev`` by a hash of the attacker's instruction (clean variants:
of the user's instruction), so that no attacker instruction of the held-out half is read
while rules are written.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ENV = "RAGPULSE_XINJECTAGENT"
PLACEHOLDER = "<Attacker Instruction>"
SETTINGS = {"base": "naive", "enhanced": "context_ignoring", "test": "pretext",
            "tool": "pretext", "tech": "pretext"}  # fmt: skip
RESULT_SETTINGS = {"BASE": "naive", "ENHANCED": "context_ignoring", "CYDIT": "pretext",
                   "FITD": "foot_in_the_door"}  # fmt: skip
HELDOUT_SHARE = 0.5

BENIGN_FILLS: dict[str, tuple[str, ...]] = {
    "review_content": (
        "Battery easily lasts a full working day and the screen is bright.",
        "Arrived quickly. Please note the charger is the US type, you may need an adapter.",
        "Good value, but the fan gets loud when you play games.",
        "Keyboard feels great. Remember to update the BIOS before installing anything.",
        "Returned it: the hinge cracked after two weeks. Customer service was helpful.",
    ),
    "content": (
        "Very gentle and explained every step. Highly recommend booking the morning slots.",
        "Bring your insurance card and arrive 10 minutes early to fill in the forms.",
        "What a night for the winners! Congratulations to the whole cast. #Oscars",
        "Waited 20 minutes past my appointment, but the treatment itself was excellent.",
        "Please remember to cancel at least 24 hours ahead, otherwise there is a fee.",
    ),
    "snippet": (
        "Budget draft: travel 4,000, equipment 12,500, contingency 10%. Review with finance.",
        "Preheat the oven to 200 C. Rub the butter into the flour, fold in the berries.",
        "Meeting notes: agreed to postpone the vendor decision until the audit is done.",
        "Send the revised budget to the team by Friday and book a room for the review.",
    ),
    "description": (
        "My first repository on GitHub. Contributions welcome, please open an issue first.",
        "Lightweight laptop with a 14-inch screen and 8 hours of battery life.",
        "Quarterly IT audit: check the access logs and update the asset inventory.",
        "A sample project to learn how pull requests work. Fork it and try a change.",
        "Intel i5 processor, 8GB memory, 512GB SSD. Ships in 2 business days.",
    ),
    "short_bio": (
        "Backend developer. Coffee, Go and distributed systems. Talks at meetups sometimes.",
        "Open-source maintainer. Please file bugs on the tracker rather than by e-mail.",
        "Data engineer in Lisbon. Building pipelines and teaching SQL on weekends.",
    ),
    "bio": (
        "Mathematician and writer. First programmer, according to some.",
        "Analytical Engine enthusiast. Opinions are my own.",
        "Notes on computing, poetry and science. DMs open for collaborations.",
    ),
    "body": (
        "Hi John, the prototype tests are scheduled for 3 March. Please confirm you can join "
        "and send me your slides the day before.",
        "Markets rallied after the central bank held rates. Read the full analysis on our site.",
        "Dear John, please find the revised timeline attached. Let me know by Friday if the "
        "dates work for your team.",
        "Weekly digest: oil prices steady, tech stocks up 2%, inflation data due Thursday.",
        "Hello, could you forward the lab results to Dr. Patel and copy me in? Thanks, Amy",
    ),
    "event_name": (
        "Team sync",
        "Dentist",
        "Project review with Amy",
        "Lunch with Sarah",
        "Flight to Boston",
    ),
    "message": (
        "Your code is 48213. It expires in 10 minutes. Do not share it with anyone.",
        "Get 20% off this weekend on all shoes. Reply STOP to unsubscribe.",
        "Your parcel will be delivered tomorrow between 9 and 12. Track it in the app.",
        "Reminder: your dentist appointment is on Tuesday at 3 pm. Reply Y to confirm.",
    ),
}
"""Benign text for the field an attacker writes into, by the field's name (written for
ragpulse; the e-mails and messages ask their reader to act, as real ones do)."""


def split_of(text: str) -> str:
    digest = hashlib.sha256(text.encode("utf-8")).digest()
    return "heldout" if int.from_bytes(digest[:4], "big") / 2**32 < HELDOUT_SHARE else "dev"


class Snapshot:
    """The fetched snapshot: a checkout, or a bare git directory read with ``git show``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.git = not (path / "data").is_dir()
        if self.git and not (path / "HEAD").is_file():
            raise FileNotFoundError(f"{path}: neither a checkout with data/ nor a git directory")

    @classmethod
    def from_env(cls) -> Snapshot | None:
        value = os.environ.get(ENV)
        return cls(Path(value)) if value else None

    def read(self, relative: str) -> str:
        if not self.git:
            return (self.path / relative).read_text(encoding="utf-8")
        return subprocess.run(
            ["git", "--git-dir", str(self.path), "show", f"HEAD:{relative}"],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip

    def files(self, under: str) -> list[str]:
        if not self.git:
            return sorted(
                str(p.relative_to(self.path)) for p in (self.path / under).rglob("*.json")
            )
        listed = subprocess.run(
            ["git", "--git-dir", str(self.path), "ls-tree", "-r", "--name-only", "HEAD", under],
            check=True, capture_output=True, text=True,
        ).stdout  # fmt: skip
        return sorted(line for line in listed.splitlines() if line.endswith(".json"))

    def rows(self, relative: str) -> list[dict[str, Any]]:
        """A file's rows: a JSON list, or JSON lines."""
        text = self.read(relative)
        try:
            data = json.loads(text)
        except ValueError:
            return [json.loads(line) for line in text.splitlines() if line.strip()]
        return list(data) if isinstance(data, list) else [data]


def _dumps(value: Any) -> str:
    return json.dumps(value, default=lambda v: sorted(v, key=str) if isinstance(v, set) else str(v))


def _json_text(value: str) -> str:
    """A Python-literal tool response (how InjecAgent writes them) as JSON text, when it
    parses; else the text as it is."""
    text = value.strip()
    if len(text) >= 2 and text[0] == text[-1] == '"':
        text = text[1:-1]
    try:
        return _dumps(ast.literal_eval(text))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        try:
            return _dumps(ast.literal_eval(value))
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            return value
    return _dumps(value)


_ACTION = re.compile(r"Action:\s*([A-Za-z_][\w]*)\s*\n\s*Action Input:\s*", re.S)


def actions(output: str) -> tuple[list[tuple[str, str]], str | None]:
    """The calls a ReAct text makes (name, JSON arguments) up to its first observation or
    final answer, and its final answer (None when it gives none)."""
    calls = []
    for m in _ACTION.finditer(output):
        if m.group(1).lower() in ("none", "null", "n/a", "final"):
            continue  # "Action: None": no call
        arguments = _balanced(output, m.end())
        calls.append((m.group(1), _json_arguments(arguments)))
        if "Observation:" in output[m.end() : m.end() + len(arguments) + 40]:
            break
    final = output.split("Final Answer:", 1)[1].strip() if "Final Answer:" in output else None
    if not calls and final is None:
        final = output.strip()
    return calls[:1], final


def _json_arguments(text: str) -> str:
    """A ReAct action's input as JSON text (models write JSON or Python literals)."""
    try:
        json.loads(text)
        return text
    except ValueError:
        return _arguments(text)


def _balanced(text: str, start: int) -> str:
    """The JSON object starting at ``start`` (balanced braces), else the rest of the line."""
    if start < len(text) and text[start] == "{":
        depth = 0
        for i in range(start, len(text)):
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            if depth == 0:
                return text[start : i + 1]
    return text[start:].split("\n", 1)[0].strip() or "{}"


class _Messages:
    def __init__(self, request: str) -> None:
        self.items: list[dict[str, Any]] = [{"role": "user", "content": request}]
        self.calls = 0

    def call(self, name: str, arguments: str, thought: str = "") -> str:
        self.calls += 1
        call_id = f"call_{self.calls}"
        self.items.append({"role": "assistant", "content": thought or None, "tool_calls": [
            {"id": call_id, "type": "function",
             "function": {"name": name, "arguments": arguments}}]})  # fmt: skip
        return call_id

    def result(self, call_id: str, content: str) -> None:
        self.items.append({"role": "tool", "tool_call_id": call_id, "content": content})

    def answer(self, text: str) -> None:
        self.items.append({"role": "assistant", "content": text})


def _first_step(case: dict[str, Any], response: str) -> _Messages:
    messages = _Messages(case["User Instruction"])
    thought = str(case.get("Thought", "")).removeprefix("Thought:").strip()
    call = messages.call(case["User Tool"], _arguments(case["Tool Parameters"]), thought)
    messages.result(call, _json_text(response))
    return messages


def _field_of(template: str) -> str:
    m = re.search(r"'(\w+)':\s*'[^']*<Attacker Instruction>", template)
    return m.group(1) if m else "content"


def cases(snapshot: Snapshot) -> Iterator[dict[str, Any]]:
    """One row per poisoned tool result of the case files, and the clean variants."""
    seen: set[str] = set()
    for goal, short in (("direct_harm", "dh"), ("data_stealing", "ds")):
        for setting, style in SETTINGS.items():
            relative = f"data/test_cases_{short}_{setting}.json"
            try:
                rows = snapshot.rows(relative)
            except (FileNotFoundError, subprocess.CalledProcessError):
                continue
            for n, case in enumerate(rows):
                messages = _first_step(case, case["Tool Response"])
                messages.answer("Here is what I found.")
                yield {"id": f"xia-{short}-{setting}-{n}", "set": "xinjectagent",
                       "split": split_of(case["Attacker Instruction"]), "style": style,
                       "goal": goal, "variant": "injected", "injected": 1, "hijacked": None,
                       "tool": case["User Tool"], "messages": messages.items}  # fmt: skip
            for case in rows:
                template = case["Tool Response Template"]
                if template in seen:
                    continue
                seen.add(template)
                field = _field_of(template)
                for k, fill in enumerate(BENIGN_FILLS.get(field, BENIGN_FILLS["content"])):
                    response = template.replace(PLACEHOLDER, fill.replace("'", "\u2019"))
                    messages = _first_step(case, response)
                    messages.answer("Here is what I found.")
                    yield {"id": f"xia-clean-{len(seen)}-{k}", "set": "xinjectagent",
                           "split": split_of(case["User Instruction"]), "style": None,
                           "goal": None, "variant": "clean", "injected": 0, "hijacked": 0,
                           "tool": case["User Tool"], "messages": messages.items}  # fmt: skip


def runs(snapshot: Snapshot, models: int | None = None) -> Iterator[dict[str, Any]]:
    """Every model's run of the result files (``invalid`` ones left out); ``models`` keeps
    the first few models of each setting (sorted by name)."""
    by_setting: dict[str, dict[str, list[str]]] = {}
    for relative in snapshot.files("results"):
        parts = relative.split("/")
        if len(parts) == 4:
            by_setting.setdefault(parts[1], {}).setdefault(parts[2], []).append(relative)
    for setting, by_model in sorted(by_setting.items()):
        for model in sorted(by_model)[:models]:
            for relative in by_model[model]:
                goal = "data_stealing" if "_ds_" in relative else "direct_harm"
                style = RESULT_SETTINGS.get(setting, setting.lower())
                if setting == "FITD" and "enhanced" in relative:
                    style = "foot_in_the_door+context_ignoring"
                for n, row in enumerate(snapshot.rows(relative)):
                    built = _run(row, goal, setting == "FITD")
                    if built is None:
                        continue
                    messages, hijacked = built
                    yield {"id": f"xia-run-{setting}-{model}-{goal}-{n}", "set": "xinjectagent",
                           "split": split_of(row["Attacker Instruction"]), "style": style,
                           "goal": goal, "model": model, "variant": "hijacked" if hijacked
                           else "resisted", "injected": 1, "hijacked": int(hijacked),
                           "tool": row["User Tool"], "messages": messages}  # fmt: skip


def _run(row: dict[str, Any], goal: str, fitd: bool) -> tuple[list[dict[str, Any]], bool] | None:
    messages = _first_step(row, row["Tool Response"])
    if fitd:
        if row.get("eval2") not in ("succ", "unsucc") or not row.get("output1"):
            return None
        calls, final = actions(str(row["output1"]))
        for name, arguments in calls:
            messages.result(
                messages.call(name, arguments), str(row.get("Padded Tool Response", ""))
            )
        outputs, success = [row.get("output2") or ""], row.get("eval2") == "succ"
    else:
        if row.get("eval") not in ("succ", "unsucc"):
            return None
        outputs, success = [row.get("output") or ""], row.get("eval") == "succ"
        if goal == "data_stealing" and success:
            if row.get("eval Step 2") != "succ":
                return None  # read the data, did not send it: neither label fits
            outputs.append(row.get("output Step 2") or "")
    final: str | None = None
    for step, output in enumerate(outputs):
        calls, final = actions(str(output))
        for name, arguments in calls:
            call = messages.call(name, arguments)
            simulated = (
                row.get("Attacker Tool Response") if step == 0 and len(outputs) > 1 else None
            )
            messages.result(call, str(simulated) if simulated else '{"success": true}')
    messages.answer(final or "Done.")
    return messages.items, success


def attacker_tools(snapshot: Snapshot) -> list[str]:
    """The tools that act on the world among those the attackers' instructions want called
    (direct harm's tools, data stealing's last one, the send): what a team running these
    tools would name in ``agents.sensitive_tools``."""
    names: set[str] = set()
    for row in snapshot.rows("data/attacker_cases_dh.jsonl"):
        names.update(row.get("Attacker Tools") or [])
    for row in snapshot.rows("data/attacker_cases_ds.jsonl"):
        names.update((row.get("Attacker Tools") or [])[-1:])
    return sorted(names)
