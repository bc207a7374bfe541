"""Agent turns from spans: the shapes instrumentations write, and hostile ones.

The real frameworks' traces are read end to end in tests/live/test_agent_frameworks.py;
here, spans written as the GenAI and OpenInference conventions say, to pin each rule
(which results are documents, which tools retrieve, what the answer is) and each bound.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from support.helpers import make_span, new_span_id, new_trace_id

from ragpulse.collector.extract import messages as messages_module
from ragpulse.collector.extract.records import extract_records
from ragpulse.config import AgentSettings
from ragpulse.record import RagRecord, Span, SpanStatus

PASSAGES = [
    {"id": "kb-1", "content": "The ferry leaves the north quay at 8 am on weekdays."},
    {"id": "kb-2", "content": "Tickets cost 12 euros and are sold on board."},
]


def _parts(role: str, *parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "parts": list(parts)}


def _text(content: str) -> dict[str, Any]:
    return {"type": "text", "content": content}


def _call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": arguments}


def _response(call_id: str, result: Any) -> dict[str, Any]:
    return {"type": "tool_call_response", "id": call_id, "response": result}


def genai_turn(
    question: str = "When does the ferry leave?",
    answer: str = "The ferry leaves the north quay at 8 am on weekdays.",
    results: list[tuple[str, str, dict[str, Any], Any]] | None = None,
    tool_spans: bool = True,
    with_result: bool = True,
) -> list[Span]:
    """An ``invoke_agent`` turn in the GenAI conventions: chat, tools, chat."""
    results = (
        results if results is not None else [("c1", "search_docs", {"query": "ferry"}, PASSAGES)]
    )
    t, root = new_trace_id(), new_span_id()
    user = _parts("user", _text(question))
    asked = _parts("assistant", *[_call(i, n, **a) for i, n, a, _ in results])
    answered = _parts("user", *[_response(i, r) for i, _, _, r in results])
    spans = [
        make_span(t, "invoke_agent support", {"gen_ai.operation.name": "invoke_agent"},
                  span_id=root, start=0, end=100),
        make_span(t, "chat m", {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": 10, "gen_ai.usage.output_tokens": 2,
            "gen_ai.input.messages": json.dumps([user]),
            "gen_ai.output.messages": json.dumps([asked])}, parent=root, start=1, end=10),
        make_span(t, "chat m", {
            "gen_ai.operation.name": "chat", "gen_ai.request.model": "m",
            "gen_ai.usage.input_tokens": 30, "gen_ai.usage.output_tokens": 9,
            "gen_ai.input.messages": json.dumps([user, asked, answered]),
            "gen_ai.output.messages": json.dumps([_parts("assistant", _text(answer))])},
            parent=root, start=60, end=90),
    ]  # fmt: skip
    if tool_spans:
        for n, (call_id, name, arguments, result) in enumerate(results):
            attrs: dict[str, Any] = {
                "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
                "gen_ai.tool.call.id": call_id, "gen_ai.tool.call.arguments": json.dumps(arguments),
            }  # fmt: skip
            if with_result:
                attrs["gen_ai.tool.call.result"] = (
                    result if isinstance(result, str) else json.dumps(result)
                )
            spans.append(
                make_span(t, f"execute_tool {name}", attrs, parent=root, start=11 + n, end=12 + n)
            )
    return spans


def one(spans: list[Span], **settings: Any) -> RagRecord:
    [record], reason = extract_records(spans, agents=AgentSettings(**settings))
    assert reason is None
    return record


def test_a_turn_is_one_record_with_a_document_per_passage_naming_its_call() -> None:
    record = one(genai_turn())
    assert record.kind == "agent"
    assert record.question == "When does the ferry leave?"
    assert record.answer == "The ferry leaves the north quay at 8 am on weekdays."
    assert [d.id for d in record.documents] == ["kb-1", "kb-2"]
    source = record.documents[1].source
    assert source is not None and source.label == "tool search_docs #2"
    assert (source.call_id, source.query, source.retrieval) == ("c1", "ferry", True)
    assert record.input_tokens == 40 and record.output_tokens == 11 and record.model_calls == 2
    [call] = record.tool_calls
    assert call.status == "ok" and call.documents == [0, 1] and call.span_id == source.span_id


def test_without_the_result_on_the_tool_span_the_next_model_call_gives_it() -> None:
    # gen_ai.tool.call.result is opt-in: the tool message in the next call's input has it.
    record = one(genai_turn(with_result=False))
    assert [d.content for d in record.documents] == [p["content"] for p in PASSAGES]
    [call] = record.tool_calls
    assert call.span_id is not None and call.status == "ok"


def test_without_tool_spans_the_messages_give_every_call() -> None:
    record = one(genai_turn(tool_spans=False))
    [call] = record.tool_calls
    assert call.name == "search_docs" and call.span_id is None and call.arguments
    assert record.documents[0].source is not None and record.documents[0].source.kind == "message"


def test_which_tools_retrieve() -> None:
    results = [
        ("c1", "get_weather", {"city": "Oslo"}, "12 degrees and light rain in Oslo"),
        ("c2", "kb_lookup", {"q": "ferry"}, "The ferry leaves at 8 am."),
        ("c3", "fetch_rows", {}, [{"text": "a row of the table"}]),
    ]
    record = one(genai_turn(results=results))
    retrieval = {c.name: c.retrieval for c in record.tool_calls}
    # a plain function, a name matching the globs, a result that is a list of documents
    assert retrieval == {"get_weather": False, "kb_lookup": True, "fetch_rows": True}
    assert [i for i, _ in record.retrieved()] == [1, 2]  # context relevance reads these
    assert len(record.documents) == 3  # faithfulness reads every result
    assert one(genai_turn(results=results), retrieval_tools=["get_*"]).tool_calls[0].retrieval


def test_an_error_and_a_call_with_no_result_are_kept() -> None:
    spans = genai_turn(tool_spans=False, results=[("c1", "search_docs", {"query": "x"}, "")])
    spans[2] = spans[2].model_copy(
        update={"attributes": {**spans[2].attributes, "gen_ai.input.messages": json.dumps(
            [_parts("user", _text("When does the ferry leave?"))])}}
    )  # fmt: skip
    [call] = one(spans).tool_calls
    assert call.status == "no_result"
    failing = genai_turn()
    failing[3] = failing[3].model_copy(
        update={"status": SpanStatus.ERROR, "status_message": "timeout"}
    )
    [call] = one(failing).tool_calls
    assert call.status == "error" and call.error == "timeout"


def test_a_structured_output_through_an_output_tool_is_the_answer() -> None:
    spans = genai_turn()
    params = json.dumps({"output_tools": [{"name": "final_result"}]})
    final = _parts("assistant", _call("c9", "final_result", departure="8 am"))
    spans[2] = spans[2].model_copy(
        update={"attributes": {**spans[2].attributes, "model_request_parameters": params,
                               "gen_ai.output.messages": json.dumps([final])}}
    )  # fmt: skip
    record = one(spans)
    assert json.loads(record.answer) == {"departure": "8 am"}
    assert [c.name for c in record.tool_calls] == ["search_docs"]


def test_hostile_tool_results_are_bounded_and_said() -> None:
    giant = "ferry " * 2_000_000  # 12 MB of text
    results = [
        ("c1", "search_docs", {"query": "ferry"}, giant),
        ("c2", "search_docs", {"query": "ferry"}, "[{not json"),
        ("c3", "search_docs", {"query": "ferry"}, "\x00\x01binary\xff"),
    ]
    record = one(genai_turn(results=results), max_result_chars=1_000)
    assert len(record.documents[0].content) == 1_000
    assert any("cut to 1000" in note for note in record.attributes["ragpulse.coerced"])  # type: ignore[union-attr]
    assert record.documents[1].content == "[{not json"
    assert len(record.tool_calls) == 3


def test_ten_thousand_tool_calls_are_cut_to_the_bound_and_counted() -> None:
    results = [(f"c{i}", "search_docs", {"query": f"q{i}"}, f"result {i}") for i in range(10_000)]
    record = one(genai_turn(results=results), max_tool_calls=100)
    assert len(record.tool_calls) == 100
    assert "tool_calls: 10000 -> 100 kept" in record.attributes["ragpulse.coerced"]  # type: ignore[operator]


def test_parent_ids_in_a_cycle_neither_hang_nor_crash() -> None:
    spans = genai_turn()
    a, b = spans[1], spans[2]
    spans[1] = a.model_copy(update={"parent_span_id": b.span_id})
    spans[2] = b.model_copy(update={"parent_span_id": a.span_id})
    records, _ = extract_records(spans)  # each span is read once: no hang, no crash
    assert all(r.kind == "agent" for r in records)


def test_each_model_call_is_parsed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    parsed: list[int] = []
    real = messages_module.parse_messages

    def counting(value: Any) -> Any:
        parsed.append(1)
        return real(value)

    monkeypatch.setattr(messages_module, "parse_messages", counting)
    results = [(f"c{i}", "search_docs", {"query": "ferry"}, PASSAGES) for i in range(5)]
    one(genai_turn(results=results))
    assert len(parsed) <= 4  # two calls' inputs and outputs, whatever the number of reads


def test_a_rag_chain_is_still_a_rag_record() -> None:
    t, root = new_trace_id(), new_span_id()
    spans = [
        make_span(t, "chain", {"openinference.span.kind": "CHAIN", "input.value": "q?",
                               "output.value": "an answer"}, span_id=root),
        make_span(t, "retrieve", {"openinference.span.kind": "RETRIEVER",
                                  "retrieval.documents.0.document.content": "a doc"}, parent=root),
        make_span(t, "llm", {"openinference.span.kind": "LLM",
                             "llm.output_messages.0.message.role": "assistant",
                             "llm.output_messages.0.message.content": "an answer"}, parent=root),
    ]  # fmt: skip
    record = one(spans)
    assert record.kind == "rag" and record.answer == "an answer" and not record.tool_calls


def _openinference_chat(trace_id: str, parent: str, messages: list[tuple[str, str]]) -> Span:
    attrs: dict[str, Any] = {"openinference.span.kind": "LLM"}
    for i, (role, content) in enumerate(messages[:-1]):
        attrs[f"llm.input_messages.{i}.message.role"] = role
        attrs[f"llm.input_messages.{i}.message.content"] = content
    attrs["llm.output_messages.0.message.role"] = messages[-1][0]
    attrs["llm.output_messages.0.message.content"] = messages[-1][1]
    return make_span(trace_id, "ScriptedChat", attrs, parent=parent)


def test_a_follow_up_answered_from_earlier_tool_results_is_a_turn() -> None:
    """A LangGraph thread's second turn: one model call, no tool call of its own, the first
    turn's tool result in its input. Without a tool result there it is no turn."""
    t, root = new_trace_id(), new_span_id()
    chain = {"openinference.span.kind": "CHAIN", "session.id": "thread-1"}
    history = [
        ("user", "When does the ferry leave?"),
        ("tool", json.dumps(PASSAGES)),
        ("assistant", "At 8 am on weekdays."),
        ("user", "And what does a ticket cost?"),
        ("assistant", "Tickets cost 12 euros and are sold on board."),
    ]
    record = one([make_span(t, "LangGraph", chain, span_id=root),
                  _openinference_chat(t, root, history)])  # fmt: skip
    assert record.kind == "agent" and not record.tool_calls
    assert record.question == "And what does a ticket cost?"
    assert "Tickets cost 12 euros" in " ".join(d.content for d in record.documents)
    plain = [("user", "Hello?"), ("assistant", "Hi.")]
    t2, root2 = new_trace_id(), new_span_id()
    records, _ = extract_records(
        [make_span(t2, "LangGraph", chain, span_id=root2), _openinference_chat(t2, root2, plain)],
        agents=AgentSettings(),
    )
    assert records == []
