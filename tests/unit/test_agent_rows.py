"""``ragpulse eval`` on agent turns and conversations: OpenAI-style ``messages``, a Ragas
multi-turn sample and DeepEval's ``tools_called`` each read as a turn whose documents are
its tool results (split and classed as live traffic's are); a row that shows several
turns (messages, a Ragas sample, DeepEval's ``turns``) or rows sharing a conversation id
read as a conversation, each turn with its history, scored turn by turn and closed into a
conversation record at the end of the run; a malformed row scored with what could be
read, every conversion said, never a crash.

The real command in process (``ragpulse.cli.main``), and the row reader it uses."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ragpulse.cli import main
from ragpulse.config import AgentSettings
from ragpulse.offline.score import record_and_coercions, records_and_coercions, row_to_record
from ragpulse.record import Document, DocumentSource, ExportItem, RagRecord, ToolCall
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


def test_openai_messages_are_turns_each_with_its_history() -> None:
    rec, coerced = record(OPENAI)
    assert coerced == []
    assert rec.kind == "agent" and rec.question == QUESTION and rec.answer == ANSWER
    assert rec.model_calls == 2
    # In the order the model asked (results joined by call id); a list of passages split;
    # the system prompt the model saw is evidence too (as live).
    assert labels(rec) == [
        "tool search_docs #1", "tool search_docs #2", "tool get_weather #1", "the system prompt",
    ]  # fmt: skip
    assert [d.id for d in rec.documents] == ["hb-7", "hb-8", None, None]
    search, weather = rec.tool_calls
    assert (search.name, search.call_id, search.status, search.documents) == (
        "search_docs", "call_1", "ok", [0, 1],
    )  # fmt: skip
    # Retrieval tools by the default globs (*search*); the query is what the agent searched.
    assert search.retrieval and not weather.retrieval
    assert [d.query for d in rec.documents] == ["vacation days", "vacation days", None, None]
    assert [i for i, _ in rec.retrieved()] == [0, 1]
    # The earlier messages are the turn's history; the row is a conversation of two turns.
    assert [(m.role, m.content, m.turn) for m in rec.history] == [
        ("user", "Hi there", 1), ("assistant", "Hello! How can I help?", 1),
    ]  # fmt: skip
    assert rec.turn == 2 and rec.conversation_id == "line-1"
    (greeting, last), _ = records_and_coercions(OPENAI, 1)
    assert last == rec
    assert (greeting.turn, greeting.question, greeting.answer) == (
        1, "Hi there", "Hello! How can I help?",
    )  # fmt: skip
    assert greeting.conversation_id == "line-1" and not greeting.history


def test_ragas_multi_turn_sample_pairs_tool_messages_in_order() -> None:
    rec, coerced = record(RAGAS)
    assert coerced == []
    assert rec.question == QUESTION and rec.answer == ANSWER
    assert rec.reference is not None and rec.reference.answers == ["25 days"]
    assert labels(rec) == ["tool search_docs #1", "tool search_docs #2", "tool get_weather #1"]
    assert [c.documents for c in rec.tool_calls] == [[0, 1], [2]]
    assert rec.tool_calls[0].arguments == '{"query": "vacation days"}'
    assert rec.history == [] and rec.turn == 1  # one turn: no conversation
    assert rec.conversation_id is None


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
    row = json.loads(record_line(ExportItem(live, [])))
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
    # Every row back, the unreadable line as an error row; OPENAI's rows are conversations
    # of two turns: their first turns have lines of their own, their records end the file.
    greeting, openai, ragas, deepeval, malformed, greeting_again, invented_row, broken = written[:8]
    assert [c["conversation"]["conversation_id"] for c in written[8:]] == ["line-1", "line-5"]
    assert (greeting["line"], greeting["turn"], greeting["question"]) == (1, 1, "Hi there")
    assert (openai["conversation_id"], openai["turn"]) == ("line-1", 2)
    assert greeting_again["line"] == 5
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


# --- Conversations ---------------------------------------------------------------------

LIGHTHOUSE = "The Harbour lighthouse was built in 1857. Two keepers live there."
FIRST, FOLLOW_UP = "When was the Harbour lighthouse built?", "And how many keepers live there?"
BUILT, KEEPERS = "It was built in 1857.", "Two keepers live there."
# One conversation in each tool's shape; the follow-up is answered from the first turn's
# passage (its own turn retrieves nothing).
CHATS: dict[str, dict[str, Any]] = {
    "openai": {"messages": [
        {"role": "system", "content": "Answer from the documents."},
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "search_docs", "arguments": '{"query": "lighthouse"}'}}]},
        {"role": "tool", "tool_call_id": "c1", "content": LIGHTHOUSE},
        {"role": "assistant", "content": BUILT},
        {"role": "user", "content": FOLLOW_UP},
        {"role": "assistant", "content": KEEPERS},
    ]},
    # Ragas' MultiTurnSample: HumanMessage / AIMessage (ToolCall {name, args}) / ToolMessage.
    "ragas": {"user_input": [
        {"content": FIRST, "type": "human"},
        {"content": "", "type": "ai", "tool_calls": [
            {"name": "search_docs", "args": {"query": "lighthouse"}}]},
        {"content": LIGHTHOUSE, "type": "tool"},
        {"content": BUILT, "type": "ai"},
        {"content": FOLLOW_UP, "type": "human"},
        {"content": KEEPERS, "type": "ai"},
    ], "reference": "Two keepers."},
    # DeepEval's ConversationalTestCase: Turn {role, content, retrieval_context}.
    "deepeval": {"turns": [
        {"role": "user", "content": FIRST},
        {"role": "assistant", "content": BUILT,
         "retrieval_context": [{"context": LIGHTHOUSE, "source": "harbour.pdf"}]},
        {"role": "user", "content": FOLLOW_UP},
        {"role": "assistant", "content": KEEPERS, "retrievalContext": []},
    ], "scenario": "a visitor asks about the lighthouse"},
}  # fmt: skip
# The same conversation as two rows that share a session id (one turn each).
SESSION_ROWS = [
    {"question": FIRST, "contexts": [LIGHTHOUSE], "answer": BUILT, "session_id": "s-1"},
    {"question": FOLLOW_UP, "answer": KEEPERS, "session_id": "s-1"},
]


def faithfulness(records: list[RagRecord]) -> list[float | None]:
    from ragpulse.evaluation import evaluate_records
    from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness

    return [r[0].score for r in evaluate_records(records, [LexicalFaithfulness()])]


@pytest.mark.parametrize("shape", sorted(CHATS))
def test_a_conversation_row_gives_a_turn_record_per_turn_each_with_its_history(
    shape: str,
) -> None:
    (first, follow_up), coerced = records_and_coercions(CHATS[shape], 3)
    assert coerced == []
    assert (first.turn, first.question, first.answer) == (1, FIRST, BUILT)
    assert (follow_up.turn, follow_up.question, follow_up.answer) == (2, FOLLOW_UP, KEEPERS)
    assert first.conversation_id == follow_up.conversation_id == "line-3"
    assert not first.history
    said = [(m.role, m.content, m.turn) for m in follow_up.history if m.role != "tool"]
    assert said == [("user", FIRST, 1), ("assistant", BUILT, 1)]
    if shape != "deepeval":  # its tool result too, as the model saw it
        assert [(m.role, m.content) for m in follow_up.history if m.role == "tool"] == [
            ("tool", LIGHTHOUSE)
        ]
    # The first turn's passage is evidence for the follow-up, named as from turn 1.
    [carried] = [d for d in follow_up.documents if d.carried and d.source.kind == "history"]
    assert carried.content == LIGHTHOUSE and carried.source.turn == 1
    assert follow_up.standalone_question is not None
    assert "lighthouse" in follow_up.standalone_question
    built, keepers = faithfulness([first, follow_up])
    assert built is not None and keepers is not None and min(built, keepers) >= 0.7
    if shape == "ragas":  # the sample's reference is the conversation's: its last turn's
        assert follow_up.reference is not None and first.reference is None


def test_rows_of_a_conversation_and_malformed_ones_are_bounded_and_said() -> None:
    from ragpulse.config import ConversationSettings

    long_chat = {"messages": [
        m for i in range(10_000)
        for m in ({"role": "user", "content": f"question {i}"},
                  {"role": "assistant", "content": f"answer {i}"})
    ]}  # fmt: skip
    records, coerced = records_and_coercions(
        long_chat, 1, conversations=ConversationSettings(max_turns=3, max_history_messages=4)
    )
    assert [r.question for r in records] == ["question 9997", "question 9998", "question 9999"]
    assert coerced == ["messages: 20000 -> the last 2000 read", "turns: 1000 -> the last 3 read",
                       "history: 3 turns keep their last 4 messages"]  # fmt: skip
    assert [len(r.history) for r in records] == [4, 4, 4]
    for row, said in [
        ({"turns": "hello"}, "turns: str -> []"),
        ({"turns": [5, {"role": "wizard", "content": "hi"}]}, "turns[]: int dropped"),
        ({"turns": [{"role": "user", "content": 7}]}, "turns[].content: int -> str"),
        ({"turns": [{"role": "assistant", "content": "Hello"}]}, "turns: no user turn"),
        ({"turns": [{"role": "user", "content": "q"},
                    {"role": "assistant", "content": "a", "retrieval_context": "x"}]},
         "turns[].retrieval_context: str -> []"),
        ({"question": "q", "conversation_id": ["x"]}, "conversation_id: list -> null"),
        ({"question": "q", "turn": 0}, "turn: 0 is not a turn number -> null"),
        ({"question": "q", "history": [{"role": "wizard"}]}, "history[]: not a history"),
    ]:  # fmt: skip
        records, coerced = records_and_coercions(row, 1)
        assert any(line.startswith(said) for line in coerced), (row, coerced)
    # An empty id is no id.
    assert row_to_record({"question": "q", "conversation_id": " "}, 1).conversation_id is None


def test_eval_writes_a_line_per_turn_and_a_record_per_conversation(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each format's conversation, rows sharing a session id, a log whose rows repeat the
    conversation so far, and a malformed row: every turn scored once with its history,
    every conversation closed at the end of the run, the malformed row counted."""
    log = CHATS["openai"]["messages"]
    rows = [
        *CHATS.values(),  # lines 1-3
        *SESSION_ROWS,  # lines 4-5
        {"messages": log[:5], "conversation_id": "log-1"},  # line 6: turn 1
        {"messages": log, "conversation_id": "log-1"},  # line 7: turn 1 again, then turn 2
        {"turns": [{"role": "user", "content": 7}, "not a turn"]},  # line 8
    ]
    source = write_rows(tmp_path / "chats.jsonl", rows)
    conversation_line = {"conversation": {"conversation_id": "old", "turns": []}, "results": []}
    with source.open("a") as f:
        f.write(json.dumps(conversation_line) + "\n")  # line 10: given back as it is
    out = tmp_path / "out.jsonl"
    metrics = "faithfulness/lexical,user_frustration/rules,conversation_groundedness/rules"
    assert main(["eval", str(source), "-o", str(out), "--metrics", metrics]) == 0
    written = [json.loads(line) for line in out.read_text(encoding="utf-8").splitlines()]
    conversations = {c["conversation"]["conversation_id"]: c for c in written[-5:]}
    turns = written[:-5]
    # The earlier turn of a conversation row comes just before the row, as a line of its own.
    assert [(t["line"], t.get("turn")) for t in turns if "line" in t] == [
        (1, 1), (2, 1), (3, 1), (9, None),  # line 7's turn 1 was scored on line 6: not again
    ]  # fmt: skip
    by_question = [t for t in turns if t.get("question") == FOLLOW_UP]
    assert [(t["conversation_id"], t["turn"]) for t in by_question] == [("s-1", 2)]
    follow_ups = [t for t in turns if t.get("turn") == 2]
    assert len(follow_ups) == 5  # every conversation's follow-up, scored once each
    for turn in follow_ups:  # answered from the first turn's passage
        assert turn["results"][0]["score"] >= 0.7, turn
    assert sorted(conversations) == ["line-1", "line-2", "line-3", "log-1", "s-1"]
    for conversation in conversations.values():
        record = conversation["conversation"]
        assert record["closed_by"] == "end_of_run" and record["revision"] == 1
        assert [t["turn"] for t in record["turns"]] == [1, 2]
        assert [r["metric"] for r in conversation["results"]] == [
            "user_frustration", "conversation_groundedness",
        ]  # fmt: skip
        assert conversation["results"][1]["score"] == 1.0  # both turns grounded
    assert {"conversation": {"conversation_id": "old", "turns": []}, "results": []} in turns
    malformed = turns[-3]  # then the unreadable line, then the conversation line
    assert malformed["coerced"] == ["turns[].content: int -> str", "turns[]: str dropped"]
    said = " ".join(capsys.readouterr().err.split())
    assert "5 conversations (10 turns) closed at the end of the run" in said
    assert "1 earlier turns shown again by a later row of their conversation" in said
    assert "1 conversation lines in the input given back as they are" in said
