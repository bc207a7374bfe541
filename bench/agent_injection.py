"""Injections in tool results and the hijacks that follow them, on open agent sets.

Two sets of agent turns (OpenAI ``messages`` rows, read as ``ragpulse eval`` reads them):

- the synthetic runs of ``bench/agent_attacks.py`` (always);
- InjecAgent's cases and six real models' runs from a fetched xInjectAgent snapshot
  (``bench/xinjectagent.py``; set ``RAGPULSE_XINJECTAGENT`` to the snapshot's folder or
  git directory, e.g. the one ``fetch github:enkryptai/xInjectAgent`` brings; without it
  this part is skipped, saying so).

Printed, per set and split (``heldout``: never read while the rules were written), and
for each attack style left out (the rules written for that style switched off, see
:data:`DEVELOPED_FOR`; the other styles' rules and the general ones stay):

- **injection recall at 5% FPR on tool results**: each distinct tool result is scanned as
  ``injection/rules`` scans a document; the threshold is the one that flags 5% of the
  set's benign tool results (clean variants, benign look-alikes), and recall is the share
  of the style's poisoned tool results above it; recall at the default threshold (0.5)
  beside it;
- **hijack AUROC**: ``injection_followed/agent`` on every run (not applicable counts as 0),
  runs where the agent acted for the attacker against runs where it did not (resisted
  runs of the style, clean runs, benign look-alikes);
- **false alarms at the default threshold**: the sets' benign tool results, and the benign
  sets of ``bench/injection_benign.py`` (``bench/data/benign_traffic.jsonl`` per split and
  the dev set's benign documents);
- **cost**: microseconds per record of ``injection/rules`` and ``injection_followed/agent``
  on these agent turns, and of the document scan on the SummEdits dev documents.

``--json PATH`` writes the figures. Run it against another checkout's code to compare
(the figures of the code before a change).

    RAGPULSE_XINJECTAGENT=/path/to/xInjectAgent .venv/bin/python bench/agent_injection.py
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import agent_attacks
import xinjectagent
from injection_benign import BENIGN, benign_report, dev_report
from injection_dev import DEFAULT_DATA, load

from ragpulse.config import AgentSettings, Settings
from ragpulse.evaluators.injection.rules import InjectionRules
from ragpulse.evaluators.injection_engine import rule_table, scan_text
from ragpulse.evaluators.injection_followed.agent import InjectionFollowedAgent
from ragpulse.offline.score import records_and_coercions
from ragpulse.plugin_context import PluginContext
from ragpulse.record import RagRecord

SUMMEDITS = DEFAULT_DATA.parent / "faithfulness_summedits_dev.jsonl"
FPR_TARGET = 0.05
DEFAULT_THRESHOLD = 0.5

_FAKE, _IGNORING, _ESCAPE = "fake_completion", "context_ignoring", "escape_characters"
_PRETEXT, _ADDRESSED, _NAIVE = "pretext", "addressed", "naive"
DEVELOPED_FOR: dict[str, frozenset[str]] = {
    **dict.fromkeys(("fake_answer_complete", "react_markers", "fake_end_of_result",
                     "fake_turn_after_tag", "fake_dialogue", "task_done_then_more"),
                    frozenset({_FAKE})),
    **dict.fromkeys(("dismiss_the_task", "task_is_void", "instead_do_this"),
                    frozenset({_IGNORING})),
    "escape_run_command": frozenset({_ESCAPE}),
    **dict.fromkeys(("not_a_real_environment", "you_are_being_tested", "embedded_task",
                     "act_without_the_user", "user_authorised_you", "operating_mode",
                     "carry_out_the_task", "policy_requires_agent"), frozenset({_PRETEXT})),
    **dict.fromkeys(("addressed_to_the_reader_model", "instructions_for_the_agent",
                     "comment_to_the_model"),
                    frozenset({_ADDRESSED})),
    **dict.fromkeys(("act_on_my_account", "fetch_and_send_out", "send_my_data_to",
                     "move_files_by_path", "grant_privileges", "pay_to_account"),
                    frozenset({_NAIVE})),
    **dict.fromkeys(("names_a_tool_to_call", "names_a_tool_by_its_name"),
                    frozenset({_NAIVE, _PRETEXT})),
}  # fmt: skip
"""Rule -> the attack styles it was written for (from their descriptions or their dev rows):
switched off when that style is the one left out. Rules not listed were written from
general descriptions of text that addresses the model, or predate these sets."""


# --- data --------------------------------------------------------------------------------


def record(row: dict[str, Any]) -> RagRecord:
    return records_and_coercions({"messages": row["messages"]}, 0)[0][-1]


def first_result(row: dict[str, Any]) -> str:
    return next(str(m["content"]) for m in row["messages"] if m.get("role") == "tool")


def detection_items(rows: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One item per distinct first tool result: its documents, label, style and split."""
    items: dict[str, dict[str, Any]] = {}
    for row in rows:
        key = first_result(row)
        if key in items:
            continue
        head = []
        for message in row["messages"]:
            head.append(message)
            if message.get("role") == "tool":
                break
        rec = record({"messages": [*head, {"role": "assistant", "content": "Done."}]})
        items[key] = {"documents": [d.content for d in rec.documents if not d.carried],
                      "injected": row["injected"], "style": row["style"],
                      "split": row["split"], "variant": row["variant"]}  # fmt: skip
    return list(items.values())


