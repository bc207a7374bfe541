"""How each conversation metric separates: labelled conversations, AUROC and accuracy.

No public multi-turn set labelled for these metrics could be used here (MTRAG is reserved,
all of it; the user-satisfaction sets we know carry no licence), so the conversations are
built from the dev split (/work/shared/data/README.md), every label given by construction,
with a fixed seed. Each family is labelled for the metrics it tests; a positive is the bad
outcome (frustrated, requests unmet, a fact forgotten, an ungrounded or abandoned
conversation, an injection, a failed tool).

- halueval: HaluEval dialogue (MIT, dev file): each row's dialogue ("[Human]: ...
  [Assistant]: ...") becomes the earlier turns, its last user message and its response the
  final turn, its knowledge the final turn's documents; the response hallucinated = 1.
  For conversation_groundedness and abandonment (the conversation closes idle).
- grounding: 3 or 4 ARES NQ faithfulness rows (Apache-2.0, dev file; synthetic labels) as
  turns (question, contexts, answer); 1 when one turn's row is an unfaithful one.
- frustration: 3 or 4 faithful ARES turns; in a positive one a follow-up asks an earlier
  question again (verbatim, or after "I asked already:", "That is not what I asked.",
  "Please just answer:") or complains before a new question ("That is wrong.", "This is
  useless, try again:"); negatives have distinct questions, half of them a follow-up that
  names the earlier question's words ("Tell me more about ...": a hard negative).
  For user_frustration (rules and judge).
- completeness: 3 or 4 faithful ARES turns; in a positive one a turn's answer is replaced
  by an evasion ("Sorry, I can't help with that.", "I don't know.") or by another row's
  answer (off-topic). For conversation_completeness.
- retention: the first user message states a fact (a name, a city, a budget); a later
  answer either uses it or, positive, asks for it again or states another value.
  For knowledge_retention.
- injection: 3 ARES turns; in a positive one, one turn's documents gain a planted
  instruction (injection_dev.jsonl document rows, label 1: CyberSecEval, MIT), in a
  negative one a benign passage of the same file. For conversation_injection.
- tools: 3 agent turns with one tool call each; positive: one call failed (an error
  status, an output that opens with "Error:", or, the hard third, "Sorry, the service is
  unavailable right now." with no error marker). For conversation_tool_errors.

Every conversation goes through what ``ragpulse serve`` runs: the default cheap turn
metrics on each turn record, the conversation stage (``prepare`` joins the earlier turns,
``observe`` keeps the turn), closed as idle; the cheap conversation metrics score the
record. The judge metrics then score the same records against the OpenAI-compatible
test double (tests/support/judge_server.py: word rules written with these templates in
view: its figures say nothing about any judge's quality, only that the verdicts and the
arithmetic carry a signal through) and, with ``--llama N``, against the real llama.cpp
server with SmolLM2-135M on N conversations per family: machinery only (how many were
scored, calls, tokens, latency); a 135M model's verdicts are near chance.

    .venv/bin/python bench/conversation_accuracy.py [--per-family 200] [--llama 12]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEV = Path(os.environ.get("RAGPULSE_DEV_DATA") or ROOT.parent / "shared" / "data" / "dev")
sys.path.insert(0, str(ROOT / "tests"))  # the judge double and the llama.cpp server

from support.judge_server import JudgeServer  # noqa: E402

from ragpulse.collector.conversations.stage import ConversationStage  # noqa: E402
from ragpulse.config import ConversationSettings, EvaluationSettings, JudgeSettings, Settings  # noqa: E402
from ragpulse.evaluation import evaluate_records, load_evaluators_safely  # noqa: E402
from ragpulse.evaluators.base import ConversationEvaluator, Tier  # noqa: E402
from ragpulse.evaluators.conversation_completeness.llm_judge import (  # noqa: E402
    JudgeConversationCompleteness,
)
from ragpulse.evaluators.knowledge_retention.llm_judge import JudgeKnowledgeRetention  # noqa: E402
from ragpulse.evaluators.user_frustration.llm_judge import JudgeUserFrustration  # noqa: E402
from ragpulse.offline.calibrate import auroc  # noqa: E402
from ragpulse.plugin_context import PluginContext  # noqa: E402
from ragpulse.plugins import load_evaluators  # noqa: E402
from ragpulse.record import ConversationRecord, Document, EvalResult, RagRecord, ToolCall  # noqa: E402

BAD_LABELS = {"frustrated", "incomplete", "forgot", "abandoned", "injection", "followed",
              "tool_error"}  # fmt: skip
"""The labels that say the bad outcome (a score-only metric is read at 0.5 quality)."""
FAMILY_METRICS = {  # the cheap conversation metrics each family is labelled for
    "halueval": ("conversation_groundedness", "abandonment"),
    "grounding": ("conversation_groundedness", "abandonment"),
    "frustration": ("user_frustration",),
    "injection": ("conversation_injection",),
    "tools": ("conversation_tool_errors",),
}
NAMES = ["Ada", "Jonas", "Maria", "Kenji", "Ines", "Samuel", "Clara", "Lucia"]
CITIES = ["Oslo", "Porto", "Halifax", "Mombasa", "Sapporo", "Graz", "Cork", "Bergen"]


@dataclass
class Turn:
    question: str
    answer: str
    documents: list[str] = field(default_factory=list)
    tool: ToolCall | None = None


@dataclass
class Built:
    family: str
    label: int
    kind: str  # the construction class
    turns: list[Turn]


def read(name: str) -> list[dict[str, Any]]:
    with (DEV / name).open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def ares_turn(row: dict[str, Any]) -> Turn:
    return Turn(row["question"], row["answer"], list(row["contexts"]))


def halueval(rows: list[dict[str, Any]]) -> Iterator[Built]:
    for row in rows:
        parts = re.split(r"\[(Human|Assistant)\]:\s*", row["question"])[1:]
        said = [(parts[i], parts[i + 1].strip()) for i in range(0, len(parts) - 1, 2)]
        turns, user = [], None
        for who, text in said:
            if who == "Human":
                user = text
            elif user is not None:
                turns.append(Turn(user, text))
                user = None
        if user is None or not turns:
            continue
        turns.append(Turn(user, row["answer"], list(row["contexts"])))
        yield Built("halueval", 1 - row["label"], "right" if row["label"] else "hallucinated",
                    turns)  # fmt: skip


def families(per_family: int, seed: int) -> Iterator[Built]:
    rng = random.Random(seed)
    ares = read("faithfulness_ares_nq.jsonl")
    faithful = [r for r in ares if r["label"] == 1]
    unfaithful = [r for r in ares if r["label"] == 0]
    injections = [r["text"] for r in read("injection_dev.jsonl")
                  if r["where"] == "document" and r["label"] == 1]  # fmt: skip
    benign = [r["text"] for r in read("injection_dev.jsonl")
              if r["where"] == "document" and r["label"] == 0]  # fmt: skip

    def turns(n: int) -> list[Turn]:
        return [ares_turn(r) for r in rng.sample(faithful, n)]

    half = per_family // 2
    for i in range(per_family):
        positive = i < half
        chat = turns(rng.choice((3, 4)))
        if positive:  # grounding: one turn's answer is an unfaithful row's
            j = rng.randrange(len(chat))
            chat[j] = ares_turn(rng.choice(unfaithful))
        yield Built("grounding", int(positive), "unfaithful_turn" if positive else "faithful", chat)

        chat = turns(rng.choice((3, 4)))
        j = rng.randrange(1, len(chat))
        earlier = chat[rng.randrange(j)].question
        if positive:
            how = rng.choice(("verbatim", "asked_already", "not_what_i_asked", "just_answer",
                              "wrong", "useless"))  # fmt: skip
            chat[j].question = {
                "verbatim": earlier,
                "asked_already": f"I asked already: {earlier}",
                "not_what_i_asked": f"That is not what I asked. {earlier}",
                "just_answer": f"Please just answer: {earlier}",
                "wrong": f"That is wrong. {chat[j].question}",
                "useless": f"This is useless, try again: {chat[j].question}",
            }[how]
        else:
            how = rng.choice(("distinct", "tell_me_more"))
            if how == "tell_me_more":
                words = " ".join(re.findall(r"[A-Za-z]+", earlier)[-4:])
                chat[j].question = f"Tell me more about {words}."
        yield Built("frustration", int(positive), how, chat)

        chat = turns(rng.choice((3, 4)))
        if positive:
            j = rng.randrange(len(chat))
            how = rng.choice(("cannot_help", "dont_know", "off_topic"))
            chat[j].answer = {
                "cannot_help": "Sorry, I can't help with that.",
                "dont_know": "I don't know.",
                "off_topic": rng.choice(faithful)["answer"],
            }[how]
        else:
            how = "answered"
        yield Built("completeness", int(positive), how, chat)

        chat = turns(3)
        name, city, budget = rng.choice(NAMES), rng.choice(CITIES), rng.randrange(2, 90) * 100
        fact = rng.choice(("name", "city", "budget"))
        stated = {"name": f"My name is {name}.", "city": f"I live in {city}.",
                  "budget": f"My budget is {budget} dollars."}[fact]  # fmt: skip
        chat[0].question = f"{stated} {chat[0].question}"
        kept = {"name": f"{name}, ", "city": f"For someone in {city}: ",
                "budget": f"Within your {budget} dollars: "}[fact]  # fmt: skip
        if positive:
            how = rng.choice(("asks_again", "other_value"))
            other_city = rng.choice([c for c in CITIES if c != city])
            lost = {
                ("asks_again", "name"): "Could you tell me your name first? ",
                ("asks_again", "city"): "Which city do you live in? ",
                ("asks_again", "budget"): "What is your budget? ",
                ("other_value", "name"): f"{rng.choice([n for n in NAMES if n != name])}, ",
                ("other_value", "city"): f"For someone in {other_city}: ",
                ("other_value", "budget"): f"Within your {budget + 1000} dollars: ",
            }[(how, fact)]
            chat[2].answer = lost + chat[2].answer
        else:
            how = "uses_it"
            chat[2].answer = kept + chat[2].answer
        yield Built("retention", int(positive), f"{how}:{fact}", chat)

        chat = turns(3)
        planted = rng.choice(injections) if positive else rng.choice(benign)
        chat[rng.randrange(3)].documents.append(planted)
        yield Built("injection", int(positive), "planted" if positive else "benign", chat)

        chat = turns(3)
        for t in chat:
            t.tool = ToolCall(name="search", arguments='{"q": "x"}', status="ok",
                              result=t.documents[0][:300])  # fmt: skip
        how = "ok"
        if positive:
            how = rng.choice(("status_error", "error_output", "unmarked"))
            k = rng.randrange(3)
            failed = {
                "status_error": ToolCall(name="search", status="error", error="timeout"),
                "error_output": ToolCall(name="search", status="ok",
                                         result="Error: upstream timed out"),
                "unmarked": ToolCall(name="search", status="ok",
                                     result="Sorry, the service is unavailable right now."),
            }[how]  # fmt: skip
            chat[k].tool = failed
        yield Built("tools", int(positive), how, chat)


# -- through the stage ----------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def records(conversations: Sequence[Built]) -> list[tuple[ConversationRecord, list[EvalResult]]]:
    """Each conversation through the cheap turn metrics and the conversation stage, closed
    as idle: its record and its cheap conversation metrics' results, in order."""
    every = load_evaluators()
    cheap = load_evaluators_safely(
        [e for e in every if e.tier == Tier.CHEAP and not isinstance(e, ConversationEvaluator)]
    )
    conversation_metrics = [
        e for e in load_evaluators_safely(
            [e for e in every if isinstance(e, ConversationEvaluator)]
        )
        if isinstance(e, ConversationEvaluator)
    ]  # fmt: skip
    clock, out = Clock(), []
    settings = ConversationSettings(max_open=len(conversations) + 1)
    stage = ConversationStage(settings, conversation_metrics,
                              lambda item: out.append((item.record, list(item.results))), clock=clock)  # fmt: skip
    for n, built in enumerate(conversations):
        for i, t in enumerate(built.turns):
            clock.now += 1.0
            tools = [t.tool] if t.tool else []
            record = RagRecord(
                trace_id=f"{n:016x}{i:016x}", span_id=f"{i + 1:016x}",
                conversation_id=f"conv-{n}", question=t.question, answer=t.answer,
                documents=[Document(content=d) for d in t.documents], tool_calls=tools,
                kind="agent" if tools else "rag", start_time_ns=i, end_time_ns=i + 1,
            )  # fmt: skip
            record = stage.prepare(record)
            [results] = evaluate_records([record], cheap)
            stage.observe(record, results)
        clock.now += settings.idle_s
        stage.tick()
    assert len(out) == len(conversations), (len(out), len(conversations))
    return out


