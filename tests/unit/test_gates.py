"""The one ``--max-drop`` grammar (:mod:`ragpulse.offline.gates`): every form the harness
and ``eval --replay`` accepted before still reads the same, and what neither accepted
is refused with a message that names the item and the grammar."""

from __future__ import annotations

import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ragpulse.offline.gates import drop_limits, parse_gate, parse_gates
from ragpulse.plugins import evaluator_names, metric_names


@pytest.mark.parametrize(
    ("item", "metric", "method", "where", "kind", "value"),
    [
        ("faithfulness=0.05", "faithfulness", None, None, "max_drop", 0.05),
        ("faithfulness/lexical=0.1", "faithfulness", "lexical", None, "max_drop", 0.1),
        (" context_relevance = 0 ", "context_relevance", None, None, "max_drop", 0.0),
        ("faithfulness=1e-2", "faithfulness", None, None, "max_drop", 0.01),
        ("faithfulness=inf", "faithfulness", None, None, "max_drop", math.inf),
        ("recall@5=0.1", "recall@5", None, None, "max_drop", 0.1),
        ("ndcg@10/content=0.1", "ndcg@10", "content", None, "max_drop", 0.1),
        ("recall@5/ids@condition=retrieved=0.05", "recall@5", "ids",
         {"condition": "retrieved"}, "max_drop", 0.05),
        ("expected_refusal@question_type=multi-hop,condition=gold_removed=0.1",
         "expected_refusal", None, {"question_type": "multi-hop", "condition": "gold_removed"},
         "max_drop", 0.1),
        ("mrr@all>=0.5", "mrr", None, {}, "min", 0.5),
        ("refusal_rate@all>=0.5", "refusal_rate", None, {}, "min", 0.5),
        ("false_refusal_rate<=0.2", "false_refusal_rate", None, None, "max", 0.2),
        ("answer_correctness/token_recall@condition=gold=0", "answer_correctness",
         "token_recall", {"condition": "gold"}, "max_drop", 0.0),
    ],
)  # fmt: skip
def test_every_form_reads(
    item: str,
    metric: str,
    method: str | None,
    where: dict[str, str] | None,
    kind: str,
    value: float,
) -> None:
    gate = parse_gate(item)
    assert (gate.metric, gate.method, gate.where, gate.kind, gate.value) == (
        metric, method, where, kind, value,
    )  # fmt: skip
    assert gate.text == item.strip()


@pytest.mark.parametrize(
    ("item", "why"),
    [
        ("faithfulness", "no '=DROP', '>=MIN' or '<=MAX'"),
        ("faithfulness=abc", "'abc' is not a number"),
        ("faithfulness=", "'' is not a number"),
        ("faithfulness=-0.1", "a drop must be >= 0"),
        ("faithfulness=nan", "the threshold must be finite"),
        ("mrr>=inf", "the threshold must be finite"),
        ("=0.1", "cannot read the metric part ''"),
        ("faith fulness=0.1", "cannot read the metric part 'faith fulness'"),
        ("mrr@question_type=0.1", "slice part 'question_type' is not KEY=VALUE"),
    ],
)
def test_what_neither_grammar_took_is_refused_clearly(item: str, why: str) -> None:
    with pytest.raises(ValueError) as err:
        parse_gate(item)
    assert str(err.value) == (
        f"bad gate {item!r}: {why} (expected METRIC[/METHOD][@KEY=VALUE[,KEY=VALUE]]=DROP, or "
        ">=MIN / <=MAX instead of =DROP; e.g. mrr@question_type=multi-hop=0.05)"
    )


def test_replay_takes_the_drop_form_as_before() -> None:
    gates = parse_gates(["faithfulness=0.05", "context_relevance/lexical=0.1", " ",
                         "faithfulness=0.2"])  # fmt: skip
    assert drop_limits(gates) == {"faithfulness": 0.2, "context_relevance/lexical": 0.1}