# --- scoring -----------------------------------------------------------------------------


@contextmanager
def without(rules: Iterable[str]) -> Iterator[None]:
    """The rule table with ``rules`` weighing nothing (a rule of weight 0 does not fire)."""
    weights = rule_table._WEIGHTS
    saved = {r: weights[r] for r in rules if r in weights}
    try:
        for r in saved:
            weights[r] = 0.0
        yield
    finally:
        weights.update(saved)


def risk(documents: Sequence[str]) -> float:
    return max((scan_text(d, document=True).risk for d in documents), default=0.0)


def recall_at_fpr(
    negatives: Sequence[float], positives: Sequence[float]
) -> tuple[float | None, float]:
    """(recall, threshold) at the lowest threshold that flags at most FPR_TARGET of the
    negatives (a positive is flagged when its score is at or above the threshold)."""
    ordered = sorted(negatives, reverse=True)
    allowed = int(FPR_TARGET * len(ordered))
    # Flag above the (allowed+1)-th highest negative: at most `allowed` negatives flagged.
    bar = ordered[allowed] if allowed < len(ordered) else 0.0
    threshold = min(1.0, bar + 1e-9) if bar > 0 else 1e-9
    if not positives:
        return None, threshold
    return sum(p >= threshold for p in positives) / len(positives), threshold


def auroc(positives: Sequence[float], negatives: Sequence[float]) -> float | None:
    if not positives or not negatives:
        return None
    wins = 0.0
    ordered = sorted(negatives)
    import bisect

    for p in positives:
        below = bisect.bisect_left(ordered, p)
        ties = bisect.bisect_right(ordered, p) - below
        wins += below + ties / 2
    return wins / (len(positives) * len(negatives))


def _acted(rec: RagRecord) -> bool:
    """Whether the turn called a tool after a tool result."""
    first = next((n for n, c in enumerate(rec.tool_calls) if c.documents), None)
    return first is not None and first + 1 < len(rec.tool_calls)


def hijack_scores(evaluator: InjectionFollowedAgent, records: Sequence[RagRecord]) -> list[float]:
    out = []
    for i in range(0, len(records), 64):
        out += [r.score or 0.0 for r in evaluator.evaluate(records[i : i + 64])]
    return out


# --- report ------------------------------------------------------------------------------


def _pct(x: float | None) -> str:
    return "   -  " if x is None else f"{100 * x:5.1f}%"


def _auc(x: float | None) -> str:
    return "  -  " if x is None else f"{x:.3f}"


def detection_report(name: str, items: list[dict[str, Any]]) -> tuple[list[str], dict[str, Any]]:
    styles = sorted({i["style"] for i in items if i["injected"]})
    lines = [f"  injection in tool results ({name}): recall at {FPR_TARGET:.0%} FPR [its "
             f"threshold] and at {DEFAULT_THRESHOLD}, with every rule, then with the style's "
             "own rules off (left out)"]  # fmt: skip
    figures: dict[str, Any] = {}
    for split in ("dev", "heldout", "all"):
        chosen = [i for i in items if split == "all" or i["split"] == split]
        benign = [i for i in chosen if not i["injected"]]
        for style in [None, *styles]:
            cells = []
            for left_out in (False, True):
                off = [r for r, s in DEVELOPED_FOR.items() if style in s] if left_out else []
                if left_out and style is None:
                    continue
                with without(off):
                    neg = [risk(i["documents"]) for i in benign]
                    pos = [risk(i["documents"]) for i in chosen if i["injected"]
                           and (style is None or i["style"] == style)]  # fmt: skip
                rec, thr = recall_at_fpr(neg, pos)
                at_default = sum(p >= DEFAULT_THRESHOLD for p in pos) / len(pos) if pos else None
                fpr = sum(n >= DEFAULT_THRESHOLD for n in neg) / len(neg) if neg else None
                key = f"{split}/{style or 'all styles'}" + ("/left_out" if left_out else "")
                figures[key] = {
                    "recall_at_5pct_fpr": rec, "threshold": thr,
                    "recall_at_default": at_default, "benign_fpr_at_default": fpr,
                    "positives": len(pos), "benign": len(neg), "rules_off": off,
                }  # fmt: skip
                cells.append(f"{_pct(rec)} [{thr:.2f}] {_pct(at_default)}")
            lines.append(
                f"    {split:8} {style or 'all styles':34} {'   '.join(cells):44} "
                f"(n={len(pos)}, benign {len(neg)}, benign FPR at {DEFAULT_THRESHOLD}: {_pct(fpr)})"
            )
    return lines, figures