# -- figures -------------------------------------------------------------------------------


def risk(result: EvalResult) -> float | None:
    quality = result.quality
    return None if quality is None else 1.0 - quality


def flagged(result: EvalResult) -> bool:
    """The metric's own label where it has one, else 0.5 on the quality scale (the alerts'
    line)."""
    if result.label is not None:
        return result.label in BAD_LABELS
    return (result.quality if result.quality is not None else 1.0) < 0.5


def row(name: str, pairs: list[tuple[int, EvalResult]], total: int) -> str:
    scored = [(y, r) for y, r in pairs if risk(r) is not None]
    if not scored:
        return f"| `{name}` | 0 of {total} scored | - | - | - |"
    labels = [y for y, _ in scored]
    area = auroc([risk(r) or 0.0 for _, r in scored], labels)
    hits = [flagged(r) for _, r in scored]
    pos = [h for h, y in zip(hits, labels, strict=True) if y == 1]
    neg = [h for h, y in zip(hits, labels, strict=True) if y == 0]
    recall = sum(pos) / len(pos) if pos else float("nan")
    fpr = sum(neg) / len(neg) if neg else float("nan")
    balanced = (recall + 1 - fpr) / 2
    area_text = f"{area:.3f}" if area is not None else "-"
    return (f"| `{name}` | {len(scored)} of {total} | {area_text} | {balanced:.3f} | "
            f"recall {recall:.2f}, false alarms {fpr:.2f} |")  # fmt: skip