@pytest.mark.parametrize(
    ("item", "form"),
    [("faithfulness@all=0.05", "a slice (@...)"), ("faithfulness>=0.5", "an absolute limit")],
)
def test_replay_refuses_the_harness_only_forms_saying_why(item: str, form: str) -> None:
    with pytest.raises(ValueError) as err:
        drop_limits(parse_gates([item]))
    assert str(err.value).startswith(
        f"--max-drop {item}: eval --replay compares a mean before and after, so it takes "
        f"METRIC[/METHOD]=DROP; {form}"
    )


# The two parsers there were, kept here as the reference the one grammar must cover.
_OLD_LHS = re.compile(
    r"^(?P<metric>[A-Za-z_][\w.\-]*?(?:@\d+)?)(?:/(?P<method>[\w.\-]+))?(?:@(?P<slice>.+))?$"
)


def _old_replay(item: str) -> tuple[str, float] | None:
    """``eval --replay``'s: NAME=VALUE, VALUE a float >= 0; NAME then had to be a metric."""
    name, sep, value = item.partition("=")
    try:
        drop = float(value)
    except ValueError:
        return None
    if not sep or not name.strip() or drop < 0:
        return None
    known = evaluator_names() if "/" in name.strip() else metric_names()
    return (name.strip(), drop) if name.strip() in known else None


def _old_harness(item: str) -> tuple[str, str | None, bool, str, float] | None:
    """The harness's: the forms above with a finite number and the stricter metric part
    (metric, method, whether it had a slice, kind, value)."""
    text = item.strip()
    ops = [(op, kind) for op, kind in ((">=", "min"), ("<=", "max"), ("=", "max_drop"))
           if op in text]  # fmt: skip
    if not ops:
        return None
    op, kind = ops[0]
    lhs, _, number = text.rpartition(op)
    try:
        value = float(number)
    except ValueError:
        return None
    match = _OLD_LHS.match(lhs.strip())
    if not math.isfinite(value) or (kind == "max_drop" and value < 0) or match is None:
        return None
    return match["metric"], match["method"], match["slice"] is not None, kind, value


SAMPLES = [
    "faithfulness=0.05", "faithfulness/lexical=0.1", " faithfulness = 0.05", "recall@5=0.1",
    "recall@5/ids=0.05", "ndcg@10=0", "mrr=1e-3", "faithfulness=inf", "faithfulness=+0.1",
    "faithfulness=1_0", "injection/rules=0.2", "refusal=0.3", "mrr@all=0.1", "mrr@all>=0.5",
    "mrr<=0.9", "recall@5/ids@condition=retrieved=0.05", "a.b-c=0.1", "_x/y.z=0.2",
    "mrr@k=v,k2=v2<=0.3", "faithfullness=0.05", "faithfulness>=0.5",
]  # fmt: skip


@pytest.mark.parametrize("item", SAMPLES)
def test_whatever_either_grammar_took_still_reads_the_same(item: str) -> None:
    if (old := _old_replay(item)) is not None:
        assert drop_limits([parse_gate(item)]) == dict([old])
    if (before := _old_harness(item)) is not None:
        gate = parse_gate(item)
        now = (gate.metric, gate.method, gate.where is not None, gate.kind, gate.value)
        assert now == before


def test_the_references_took_what_the_docs_showed() -> None:
    """The reference parsers above are not vacuous."""
    assert _old_replay("faithfulness=0.05") == ("faithfulness", 0.05)
    assert _old_harness("recall@5/ids@condition=retrieved=0.05") == (
        "recall@5", "ids", True, "max_drop", 0.05,
    )  # fmt: skip


def test_the_replay_command_says_why_it_refuses_a_slice(tmp_path: Path) -> None:
    (tmp_path / "set.jsonl").write_text('{"question": "q?", "contexts": ["c"], "answer": "a"}\n')
    done = subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "eval", "set.jsonl", "-o", "out.jsonl",
         "--replay", "ragpulse.cli.demo_app:answer", "--max-drop", "faithfulness@all=0.05"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    text = " ".join((done.stdout + done.stderr).split())
    assert "--max-drop faithfulness@all=0.05: eval --replay compares a mean" in text
    assert not (tmp_path / "out.jsonl").exists()
