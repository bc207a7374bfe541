"""``ragpulse metrics [NAME]``: the catalogue as it was, and one evaluator in full (its
description, tier, what it applies to, its options with types, defaults and meaning).

The real command, in process, printing to a captured console."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from ragpulse.cli import main
from ragpulse.cli import metrics as metrics_command
from ragpulse.cli.main import build_parser


def run(*argv: str) -> tuple[int, str]:
    buffer = io.StringIO()
    args = build_parser().parse_args(["metrics", *argv])
    code = metrics_command.run(args, Console(file=buffer, width=200, emoji=False))
    return code, buffer.getvalue()


def test_a_name_shows_description_options_tier_and_what_it_applies_to() -> None:
    code, said = run("user_frustration/rules")
    assert code == 0
    lines = [" ".join(line.replace("│", " ").split()) for line in said.splitlines()]
    assert lines[0] == "user_frustration/rules: signs that the user is not getting what they " \
        "asked for."  # fmt: skip
    assert "tier cheap (rules and counts, no model: on all traffic)" in lines
    assert "applies to conversation (a conversation record, scored when it closes)" in lines
    assert "better lower is better" in lines and "by default on" in lines
    assert "repeat_overlap number (> 0, <= 1) 0.6 word overlap (Jaccard) of a repeated " \
        "question" in lines  # fmt: skip
    assert "frustrated_at number (> 0, <= 1) 0.33 share of signal turns labelled " \
        "'frustrated'" in lines  # fmt: skip
    assert any("asks again what they asked before" in line for line in lines)


@pytest.mark.parametrize(
    ("name", "applies"),
    [
        ("injection_followed/agent", "agent turn"),
        ("faithfulness/lexical", "RAG turn, agent turn"),
        ("injection/rules", "RAG turn, agent turn, retrieval only"),
        ("recall@5/ids", "RAG turn, agent turn, retrieval only (rows that carry references, "
         "in ragpulse eval)"),
        ("abandonment/rules", "conversation (a conversation record, scored when it closes)"),
    ],
)  # fmt: skip
def test_what_each_evaluator_applies_to(name: str, applies: str) -> None:
    code, said = run(name)
    assert code == 0 and f"applies to  {applies}" in said


def test_options_of_every_kind_show_their_type_and_default() -> None:
    code, said = run("faithfulness/nli")
    flat = [" ".join(line.replace("│", " ").split()) for line in said.splitlines()]
    assert code == 0
    assert any(line.startswith('backend "torch" | "onnx" "torch" torch, or onnx') for line in flat)
    assert any(line.startswith("max_tokens integer | null (>= 16) null") for line in flat)
    assert "options: none" in run("injection_followed/agent")[1]


def test_a_bare_metric_shows_each_of_its_methods() -> None:
    code, said = run("injection_followed")
    assert code == 0
    assert "injection_followed/agent: " in said and "injection_followed/rules: " in said


def test_an_unknown_name_is_refused_with_the_closest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["metrics", "user_frustation/rules"]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "unknown evaluator: user_frustation/rules (did you mean user_frustration/rules" in said
    assert "`ragpulse metrics` lists the registered ones" in said