def by_kind(name: str, built: Sequence[Built], results: Sequence[EvalResult | None]) -> str:
    flags: dict[str, list[bool]] = defaultdict(list)
    for b, r in zip(built, results, strict=True):
        if r is not None and risk(r) is not None:
            flags[f"{b.kind} ({b.label})"].append(flagged(r))
    parts = [f"{k} {sum(v) / len(v):.2f}" for k, v in sorted(flags.items())]
    return f"  {name} flagged share by class: " + ", ".join(parts)


def judge_results(
    judges: Sequence[ConversationEvaluator], conversations: Sequence[ConversationRecord]
) -> dict[str, list[EvalResult]]:
    return {j.metric: j.evaluate_conversations(conversations) for j in judges}


def judge_context(base_url: str, model: str, **kw: Any) -> PluginContext:
    settings = {"base_url": base_url, "model": model, "calls_per_minute": 100_000,
                "tokens_per_minute": 10**9, "rate": 1.0, "timeout_s": 600, **kw}  # fmt: skip
    return PluginContext(Settings(evaluation=EvaluationSettings(judge=JudgeSettings(**settings))))


JUDGES = (JudgeConversationCompleteness, JudgeKnowledgeRetention, JudgeUserFrustration)
JUDGED_FAMILY = {"conversation_completeness": "completeness",
                 "knowledge_retention": "retention", "user_frustration": "frustration"}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--per-family", type=int, default=200)
    parser.add_argument("--seed", type=int, default=11)
    parser.add_argument("--llama", type=int, default=0,
                        help="conversations per judged family for the real SmolLM2 server")  # fmt: skip
    args = parser.parse_args()
    built = [*halueval(read("faithfulness_halueval_dialogue.jsonl")),
             *families(args.per_family, args.seed)]  # fmt: skip
    began = time.perf_counter()
    closed = records(built)
    print(f"{len(built)} conversations through the cheap tier and the stage in "
          f"{time.perf_counter() - began:.1f} s; by family: "
          f"{dict(Counter(b.family for b in built))}")  # fmt: skip

    print("\nCheap conversation metrics (AUROC on risk = 1 - quality; balanced accuracy at "
          "the metric's label, or 0.5 quality)\n")  # fmt: skip
    print("| metric on family | scored | AUROC | balanced accuracy | at the label |")
    print("|---|---|---|---|---|")
    notes = []
    for family, metrics in FAMILY_METRICS.items():
        members = [(b, c) for b, c in zip(built, closed, strict=True) if b.family == family]
        for metric in metrics:
            found = [next((r for r in results if r.metric == metric), None)
                     for _, (_, results) in members]  # fmt: skip
            pairs = [(b.label, r) for (b, _), r in zip(members, found, strict=True) if r]
            print(row(f"{metric}/rules` on `{family}", pairs, len(members)))
            notes.append(by_kind(f"{metric} on {family}", [b for b, _ in members], found))
    print("\n".join(notes))

    print("\nJudge metrics against the test double (word rules: says nothing about quality)\n")
    with JudgeServer() as server:
        context = judge_context(server.base_url, "double")
        judges = [e for e in load_evaluators_safely([cls() for cls in JUDGES], context)
                  if isinstance(e, ConversationEvaluator)]  # fmt: skip
        print("| metric on family | scored | AUROC | balanced accuracy | at the label |")
        print("|---|---|---|---|---|")
        notes = []
        for judge in judges:
            family = JUDGED_FAMILY[judge.metric]
            members = [(b, c) for b, (c, _) in zip(built, closed, strict=True)
                       if b.family == family]  # fmt: skip
            scored = judge.evaluate_conversations([c for _, c in members])
            pairs = [(b.label, r) for (b, _), r in zip(members, scored, strict=True)]
            print(row(f"{judge.name}` on `{family}", pairs, len(members)))
            notes.append(by_kind(judge.name, [b for b, _ in members], scored))
        print("\n".join(notes))
        context.close()

    if args.llama:
        llama(args.llama, built, closed)