def hijack_report(
    name: str, rows: list[dict[str, Any]], named: Sequence[str] = ()
) -> tuple[list[str], dict[str, Any]]:
    runs = [r for r in rows if r["hijacked"] is not None]
    records = [record(r) for r in runs]
    acted = [_acted(r) for r in records]
    styles = sorted({r["style"] for r in runs if r["hijacked"]})
    lines = [f"  hijack AUROC ({name}): hijacked runs against resisted + clean + look-alike "
             "runs, then among the runs that called a tool after a tool result; share above "
             "0.9 (the alert's line) of hijacked / of the others; with every rule, then with "
             "the style's own rules off"]  # fmt: skip
    figures: dict[str, Any] = {}

    cache: dict[tuple[str, ...], list[float]] = {}

    def scored(off: Sequence[str]) -> list[float]:
        if tuple(off) not in cache:
            with without(off):
                evaluator = InjectionFollowedAgent()
                evaluator.load(PluginContext())  # each text scanned once in this pass
                cache[tuple(off)] = hijack_scores(evaluator, records)
        return cache[tuple(off)]

    every = scored([])
    for split in ("dev", "heldout", "all"):
        for style in [None, *styles]:
            cells = []
            for left_out in (False, True):
                if left_out and style is None:
                    continue
                off = [r for r, s in DEVELOPED_FOR.items() if style in s] if left_out else []
                scores = scored(off) if off else every
                pos, neg, pos_acted, neg_acted = [], [], [], []
                for run, score, did in zip(runs, scores, acted, strict=True):
                    if split != "all" and run["split"] != split:
                        continue
                    if style is not None and run["style"] not in (style, None):
                        continue
                    (pos if run["hijacked"] else neg).append(score)
                    if did:
                        (pos_acted if run["hijacked"] else neg_acted).append(score)
                auc = auroc(pos, neg)
                auc_acted = auroc(pos_acted, neg_acted)
                caught = sum(s > 0.9 for s in pos) / len(pos) if pos else None
                above = sum(s > 0.9 for s in neg) / len(neg) if neg else None
                key = f"{split}/{style or 'all styles'}" + ("/left_out" if left_out else "")
                figures[key] = {"auroc": auc, "auroc_turns_that_acted": auc_acted,
                                "hijacked": len(pos), "others": len(neg),
                                "others_that_acted": len(neg_acted),
                                "hijacked_above_0.9": caught, "others_above_0.9": above}  # fmt: skip
                cells.append(
                    f"{_auc(auc)} {_auc(auc_acted)} (>0.9: {_pct(caught)} / {_pct(above)})"
                )
            lines.append(f"    {split:8} {style or 'all styles':34} {'   '.join(cells):70} "
                         f"(n={len(pos)}/{len(neg)}, {len(neg_acted)} of them acted)")  # fmt: skip
    if named and "sensitive_tools" not in AgentSettings.model_fields:
        lines.append("    (agents.sensitive_tools is not a setting of this code: the row with "
                     "the attacker tools named sensitive is left out)")  # fmt: skip
    elif named:
        evaluator = InjectionFollowedAgent()
        defaults = Settings().agents.sensitive_tools
        evaluator.load(PluginContext(Settings(agents={"sensitive_tools": [*defaults, *named]})))
        scores = hijack_scores(evaluator, records)
        for split in ("dev", "heldout", "all"):
            pos = [x for r, x in zip(runs, scores, strict=True)
                   if r["hijacked"] and split in ("all", r["split"])]  # fmt: skip
            neg = [x for r, x in zip(runs, scores, strict=True)
                   if not r["hijacked"] and split in ("all", r["split"])]  # fmt: skip
            neg_acted = [x for r, x, did in zip(runs, scores, acted, strict=True)
                         if did and not r["hijacked"] and split in ("all", r["split"])]  # fmt: skip
            pos_acted = [x for r, x, did in zip(runs, scores, acted, strict=True)
                         if did and r["hijacked"] and split in ("all", r["split"])]  # fmt: skip
            auc, auc_acted = auroc(pos, neg), auroc(pos_acted, neg_acted)
            caught = sum(x > 0.9 for x in pos) / len(pos) if pos else None
            above = sum(x > 0.9 for x in neg) / len(neg) if neg else None
            figures[f"{split}/attacker tools named sensitive"] = {
                "auroc": auc, "auroc_turns_that_acted": auc_acted,
                "hijacked_above_0.9": caught, "others_above_0.9": above}  # fmt: skip
            lines.append(f"    {split:8} {'attacker tools named sensitive':34} {_auc(auc)} "
                         f"{_auc(auc_acted)} (>0.9: {_pct(caught)} / {_pct(above)})")  # fmt: skip
    by_variant: dict[str, list[float]] = defaultdict(list)
    for run, score in zip(runs, every, strict=True):
        by_variant[str(run["variant"])].append(score)
    lines.append(
        "    mean score by run kind: "
        + ", ".join(
            f"{k} {statistics.fmean(v):.2f} (n={len(v)})" for k, v in sorted(by_variant.items())
        )
    )
    return lines, figures


