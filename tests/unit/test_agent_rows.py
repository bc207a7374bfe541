"""``ragpulse eval`` on agent turns: OpenAI-style ``messages``, a Ragas multi-turn sample
and DeepEval's ``tools_called`` each read as one turn whose documents are its tool
results (split and classed as live traffic's are), and a malformed row scored with what
could be read, every conversion said, never a crash.

The real command in process (``ragpulse.cli.main``), and the row reader it uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragpulse import semconv as sc
from ragpulse.cli import main
from ragpulse.collector.messages import parse_messages
from ragpulse.config import AgentSettings
from ragpulse.offline.score import record_and_coercions, row_to_record
from ragpulse.record import Document, DocumentSource, RagRecord, ToolCall
from ragpulse.results import record_line

QUESTION = "How many vacation days do employees get?"
PASSAGES = [
    {"id": "hb-7", "content": "Employees get 25 vacation days per year."},
    {"id": "hb-8", "content": "Unused vacation days carry over to the next year."},
]
ANSWER = "Employees get 25 vacation days per year."
INVENTED = "Employees get unlimited vacation and a yacht."

OPENAI = {
    "messages": [
        {"role": "system", "content": "Answer from the handbook."},
        {"role": "user", "content": "Hi there"},
        {"role": "assistant", "content": "Hello! How can I help?"},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "search_docs", "arguments": '{"query": "vacation days"}'}},
            {"id": "call_2", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}},
        ]},
        {"role": "tool", "tool_call_id": "call_2", "content": "12 degrees and rain"},
        {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(PASSAGES)},
        {"role": "assistant", "content": ANSWER},
    ]
}  # fmt: skip
# Ragas' MultiTurnSample as EvaluationDataset.to_jsonl writes it (ragas 0.4 messages:
# HumanMessage / AIMessage with ToolCall {name, args} / ToolMessage, which has no call id).
RAGAS = {
    "user_input": [
        {"content": QUESTION, "type": "human"},
        {"content": "", "type": "ai", "tool_calls": [
            {"name": "search_docs", "args": {"query": "vacation days"}},
            {"name": "get_weather", "args": {"city": "Oslo"}},
        ]},
        {"content": json.dumps([p["content"] for p in PASSAGES]), "type": "tool"},
        {"content": "12 degrees and rain", "type": "tool"},
        {"content": ANSWER, "type": "ai"},
    ],
    "reference": "25 days",
}  # fmt: skip
# DeepEval's LLMTestCase as its dataset files write it (ToolCall dumped by alias).
DEEPEVAL = {
    "input": QUESTION,
    "actual_output": ANSWER,
    "tools_called": [
        {"name": "search_docs", "type": "FUNCTION", "inputParameters": {"query": "vacation days"},
         "output": PASSAGES},
        {"name": "get_weather", "input_parameters": {"city": "Oslo"}, "output": "12 degrees"},
    ],
    "retrieval_context": [PASSAGES[0]["content"], "The office closes at 6 pm."],
}  # fmt: skip
MALFORMED = {
    "messages": [
        7,
        {"role": "wizard", "content": "abracadabra"},
        {"role": "user", "content": QUESTION},
        {"role": "assistant", "tool_calls": "search_docs please"},
        {"role": "assistant", "tool_calls": [
            {"id": "c9", "function": {"name": "search_docs", "arguments": "{not json"}},
            "not a call",
        ]},
        {"role": "tool", "tool_call_id": "nobody", "content": "An answer to no call."},
    ],
}  # fmt: skip


def record(row: dict[str, Any], **settings: Any) -> tuple[RagRecord, list[str]]:
    return record_and_coercions(row, 1, agents=AgentSettings(**settings))


def labels(rec: RagRecord) -> list[str]:
    return [d.source.label if d.source else "context" for d in rec.documents]


def test_openai_messages_are_one_turn_with_its_history() -> None:
    rec, coerced = record(OPENAI)
    assert coerced == []
    assert rec.kind == "agent" and rec.question == QUESTION and rec.answer == ANSWER
    assert rec.model_calls == 2
    # In the order the model asked (results joined by call id); a list of passages split.
    assert labels(rec) == ["tool search_docs #1", "tool search_docs #2", "tool get_weather #1"]
    assert [d.id for d in rec.documents] == ["hb-7", "hb-8", None]
    search, weather = rec.tool_calls
    assert (search.name, search.call_id, search.status, search.documents) == (
        "search_docs", "call_1", "ok", [0, 1],
    )  # fmt: skip
    # Retrieval tools by the default globs (*search*); the query is what the agent searched.
    assert search.retrieval and not weather.retrieval
    assert [d.query for d in rec.documents] == ["vacation days", "vacation days", None]
    assert [i for i, _ in rec.retrieved()] == [0, 1]
    # The earlier messages are the conversation's history, in the OpenAI shape.
    history = rec.attributes[sc.RAGPULSE_HISTORY]
    assert isinstance(history, list)
    assert [m["role"] for m in history] == ["system", "user", "assistant"]
    assert [m.text for m in parse_messages(history)] == [
        "Answer from the handbook.", "Hi there", "Hello! How can I help?",
    ]  # fmt: skip


def test_ragas_multi_turn_sample_pairs_tool_messages_in_order() -> None:
    rec, coerced = record(RAGAS)
    assert coerced == []
    assert rec.question == QUESTION and rec.answer == ANSWER
    assert rec.reference is not None and rec.reference.answers == ["25 days"]
    assert labels(rec) == ["tool search_docs #1", "tool search_docs #2", "tool get_weather #1"]
    assert [c.documents for c in rec.tool_calls] == [[0, 1], [2]]
    assert rec.tool_calls[0].arguments == '{"query": "vacation days"}'
    assert sc.RAGPULSE_HISTORY not in rec.attributes  # the turn is the whole sample


def test_deepeval_tools_called_and_retrieval_context_each_passage_once() -> None:
    rec, coerced = record(DEEPEVAL)
    assert coerced == []
    assert rec.kind == "agent" and rec.answer == ANSWER
    # retrieval_context repeats a tool passage (counted once) and adds one of its own.
    assert labels(rec) == [
        "tool search_docs #1", "tool search_docs #2", "tool get_weather #1", "context",
    ]  # fmt: skip
    assert rec.documents[-1].content == "The office closes at 6 pm."
    assert rec.tool_calls[1].arguments == '{"city": "Oslo"}'


def test_a_malformed_row_is_read_as_far_as_it_goes_and_says_how() -> None:
    rec, coerced = record(MALFORMED)
    assert rec.question == QUESTION and rec.answer == ""
    assert coerced == [
        "messages[]: int dropped",
        "messages[]: message with role 'wizard' dropped",
        "messages[].tool_calls: str dropped",
        "messages[].tool_calls: 1 of 2 not tool calls, dropped",
        "messages[]: a tool result that answers no tool call -> a call of its own",
    ]
    asked, orphan = rec.tool_calls
    assert (asked.name, asked.status, asked.documents) == ("search_docs", "no_result", [])
    assert (orphan.call_id, orphan.status, orphan.documents) == ("nobody", "ok", [0])
    for row, said in [
        ({"messages": "hello"}, "messages: str -> []"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "messages: no user message"),
        ({"tools_called": {"name": "x"}}, "tools_called: dict -> []"),
        ({"tools_called": [3, {"name": 5, "output": "r"}]}, "tools_called[]: int dropped"),
    ]:
        rec, coerced = record(row)
        assert any(line.startswith(said) for line in coerced), coerced


def test_bounds_of_an_agent_row_are_said() -> None:
    calls = [{"name": f"t{i}", "output": "x" * 2_000} for i in range(5)]
    rec, coerced = record(
        {"input": "q", "tools_called": calls}, max_tool_calls=3, max_result_chars=1_000
    )
    assert [c.name for c in rec.tool_calls] == ["t0", "t1", "t2"]
    assert "tool_calls: 5 -> 3 kept" in coerced
    assert "tool t0: result of 2000 chars cut to 1000, not parsed" in coerced
    assert [len(d.content) for d in rec.documents] == [1_000] * 3


def test_a_record_line_keeps_its_tool_calls_and_document_sources() -> None:
    """What the JSONL sink writes of an agent turn reads back as the same turn."""
    source = DocumentSource(tool="search_docs", call_id="c1", span_id="ab" * 8, query="vacation")
    live = RagRecord(
        question=QUESTION,
        answer=ANSWER,
        documents=[Document(id="hb-7", content=PASSAGES[0]["content"], source=source)],
        kind="agent",
        tool_calls=[ToolCall(name="search_docs", call_id="c1", status="ok", documents=[0, 3])],
    )
    row = json.loads(record_line(live, []))
    rec = row_to_record(row, 1)
    assert rec.kind == "agent" and rec.documents[0].source == source
    assert rec.tool_calls[0].model_dump(exclude={"documents"}) == live.tool_calls[0].model_dump(
        exclude={"documents"}
    )
    assert rec.tool_calls[0].documents == [0]  # an index past the row's documents is dropped
    # A source of the user's own kind (a file name) is no tool call: not read, not noted.
    plain, coerced = record({"question": "q", "contexts": [{"content": "c", "source": "a.pdf"}]})
    assert plain.documents[0].source is None and coerced == []


def write_rows(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + "{broken\n", encoding="utf-8")
    return path


def test_eval_scores_every_format_and_writes_the_tool_calls(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    invented = {**OPENAI, "messages": [*OPENAI["messages"][:-1],
                                       {"role": "assistant", "content": INVENTED}]}  # fmt: skip
    rows = [OPENAI, RAGAS, DEEPEVAL, MALFORMED, invented]
    source, out = write_rows(tmp_path / "agents.jsonl", rows), tmp_path / "out.jsonl"
    argv = ["eval", str(source), "-o", str(out), "--metrics", "faithfulness/lexical"]
    assert main(argv) == 0
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    assert len(written) == 6  # every row back, the unreadable line as an error row
    openai, ragas, deepeval, malformed, invented_row, broken = written
    copied = [row["results"][0]["score"] for row in (openai, ragas, deepeval)]
    assert min(copied) >= 0.7 > invented_row["results"][0]["score"]
    assert malformed["results"][0]["score"] is None  # no answer: not applicable, not a crash
    assert "coerced" in malformed and "coerced" not in openai
    assert broken["error"].startswith("invalid JSON")
    # The row comes back as written, with ragpulse's tool calls naming their documents.
    assert openai["messages"] == OPENAI["messages"]
    assert [(c["name"], c["documents"]) for c in openai["tool_calls"]] == [
        ("search_docs", [0, 1]), ("get_weather", [2]),
    ]  # fmt: skip
    assert [c["name"] for c in ragas["tool_calls"]] == ["search_docs", "get_weather"]
    assert [c["status"] for c in deepeval["tool_calls"]] == ["ok", "ok"]
    said = " ".join(capsys.readouterr().err.split())
    assert "user_input -> messages (1 rows)" in said
    assert "1 unreadable lines kept with an error field" in said
    assert "1 rows coerced" in said
