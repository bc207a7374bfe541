"""Stored traces: the source URLs and times, the bounded and retried reads, and the Langfuse
source end to end, one-shot (``ragpulse eval --from``) and following (``serve --source``).

No Langfuse server can run here (it needs ClickHouse, Redis, S3 and Postgres): the
Langfuse source reads from, and writes its scores to, the local double that checks
every request and every answer against the models the langfuse SDK generates from
Langfuse's API definition (tests/support/langfuse_double.py). The traces it serves are
real: the demo app's spans, recorded by the OpenTelemetry SDK. Phoenix and MLflow are
tested against the real servers in tests/live/test_stored_traces.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from prometheus_client import CollectorRegistry
from support import chat_turns
from support.kafka_env import free_port, wait_until
from support.langfuse_double import LangfuseDouble

import ragpulse
from ragpulse.cli import demo_app, main
from ragpulse.collector.service import Collector
from ragpulse.collector.stored.common import SourceMetrics, parse_time
from ragpulse.collector.stored.follow import StoredTraceSource
from ragpulse.collector.stored.tool import open_reader, parse_backend_url
from ragpulse.collector.stored.write_back import with_write_back
from ragpulse.config import Settings, StoredTracesSettings
from ragpulse.errors import BackendError, BackendUnreachable, ConfigError
from ragpulse.exporters.memory import InMemorySink

PUBLIC, SECRET = "pk-lf-stored", "sk-lf-never-shown"
NOW = 1_800_000_000_000_000_000


# --- URLs and times -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "tool", "base", "target"),
    [
        ("phoenix://127.0.0.1:6006/rag-app", "phoenix", "http://127.0.0.1:6006", "rag-app"),
        ("phoenix+https://px.example.com/my%20app", "phoenix", "https://px.example.com", "my app"),
        ("phoenix://h:6006/proxy/px/app", "phoenix", "http://h:6006/proxy/px", "app"),
        ("mlflow://127.0.0.1:5000/12", "mlflow", "http://127.0.0.1:5000", "12"),
        ("MLFLOW+HTTPS://ml.example.com/3", "mlflow", "https://ml.example.com", "3"),
        ("langfuse://127.0.0.1:3000", "langfuse", "http://127.0.0.1:3000", None),
        ("langfuse+https://cloud.langfuse.com/", "langfuse", "https://cloud.langfuse.com", None),
        ("phoenix://[::1]:6006/p", "phoenix", "http://[::1]:6006", "p"),
    ],
)
def test_source_urls(url: str, tool: str, base: str, target: str | None) -> None:
    parsed = parse_backend_url(url)
    assert (parsed.tool, parsed.base_url, parsed.target) == (tool, base, target)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://127.0.0.1:6006/p", "unsupported source URL scheme 'http'"),
        ("phoenix+ftp://h/p", "unsupported source URL scheme"),
        ("phoenix://h:6006", "ends with the project name"),
        ("mlflow://h:5000/rag-app", "experiment ids are numbers"),
        ("phoenix://user:s3cret@h:6006/p", "credentials do not go in the source URL"),
        ("langfuse://h:3000?public_key=x", "takes no query"),
        ("phoenix:///p", "names no host"),
        ("phoenix://h:99999/p", "invalid port"),
    ],
)
def test_bad_source_urls_say_what_is_wrong(url: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says) as caught:
        parse_backend_url(url)
    assert "s3cret" not in str(caught.value)


@pytest.mark.parametrize(
    ("text", "ns"),
    [
        ("90s", NOW - 90 * 10**9),
        ("15m", NOW - 15 * 60 * 10**9),
        ("2h", NOW - 2 * 3600 * 10**9),
        ("7d", NOW - 7 * 86400 * 10**9),
        ("1.5h", NOW - 5400 * 10**9),
        ("2027-01-15T08:00:00Z", 1_800_000_000_000_000_000),
        ("2027-01-15", 1_799_971_200_000_000_000),
        ("2027-01-15T09:00:00+01:00", 1_800_000_000_000_000_000),
        ("2027-01-15T08:00:00", 1_800_000_000_000_000_000),  # no zone: UTC
    ],
)
def test_times_are_durations_before_now_or_iso(text: str, ns: int) -> None:
    assert parse_time(text, NOW) == ns


def test_a_time_that_is_neither_says_both_shapes() -> None:
    with pytest.raises(ConfigError, match=r"neither a duration .* nor an ISO 8601 time"):
        parse_time("yesterday", NOW)


# --- the app's traces, as Langfuse holds them -------------------------------------------


def demo_traces(count: int, service: str = "rag-app") -> dict[str, list[ReadableSpan]]:
    """``count`` answers of the demo app, traced by ragpulse's decorators into the SDK."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    recorded = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(recorded))
    ragpulse.configure(exporter="none", tracer_provider=provider)
    try:
        questions = demo_app.corpus()["questions"]
        for i in range(count):
            demo_app.answer(questions[i % len(questions)]["question"], ungrounded_rate=0.0)
    finally:
        ragpulse.shutdown()
    traces: dict[str, list[ReadableSpan]] = {}
    for span in recorded.get_finished_spans():
        traces.setdefault(format(span.context.trace_id, "032x"), []).append(span)
    return traces