def llama(per_family: int, built: Sequence[Built], closed: Sequence[Any]) -> None:
    """The judges against SmolLM2-135M on llama.cpp: how many were scored, at what cost."""
    from support.llm_server import LlamaServer, unavailable

    why = unavailable()
    if why:
        print(f"\nllama.cpp: {why}")
        return
    print(f"\nJudge metrics against llama.cpp + SmolLM2-135M ({per_family} conversations per "
          "family; machinery only, a 135M model judges at chance)\n")  # fmt: skip
    print("| metric | scored | errors | calls | prompt tokens | seconds per conversation |")
    print("|---|---|---|---|---|---|")
    with LlamaServer() as server:
        context = judge_context(server.base_url, server.model, max_tokens=512, max_retries=0,
                                concurrency=2)  # fmt: skip
        judges = [e for e in load_evaluators_safely([cls() for cls in JUDGES], context)
                  if isinstance(e, ConversationEvaluator)]  # fmt: skip
        for judge in judges:
            family = JUDGED_FAMILY[judge.metric]
            members = [c for b, (c, _) in zip(built, closed, strict=True) if b.family == family]
            began = time.perf_counter()
            results = judge.evaluate_conversations(members[:per_family])
            spent = (time.perf_counter() - began) / per_family
            errors = Counter(r.label for r in results if r.score is None)
            print(f"| `{judge.name}` | {sum(r.score is not None for r in results)} of "
                  f"{len(results)} | {dict(errors) or '-'} | "
                  f"{sum(r.details.get('calls', 0) for r in results)} | "
                  f"{sum(r.details.get('prompt_tokens', 0) for r in results):,} | "
                  f"{spent:.1f} |")  # fmt: skip
        context.close()


if __name__ == "__main__":
    main()