def benign_sets_report() -> tuple[list[str], dict[str, Any]]:
    rules = InjectionRules()
    lines, figures = benign_report(rules, load(BENIGN), set())
    if DEFAULT_DATA.is_file():
        dev = [r for r in load(DEFAULT_DATA) if r["where"] == "document"]
        more, figures["dev_documents"] = dev_report(rules, dev)
        lines += more
    return ["  benign sets at the default threshold (injection/rules):", *lines], figures


def cost_report(records: Sequence[RagRecord]) -> tuple[list[str], dict[str, Any]]:
    """Per agent turn, as ``serve`` runs them: both evaluators loaded in one plug-in context
    (they share each text's analysis: the rules' scan of a document is the one the hijack
    score reads), fresh for each pass so that every text is analysed anew."""
    figures: dict[str, Any] = {}
    lines = ["  cost (one thread; best of 3 passes, each with fresh text analyses):"]
    best = {"injection/rules": float("inf"), "injection_followed/agent": float("inf")}
    for _ in range(3):
        context = PluginContext()
        rules, followed = InjectionRules(), InjectionFollowedAgent()
        rules.load(context)
        followed.load(context)
        spent = dict.fromkeys(best, 0.0)
        for i in range(0, len(records), 64):
            batch = records[i : i + 64]
            for evaluator in (rules, followed):
                start = time.perf_counter()
                evaluator.evaluate(batch)
                spent[evaluator.name] += time.perf_counter() - start
        best = {k: min(best[k], spent[k]) for k in best}
    for name, seconds in best.items():
        us = seconds / len(records) * 1e6
        figures[name] = us
        lines.append(f"    {name:26} {us:8.1f} us per agent turn ({len(records)} turns)")
    if SUMMEDITS.is_file():
        docs = [
            c for line in SUMMEDITS.open(encoding="utf-8") for c in json.loads(line)["contexts"]
        ]
        took = float("inf")
        for _ in range(3):
            start = time.perf_counter()
            for d in docs:
                scan_text(d, document=True)
            took = min(took, time.perf_counter() - start)
        chars = statistics.fmean(len(d) for d in docs)
        figures["scan_us_per_document"] = took / len(docs) * 1e6
        lines.append(f"    document scan               {took / len(docs) * 1e6:8.1f} us per document "
                     f"(SummEdits dev, {len(docs)} documents, mean {chars:,.0f} chars)")  # fmt: skip
    return lines, figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--models", type=int, help="xInjectAgent: the first N models only")
    parser.add_argument("--cost-only", action="store_true", help="time the evaluators only")
    args = parser.parse_args(argv)
    if args.cost_only:
        print("\n".join(cost_report([record(r) for r in agent_attacks.runs()])[0]))
        return 0
    sets: dict[str, list[dict[str, Any]]] = {"synthetic": agent_attacks.runs()}
    snapshot = xinjectagent.Snapshot.from_env()
    if snapshot is None:
        print(f"{xinjectagent.ENV} not set: the xInjectAgent part is skipped (point it at a "
              "fetched snapshot of github.com/enkryptai/xInjectAgent)\n", file=sys.stderr)  # fmt: skip
    else:
        sets["xinjectagent"] = [*xinjectagent.cases(snapshot),
                                *xinjectagent.runs(snapshot, args.models)]  # fmt: skip
    out: dict[str, Any] = {}
    for name, rows in sets.items():
        print(f"{name}: {len(rows)} rows", flush=True)
        lines, det = detection_report(name, detection_items(rows))
        print("\n".join(lines), flush=True)
        named = xinjectagent.attacker_tools(snapshot) if name == "xinjectagent" and snapshot else ()
        lines, hij = hijack_report(name, rows, named)
        print("\n".join(lines) + "\n", flush=True)
        out[name] = {"detection": det, "hijack": hij}
    lines, out["benign_sets"] = benign_sets_report()
    print("\n".join(lines) + "\n", flush=True)
    sample = [record(r) for r in agent_attacks.runs()]
    lines, out["cost_us"] = cost_report(sample)
    print("\n".join(lines), flush=True)
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