def span_ids(spans: list[ReadableSpan]) -> dict[str, str]:
    """role -> span id (root, chat, retrieval) of one demo trace."""
    out = {}
    for span in spans:
        role = "root" if span.parent is None else span.name.split(" ")[0]
        out[{"root": "root", "chat": "chat", "retrieval": "retrieval"}.get(role, role)] = format(
            span.context.span_id, "016x"
        )
    return out


@pytest.fixture
def langfuse(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[LangfuseDouble]:
    monkeypatch.setenv("LANGFUSE_PUBLIC_KEY", PUBLIC)
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", SECRET)
    monkeypatch.setenv("RAGPULSE_CACHE_DIR", str(tmp_path / "cache"))
    with LangfuseDouble(public_key=PUBLIC, secret_key=SECRET) as server:
        yield server


def url_of(double: LangfuseDouble) -> str:
    return double.url.replace("http://", "langfuse://")


def cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["--log-level", "WARNING", *args])
    out, err = capsys.readouterr()
    return code, out, err


def scores_by_span(double: LangfuseDouble) -> dict[tuple[str, str], list[dict[str, Any]]]:
    out: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for score in double.scores:
        out.setdefault((score["observationId"], score["name"]), []).append(score)
    return out


def test_eval_from_langfuse_scores_every_trace_on_the_spans_it_judges(
    langfuse: LangfuseDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = demo_traces(6)
    for spans in traces.values():
        langfuse.add_spans(spans)
    out = tmp_path / "scored.jsonl"
    code, _, err = cli(["eval", "--from", url_of(langfuse), "-o", str(out)], capsys)
    assert code == 0, err
    assert langfuse.invalid == []
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert {r["trace_id"] for r in rows} == set(traces)
    shown = scores_by_span(langfuse)
    for spans in traces.values():
        ids = span_ids(spans)
        assert len(shown[(ids["chat"], "faithfulness")]) == 1
        assert len(shown[(ids["retrieval"], "context_relevance")]) == 1
    assert f"6 traces ({sum(map(len, traces.values()))} spans) read from langfuse" in err
    assert SECRET not in err
    # Every read asked for the OpenTelemetry attributes in full.
    full = [q for q in langfuse.gets if "traceId" in q]
    assert full and all(q["expandMetadata"] == ["attributes,resourceAttributes"] for q in full)

    # A second run replaces: the same score ids, upserted by Langfuse, nothing new.
    first = {s["id"] for s in langfuse.scores}
    code, _, err = cli(["eval", "--from", url_of(langfuse)], capsys)
    assert code == 0, err
    assert {s["id"] for s in langfuse.scores} == first
    assert len(langfuse.scores) == 2 * len(first)  # each sent twice, under one id each


def test_eval_from_langfuse_window_limit_and_dry_run(
    langfuse: LangfuseDouble, capsys: pytest.CaptureFixture[str]
) -> None:
    traces = demo_traces(5)
    for spans in traces.values():
        langfuse.add_spans(spans)
    code, out, err = cli(["eval", "--from", url_of(langfuse), "--limit", "2", "--dry-run"], capsys)
    assert code == 0, err
    printed = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert printed and {p["sink"] for p in printed} == {"langfuse"}
    assert len({s["traceId"] for p in printed for s in p["body"]}) == 2
    assert langfuse.scores == []  # a dry run sends nothing
    assert "dry run: nothing was written to langfuse" in err
    # Newest first: no trace left out started later (Langfuse keeps milliseconds).
    chosen = {s["traceId"] for p in printed for s in p["body"]}
    started = {t: min(s.start_time for s in spans) // 10**6 for t, spans in traces.items()}
    assert min(started[t] for t in chosen) >= max(v for t, v in started.items() if t not in chosen)

    code, _, err = cli(["eval", "--from", url_of(langfuse), "--until", "2h"], capsys)
    assert code == 0 and "0 traces (0 spans)" in err and "no trace started" in err


def test_eval_from_an_unreachable_tool_is_one_line_naming_it(
    langfuse: LangfuseDouble, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "ragpulse.yaml"
    config.write_text("stored_traces: {retry_for_s: 0.3, backoff_s: 0.05}\n")
    port = free_port()  # nothing listens there
    url = f"langfuse://127.0.0.1:{port}"
    code, _, err = cli(["eval", "--from", url, "--config", str(config)], capsys)
    assert code == 2
    assert f"langfuse at http://127.0.0.1:{port} did not answer (ConnectError)" in err
    assert SECRET not in err

    for _ in range(50):  # 503 for longer than retry_for_s
        langfuse.answer_next_get(503, {"message": "overloaded"})
    code, _, err = cli(["eval", "--from", url_of(langfuse), "--config", str(config)], capsys)
    assert code == 2 and "did not answer (HTTP 503)" in err


def test_refused_credentials_are_a_clear_error_that_shows_no_secret(
    langfuse: LangfuseDouble, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("LANGFUSE_SECRET_KEY", "sk-lf-wrong-secret")
    code, _, err = cli(["eval", "--from", url_of(langfuse)], capsys)
    assert code == 2
    assert "langfuse at http://127.0.0.1" in err and "refused the credentials (HTTP 401)" in err
    assert "sk-lf-wrong-secret" not in err
    monkeypatch.delenv("LANGFUSE_SECRET_KEY")
    code, _, err = cli(["eval", "--from", url_of(langfuse)], capsys)
    assert code == 2 and "LANGFUSE_SECRET_KEY" in err


def test_flags_that_need_from_or_refuse_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = tmp_path / "rows.jsonl"
    rows.write_text('{"question": "q", "contexts": ["c"], "answer": "a"}\n')
    code, _, err = cli(
        ["eval", str(rows), "-o", str(tmp_path / "o.jsonl"), "--since", "1h"], capsys
    )
    assert code == 2 and "--since need --from" in err
    code, _, err = cli(["eval", str(rows), "--from", "phoenix://h:1/p"], capsys)
    assert code == 2 and "it takes no the input file" in err
    code, _, err = cli(
        ["eval", "--from", "phoenix://h:1/p", "--since", "1h", "--until", "2h"], capsys
    )
    assert code == 2 and "--until must be later than --since" in err
    code, _, err = cli(["eval", str(rows)], capsys)
    assert code == 2 and "-o/--output are needed" in err


# --- bounds and retries -------------------------------------------------------------------


def reader_for(double: LangfuseDouble, **settings: Any) -> tuple[Any, CollectorRegistry]:
    registry = CollectorRegistry()
    config = StoredTracesSettings(public_key=PUBLIC, secret_key=SECRET, **settings)
    url = parse_backend_url(url_of(double))
    return open_reader(url, config, SourceMetrics(registry)), registry


def requests(registry: CollectorRegistry, outcome: str) -> float:
    labels = {"backend": "langfuse", "outcome": outcome}
    return registry.get_sample_value("ragpulse_source_requests_total", labels) or 0.0


def test_429_and_503_are_retried_honouring_retry_after(langfuse: LangfuseDouble) -> None:
    traces = demo_traces(2)
    for spans in traces.values():
        langfuse.add_spans(spans)
    reader, registry = reader_for(langfuse, backoff_s=0.01, max_backoff_s=0.05)
    langfuse.answer_next_get(429, {"message": "slow down"}, {"Retry-After": "0"})
    langfuse.answer_next_get(503, {"message": "busy"})
    refs = [r for page in reader.roots(0, None) for r in page]
    assert {r.trace_id for r in refs} == set(traces)
    assert requests(registry, "retried") == 2 and requests(registry, "ok") == 1


def test_a_page_past_page_bytes_is_asked_for_again_in_halves(langfuse: LangfuseDouble) -> None:
    traces = demo_traces(3)
    for spans in traces.values():
        langfuse.add_spans(spans)
    reader, registry = reader_for(langfuse, page_bytes=64 * 1024, page_spans=1000)
    for obs in langfuse.observations:  # each observation about 30 KB
        obs["metadata"]["attributes"]["padding"] = "x" * 30_000
    spans = [
        s
        for page in reader.recent(0, wanted=lambda t: True, known=lambda s: False)
        for s in page.spans
    ]
    assert len(spans) == len(langfuse.observations)
    limits = [int(q["limit"][0]) for q in langfuse.gets]
    assert limits[0] == 1000 and min(limits) <= 2  # halved until a page fits
    assert requests(registry, "too_large") >= 1

    reader, _ = reader_for(langfuse, page_bytes=64 * 1024)
    langfuse.observations[0]["metadata"]["attributes"]["padding"] = "x" * 100_000
    with pytest.raises(
        BackendError, match=r"one item alone is larger; raise stored_traces\.page_bytes"
    ):
        list(reader.recent(0, wanted=lambda t: True, known=lambda s: False))


def test_an_unreachable_tool_names_itself_and_keeps_no_credentials() -> None:
    port = free_port()
    config = StoredTracesSettings(
        public_key=PUBLIC, secret_key=SECRET, retry_for_s=0.2, backoff_s=0.05
    )
    reader = open_reader(
        parse_backend_url(f"langfuse://127.0.0.1:{port}"),
        config,
        SourceMetrics(CollectorRegistry()),
    )
    with pytest.raises(BackendUnreachable) as caught:
        list(reader.roots(0, None))
    assert f"langfuse at http://127.0.0.1:{port} did not answer" in str(caught.value)
    assert SECRET not in str(caught.value)


# --- follow mode --------------------------------------------------------------------------


def follow_settings(double: LangfuseDouble, state: Path) -> Settings:
    settings = Settings(
        source="langfuse",
        metrics_port=0,
        stored_traces={
            "url": url_of(double),
            "poll_s": 0.05,
            "overlap_s": 3600,
            "state_file": str(state),
            "backoff_s": 0.01,
            "max_backoff_s": 0.05,
        },
        assembly={"grace_s": 0.05, "tick_s": 0.02},
        evaluation={"evaluators": ["faithfulness/lexical", "context_relevance/lexical"]},
        sinks={"langfuse": {"max_wait_s": 0.01}},
    )
    return with_write_back(settings, parse_backend_url(url_of(double)))


def follower(settings: Settings) -> tuple[Collector, InMemorySink, StoredTraceSource]:
    memory = InMemorySink()
    collector = Collector(settings, extra_sinks=[memory], metrics_server=False)
    source = collector.source
    assert isinstance(source, StoredTraceSource)
    return collector.start(), memory, source


def sample(collector: Collector, name: str, **labels: str) -> float:
    return collector.metrics.registry.get_sample_value(name, labels) or 0.0


def test_follow_mode_scores_new_traces_and_a_restart_neither_skips_nor_repeats(
    langfuse: LangfuseDouble, tmp_path: Path
) -> None:
    settings = follow_settings(langfuse, tmp_path / "state.json")
    first, second = demo_traces(3), demo_traces(2)
    for spans in first.values():
        langfuse.add_spans(spans)
    collector, memory, source = follower(settings)
    try:
        wait_until(lambda: len(memory.items) == 3, 30, "the first traces were not scored")
        for spans in second.values():
            langfuse.add_spans(spans)
        wait_until(lambda: len(memory.items) == 5, 30, "the later traces were not scored")
        assert langfuse.invalid == []
        polls = source.polls
        assert source.wait_polls(polls + 3, 30)  # read again: nothing new
        assert sorted(i.record.trace_id for i in memory.items) == sorted([*first, *second])
        assert (
            sample(
                collector, "ragpulse_source_spans_total", backend="langfuse", outcome="duplicate"
            )
            > 0
        )
    finally:
        collector.stop()

    third = demo_traces(2)
    for spans in third.values():
        langfuse.add_spans(spans)
    collector, memory, source = follower(settings)  # a restart, the same state file
    try:
        wait_until(
            lambda: len(memory.items) >= 2, 30, "the traces after the restart were not scored"
        )
        assert source.wait_polls(source.polls + 3, 30)
        assert sorted(i.record.trace_id for i in memory.items) == sorted(third)  # no repeat
    finally:
        collector.stop()
    state = json.loads((tmp_path / "state.json").read_text())
    assert set(state["settled"]) == {*first, *second, *third}
    scored = scores_by_span(langfuse)
    for spans in [*first.values(), *second.values(), *third.values()]:
        assert len({s["id"] for s in scored[(span_ids(spans)["chat"], "faithfulness")]}) == 1


def test_follow_mode_counts_late_spans_and_survives_an_outage(
    langfuse: LangfuseDouble, tmp_path: Path
) -> None:
    settings = follow_settings(langfuse, tmp_path / "state.json")
    settings = settings.model_copy(
        update={"stored_traces": settings.stored_traces.model_copy(update={"retry_for_s": 0.1})}
    )
    traces = demo_traces(1)
    [(trace_id, spans)] = traces.items()
    langfuse.add_spans(spans)
    collector, memory, _ = follower(settings)
    try:
        wait_until(lambda: len(memory.items) == 1, 30, "the trace was not scored")
        wait_until(
            lambda: trace_id in json.loads((tmp_path / "state.json").read_text())["settled"],
            30,
            "not settled",
        )
        late = dict(langfuse.observations[-1], id="00000000000000ab", name="late child")
        with langfuse.received:
            langfuse.observations.append(late)
        wait_until(
            lambda: (
                sample(collector, "ragpulse_source_spans_total", backend="langfuse", outcome="late")
                == 1
            ),
            30,
            "the late span was not counted",
        )
        assert sample(collector, "ragpulse_dropped_total", reason="late_span") == 1
        for _ in range(20):
            langfuse.answer_next_get(503, {"message": "down"})
        wait_until(
            lambda: (
                sample(
                    collector, "ragpulse_source_polls_total", backend="langfuse", outcome="failed"
                )
                >= 1
            ),
            30,
            "the outage was not counted",
        )
        more = demo_traces(1)
        for new_spans in more.values():
            langfuse.add_spans(new_spans)
        wait_until(lambda: len(memory.items) == 2, 30, "polling did not resume after the outage")
    finally:
        collector.stop()


def test_follow_mode_refuses_a_state_file_of_another_source(
    langfuse: LangfuseDouble, tmp_path: Path
) -> None:
    state = tmp_path / "state.json"
    state.write_text(
        json.dumps({"version": 1, "url": "http://elsewhere:1", "watermark_ns": 1, "settled": {}})
    )
    with pytest.raises(ConfigError, match="belongs to http://elsewhere:1"):
        Collector(follow_settings(langfuse, state), metrics_server=False)
    with pytest.raises(ConfigError, match=r"set stored_traces\.url"):
        Collector(Settings(source="phoenix"), metrics_server=False)


def test_a_conversation_read_once_closes_at_the_end_of_the_run(
    langfuse: LangfuseDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three turns of one chat session (``session.id`` on each turn's root span) read by
    ``eval --from``: each turn is a record, and the conversation is closed when the run
    ends (nothing more of it will be read), its record in the JSONL."""
    traces = demo_traces(3)
    for spans in traces.values():
        for obs in langfuse.add_spans(spans):
            if obs["isRootObservation"]:
                obs["metadata"]["attributes"]["session.id"] = "chat-7"
    out = tmp_path / "scored.jsonl"
    code, _, err = cli(["eval", "--from", url_of(langfuse), "-o", str(out)], capsys)
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    turns = [r for r in rows if "trace_id" in r]
    [conversation] = [r["conversation"] for r in rows if "conversation" in r]
    assert {r["trace_id"] for r in turns} == set(traces)
    assert conversation["conversation_id"] == "chat-7"
    assert conversation["closed_by"] == "end_of_run" and len(conversation["turns"]) == 3


# --- a conversation served out of order ---------------------------------------------------

ORDERS = ["newest first", "shuffled"]
ONE_TRACE_A_BATCH = "evaluation: {batch_size: 1}\n"
"""The turns are evaluated in the order the source hands them over (a batch of several
traces is put in order by the pipeline itself, which would hide the source's order)."""


def store_conversation(double: LangfuseDouble, session: str, order: str) -> list[str]:
    """A three-turn conversation in the double (its trace ids in the order the turns were
    taken), served newest first as Langfuse pages, or turns 2, 3, 1."""
    turns = chat_turns.record_conversation(session, service="chat-app")
    for spans in turns:
        double.add_spans(spans)
    taken = [chat_turns.trace_id(spans) for spans in turns]
    if order == "shuffled":
        rank = {tid: i for i, tid in enumerate([taken[1], taken[2], taken[0]])}
        double.order = lambda obs: (rank[obs["traceId"]], obs["startTime"])
    return taken


def read_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.read_text().splitlines()] if path.exists() else []


@pytest.mark.parametrize("order", ORDERS)
def test_eval_from_joins_a_conversation_served_out_of_order_in_the_order_taken(
    langfuse: LangfuseDouble, tmp_path: Path, capsys: pytest.CaptureFixture[str], order: str
) -> None:
    """Each turn is evaluated after the turns taken before it, whatever order the tool
    serves them in: numbered 1, 2, 3, each with the earlier turns (and only those) as its
    history and their passages as evidence."""
    taken = store_conversation(langfuse, "chat-ooo", order)
    out, config = tmp_path / "scored.jsonl", tmp_path / "ragpulse.yaml"
    config.write_text(ONE_TRACE_A_BATCH)
    code, _, err = cli(
        ["eval", "--from", url_of(langfuse), "-o", str(out), "--config", str(config)], capsys
    )
    assert code == 0, err
    chat_turns.check_only_earlier_turns(read_lines(out), "chat-ooo", taken, in_order=True)


@pytest.mark.parametrize("order", ORDERS)
def test_follow_mode_joins_a_conversation_served_out_of_order_in_the_order_taken(
    langfuse: LangfuseDouble, tmp_path: Path, order: str
) -> None:
    taken = store_conversation(langfuse, "chat-ooo", order)
    settings = follow_settings(langfuse, tmp_path / "state.json")
    results = tmp_path / "follow.jsonl"
    settings = settings.model_copy(
        update={
            "sinks": {**settings.sinks, "jsonl": {"path": str(results)}},
            "conversations": settings.conversations.model_copy(
                update={"idle_s": 0.2, "tick_s": 0.05}
            ),
            "evaluation": settings.evaluation.model_copy(update={"batch_size": 1}),
        }
    )
    collector, _, _ = follower(settings)
    try:
        wait_until(
            lambda: chat_turns.conversation_records(read_lines(results), "chat-ooo"),
            30,
            "the conversation was not closed",
        )
    finally:
        collector.stop()
    chat_turns.check_only_earlier_turns(read_lines(results), "chat-ooo", taken, in_order=True)


def test_a_poll_that_fails_half_way_still_hands_over_what_it_read(
    langfuse: LangfuseDouble, tmp_path: Path
) -> None:
    """A poll's traces go over together, oldest first; a poll cut by a failure after its
    first page hands that page's spans over all the same (they count as read: a later poll
    drops them), so every turn is scored and settled."""
    from ragpulse.collector.stored.langfuse import LangfuseReader

    class FailsOnce(LangfuseReader):
        """The real reader, cut after one page in its first poll (a connection reset)."""

        failed = False

        def recent(self, since_ns: int, **kwargs: Any) -> Iterator[Any]:
            pages = super().recent(since_ns, **kwargs)
            if FailsOnce.failed:
                yield from pages
                return
            FailsOnce.failed = True
            yield next(pages)
            raise BackendError("langfuse at the double: connection reset")

    taken = store_conversation(langfuse, "chat-cut", "newest first")
    settings = follow_settings(langfuse, tmp_path / "state.json")
    settings = settings.model_copy(
        update={
            "stored_traces": settings.stored_traces.model_copy(update={"page_spans": 3}),
            "evaluation": settings.evaluation.model_copy(update={"batch_size": 1}),
        }
    )
    memory = InMemorySink()
    collector = Collector(settings, extra_sinks=[memory], metrics_server=False)
    source = collector.source
    assert isinstance(source, StoredTraceSource)
    source.reader = FailsOnce(source.reader.client)
    collector.start()
    try:
        wait_until(lambda: len(memory.items) == 3, 30, "a turn read before the failure was lost")
        wait_until(
            lambda: set(taken) <= set(json.loads((tmp_path / "state.json").read_text())["settled"]),
            30,
            "not every turn was settled",
        )
    finally:
        collector.stop()
    assert FailsOnce.failed
    assert (
        sample(collector, "ragpulse_source_polls_total", backend="langfuse", outcome="failed") >= 1
    )
