"""Kafka intake against a real Kafka-protocol broker (tansu), end to end."""

from __future__ import annotations

import base64
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import json_format
from kafka import KafkaConsumer, KafkaProducer
from kafka.structs import TopicPartition
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from prometheus_client import CollectorRegistry
from support.helpers import rag_request
from support.kafka_env import FAST_GROUP_CONFIG, Broker, wait_until

import ragpulse
from ragpulse import semconv as sc
from ragpulse.collector.intake.rekey import Rekeyer
from ragpulse.collector.service import Collector
from ragpulse.config import Settings, load_settings
from ragpulse.evaluators.base import Evaluator
from ragpulse.evaluators.faithfulness.lexical import LexicalFaithfulness
from ragpulse.exporters.base import Sink
from ragpulse.exporters.memory import InMemorySink
from ragpulse.record import EvalResult, ExportItem, ExportKind, RagRecord
from ragpulse.sdk.kafka_exporter import KafkaSpanExporter

pytestmark = pytest.mark.integration

DOCS = ["The Pro plan costs 6 dollars per month.", "Offline mode keeps 500 notes."]


def settings(bootstrap: str, **kafka: Any) -> Settings:
    return load_settings(
        source="kafka",
        metrics_port=0,
        assembly={"grace_s": 0.2, "tick_s": 0.05},
        kafka={
            "bootstrap": bootstrap,
            "commit_interval_s": 0.2,
            "session_timeout_ms": FAST_GROUP_CONFIG["session_timeout_ms"],
            "heartbeat_interval_ms": FAST_GROUP_CONFIG["heartbeat_interval_ms"],
            "consumer_options": {"max_poll_interval_ms": 10_000},
            **kafka,
        },
    )


def produce_traces(
    bootstrap: str,
    topic: str,
    n: int,
    encoding: str = "proto",
    offset: int = 0,
    partition: int | None = None,
) -> list[str]:
    """n RAG traces, one message each, keyed by trace id (on ``partition`` if given,
    else where the key hashes to); returns the trace ids."""
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    ids = []
    for i in range(offset, offset + n):
        trace_id = secrets.token_bytes(16)
        req = rag_request([(trace_id, f"How much is plan {i}?", DOCS, "It costs 6 dollars.")])
        if encoding == "json":
            payload = json_format.MessageToDict(req)
            for rs in payload["resourceSpans"]:  # OTLP/JSON uses hex ids
                for ss in rs["scopeSpans"]:
                    for span in ss["spans"]:
                        for key in ("traceId", "spanId", "parentSpanId"):
                            if key in span:
                                span[key] = base64.b64decode(span[key]).hex()
            value = json.dumps(payload).encode()
        else:
            value = req.SerializeToString()
        producer.send(topic, key=trace_id.hex().encode(), value=value, partition=partition)
        ids.append(trace_id.hex())
    producer.flush(30)
    producer.close()
    return ids


def await_sentinels(
    bootstrap: str, topic: str, partitions: int, seen: Callable[[], list[str]]
) -> set[str]:
    """Produce one more trace on each partition, after what was produced before, and
    wait until all of them were evaluated (``seen()`` gives the evaluated trace ids).

    A positive marker instead of "sleep, then check nothing more came": a partition
    is read in order, so a message read again (a redelivery) behind the traces
    already counted would have been evaluated by the time its partition's sentinel
    is. Returns the sentinels' trace ids, for the caller to leave out."""
    sentinels = [
        produce_traces(bootstrap, topic, 1, offset=10_000 + p, partition=p)[0]
        for p in range(partitions)
    ]
    wait_until(lambda: set(sentinels) <= set(seen()), 60, "the sentinel traces were not evaluated")
    return set(sentinels)


def read_topic(bootstrap: str, topic: str, done: Callable[[list[Any]], bool]) -> list[Any]:
    """Every message of ``topic`` from the start, polled until ``done(messages)``."""
    consumer = KafkaConsumer(topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    messages: list[Any] = []

    def complete() -> bool:
        for batch in consumer.poll(timeout_ms=200).values():
            messages.extend(batch)
        return done(messages)

    try:
        wait_until(complete, 60, f"the expected messages did not arrive on {topic!r}")
    finally:
        consumer.close()
    return messages


@pytest.fixture
def collectors() -> Iterator[list[Collector]]:
    """Collectors started by a test; stopped (drained) at the end."""
    started: list[Collector] = []
    yield started
    for c in started:
        c.stop()


def start(collectors: list[Collector], s: Settings, sink: InMemorySink, **kw: Any) -> Collector:
    c = Collector(s, sinks=[sink], metrics_server=False, **kw).start()
    collectors.append(c)
    return c


def sample(c: Collector, name: str, **labels: str) -> float:
    return c.metrics.registry.get_sample_value(name, labels) or 0.0


@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_scores_from_collector_format_messages(
    kafka_broker: Broker, collectors: list[Collector], encoding: str
) -> None:
    kafka_broker.create_topic("otlp_spans", partitions=2)
    ids = produce_traces(kafka_broker.bootstrap, "otlp_spans", 20, encoding.removeprefix("otlp_"))
    sink = InMemorySink()
    c = start(
        collectors, settings(kafka_broker.bootstrap, encoding=encoding, lag_interval_s=0.2), sink
    )
    wait_until(lambda: len(sink.items) >= 20, 60, "20 records evaluated")
    assert {i.record.trace_id for i in sink.items} == set(ids)
    faithfulness = [r for i in sink.items for r in i.results if r.name == "faithfulness/lexical"]
    assert len(faithfulness) == 20 and all(r.score is not None for r in faithfulness)
    # Offsets are committed once evaluated.
    wait_until(lambda: sample(c, "ragpulse_kafka_commits_total", outcome="ok") > 0, 60, "commit")
    assert sample(c, "ragpulse_kafka_messages_total", outcome="ok") == 20
    # Lag is reported per owned partition (its value is approximate on tansu).
    wait_until(
        lambda: all(
            c.metrics.registry.get_sample_value(
                "ragpulse_kafka_consumer_lag", {"topic": "otlp_spans", "partition": p}
            )
            is not None
            for p in ("0", "1")
        ),
        60,
        "lag gauges for both partitions",
    )


def test_poison_messages_go_to_dead_letter_topic(
    kafka_broker: Broker, collectors: list[Collector]
) -> None:
    kafka_broker.create_topic("otlp_spans", partitions=1)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    producer.send("otlp_spans", key=b"x", value=b"\xff\x00 not protobuf")
    producer.send("otlp_spans", key=b"y", value=b"\x0a" * 5000)  # oversized for the limit below
    producer.flush()
    producer.close()
    good = produce_traces(kafka_broker.bootstrap, "otlp_spans", 5)
    sink = InMemorySink()
    c = start(
        collectors,
        settings(kafka_broker.bootstrap, dead_letter_topic="dlq", max_message_bytes=4096),
        sink,
    )
    wait_until(lambda: len(sink.items) >= 5, 60, "the good messages evaluated")
    assert {i.record.trace_id for i in sink.items} == set(good)
    assert sample(c, "ragpulse_kafka_messages_total", outcome="poison") == 1
    assert sample(c, "ragpulse_kafka_messages_total", outcome="oversized") == 1
    assert sample(c, "ragpulse_kafka_dead_letters_total", result="dead_lettered") == 2

    # The auto-created topic has 4 partitions: order by key.
    dead = read_topic(kafka_broker.bootstrap, "dlq", lambda got: len(got) >= 2)
    dead.sort(key=lambda m: m.key)
    assert [m.key for m in dead] == [b"x", b"y"]
    errors = [dict(m.headers)["ragpulse.error"].decode() for m in dead]
    assert "invalid protobuf" in errors[0] and "exceeds the limit" in errors[1]


class SlowFaithfulness(LexicalFaithfulness):
    """Evaluation slower than intake, to make the consumer pause."""

    def score(self, record: RagRecord) -> EvalResult:
        time.sleep(0.01)
        return super().score(record)


def test_backpressure_pauses_instead_of_dropping(
    kafka_broker: Broker, collectors: list[Collector]
) -> None:
    kafka_broker.create_topic("otlp_spans", partitions=1)
    ids = produce_traces(kafka_broker.bootstrap, "otlp_spans", 300)
    s = settings(kafka_broker.bootstrap, max_poll_records=20)
    s = s.model_copy(
        update={
            "assembly": s.assembly.model_copy(update={"max_open_traces": 40}),
            "evaluation": s.evaluation.model_copy(update={"max_backlog": 20, "batch_size": 8}),
        }
    )
    sink = InMemorySink()
    evaluators: list[Evaluator] = [SlowFaithfulness()]
    c = start(collectors, s, sink, evaluators=evaluators)
    peak_open = peak_backlog = paused = 0.0
    deadline = time.monotonic() + 60
    while len(sink.items) < 300 and time.monotonic() < deadline:
        peak_open = max(peak_open, len(c.assembler))
        peak_backlog = max(peak_backlog, c.pipeline.backlog)
        paused = max(paused, sample(c, "ragpulse_kafka_paused"))
        time.sleep(0.01)
    assert len(sink.items) >= 300, f"only {len(sink.items)} of 300 traces evaluated in 60s"
    assert {i.record.trace_id for i in sink.items} == set(ids)
    assert paused == 1, f"the consumer never paused (peak open {peak_open}, backlog {peak_backlog})"
    assert peak_open <= 40
    # The backlog bound is soft by at most one poll's worth of traces.
    assert peak_backlog <= 20 + 20


class HeldRevisions(Sink):
    """Keeps what it is given; a revision waits in ``export`` until ``release`` (the sink of
    a slow tool), so the test can look at the commits while it is not exported."""

    name = "held_revisions"

    def __init__(self) -> None:
        super().__init__()
        self.items: list[ExportItem[RagRecord]] = []
        self.arrived, self.release = threading.Event(), threading.Event()

    def export(self, item: ExportItem[RagRecord]) -> None:
        if item.kind is ExportKind.REVISION:
            self.arrived.set()
            self.release.wait(120)
        self.items.append(item)


def _committed(bootstrap: str, group: str, topic: str) -> int | None:
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False)
    try:
        committed: int | None = consumer.committed(TopicPartition(topic, 0))
        return committed
    finally:
        consumer.close()


def test_a_late_spans_offset_is_committed_only_once_its_revision_is_exported(
    kafka_broker: Broker, collectors: list[Collector]
) -> None:
    """The trace's first message is committed once its record is exported; a span of the
    trace in a later message reopens the trace, and its offset is committed only after
    the revised record was exported (a crash before re-reads it: the revision is not lost
    to a commit made too early)."""
    bootstrap = kafka_broker.bootstrap
    kafka_broker.create_topic("otlp_spans", partitions=1)
    trace_id = secrets.token_bytes(16)
    first = rag_request([(trace_id, "How much is the Pro plan?", DOCS, "It costs 6 dollars.")])
    root = first.resource_spans[0].scope_spans[0].spans[0].span_id
    late = trace_service_pb2.ExportTraceServiceRequest()
    span = late.resource_spans.add().scope_spans.add().spans.add()
    span.trace_id, span.span_id, span.parent_span_id = trace_id, secrets.token_bytes(8), root
    span.name, span.start_time_unix_nano, span.end_time_unix_nano = "generate again", 3, 4
    for key, value in (("openinference.span.kind", "LLM"), ("output.value", "6 dollars a month.")):
        span.attributes.add(key=key).value.string_value = value
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    key = trace_id.hex().encode()
    producer.send("otlp_spans", key=key, value=first.SerializeToString()).get(30)
    sink = HeldRevisions()
    c = Collector(settings(bootstrap), sinks=[sink], metrics_server=False).start()
    collectors.append(c)
    wait_until(lambda: _committed(bootstrap, "ragpulse", "otlp_spans") == 1, 60, "first commit")
    [exported] = sink.items
    producer.send("otlp_spans", key=key, value=late.SerializeToString()).get(30)
    producer.close()
    assert sink.arrived.wait(60), "the late span did not revise the record"
    commits = sample(c, "ragpulse_kafka_commits_total", outcome="ok")
    wait_until(
        lambda: sample(c, "ragpulse_kafka_commits_total", outcome="ok") >= commits + 2,
        60,
        "the consumer did not commit again while the revision was held",
    )
    assert _committed(bootstrap, "ragpulse", "otlp_spans") == 1  # the late span's is not
    sink.release.set()
    wait_until(lambda: _committed(bootstrap, "ragpulse", "otlp_spans") == 2, 60, "late commit")
    revised = sink.items[-1]
    assert (revised.kind, revised.record.revision) == (ExportKind.REVISION, 2)
    assert revised.record.record_id == exported.record.record_id
    assert revised.record.generation_span_id == span.span_id.hex()  # the later model call
    assert sample(c, "ragpulse_dropped_total", reason="late_span") == 0


def test_two_collectors_split_partitions_and_evaluate_each_trace_once(
    kafka_broker: Broker, collectors: list[Collector]
) -> None:
    kafka_broker.create_topic("otlp_spans", partitions=4)
    sinks = [InMemorySink(), InMemorySink()]
    pair = [start(collectors, settings(kafka_broker.bootstrap), sink) for sink in sinks]
    wait_until(
        lambda: [sample(c, "ragpulse_kafka_assigned_partitions") for c in pair] == [2, 2],
        60,
        "partitions split 2/2",
    )
    ids = produce_traces(kafka_broker.bootstrap, "otlp_spans", 80)
    wait_until(lambda: sum(len(s.items) for s in sinks) >= 80, 60, "80 records evaluated")

    def seen() -> list[str]:
        return [i.record.trace_id for s in sinks for i in list(s.items)]

    # Nothing more arrives: a trace evaluated twice would show before the sentinels.
    sentinels = await_sentinels(kafka_broker.bootstrap, "otlp_spans", 4, seen)
    assert sorted(t for t in seen() if t not in sentinels) == sorted(ids)
    assert all(len(s.items) > 0 for s in sinks)


def test_a_partition_kept_through_a_rebalance_is_read_again_for_its_open_traces(
    kafka_broker: Broker, collectors: list[Collector]
) -> None:
    """An eager rebalance revokes every partition; a member given one back keeps the
    client's read position, while its open traces were abandoned: it reads from its commit
    again, so the spans of a trace still open then are not lost."""
    kafka_broker.create_topic("otlp_spans", partitions=2)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all")
    roots = []
    for partition in (0, 1):  # one trace per partition: the first member keeps one of them
        trace_id = secrets.token_bytes(16)
        request = rag_request([(trace_id, "How much is the Pro plan?", DOCS, "6 dollars.")])
        spans = request.resource_spans[0].scope_spans[0].spans
        root = trace_service_pb2.ExportTraceServiceRequest()
        root.CopyFrom(request)
        del spans[0]  # the children first: the trace stays open until its root comes
        del root.resource_spans[0].scope_spans[0].spans[1:]
        producer.send("otlp_spans", key=trace_id.hex().encode(),
                      value=request.SerializeToString(), partition=partition)  # fmt: skip
        roots.append((trace_id, root, partition))
    producer.flush(30)
    sinks = [InMemorySink(), InMemorySink()]
    first = start(collectors, settings(kafka_broker.bootstrap), sinks[0])
    wait_until(lambda: len(first.assembler) == 2, 60, "both traces open")
    second = start(collectors, settings(kafka_broker.bootstrap), sinks[1])
    wait_until(
        lambda: [sample(c, "ragpulse_kafka_assigned_partitions") for c in (first, second)]
        == [1, 1], 60, "partitions split one and one",
    )  # fmt: skip
    assert sample(first, "ragpulse_kafka_abandoned_traces_total") == 2
    for trace_id, root, partition in roots:
        producer.send("otlp_spans", key=trace_id.hex().encode(),
                      value=root.SerializeToString(), partition=partition)  # fmt: skip
    producer.flush(30)
    producer.close()
    wait_until(lambda: sum(len(s.items) for s in sinks) == 2, 60, "both traces evaluated")
    for item in (i for s in sinks for i in s.items):  # whole: the documents came first
        assert [d.content for d in item.record.documents] == DOCS


def test_broker_restart_consumer_recovers(
    s3_kafka_broker: Broker, collectors: list[Collector]
) -> None:
    s3_kafka_broker.create_topic("otlp_spans", partitions=2)
    first = produce_traces(s3_kafka_broker.bootstrap, "otlp_spans", 20)
    sink = InMemorySink()
    c = start(collectors, settings(s3_kafka_broker.bootstrap), sink)
    wait_until(lambda: len(sink.items) >= 20, 60, "first half evaluated")
    commits = sample(c, "ragpulse_kafka_commits_total", outcome="ok")
    wait_until(
        lambda: sample(c, "ragpulse_kafka_commits_total", outcome="ok") > commits, 60, "a commit"
    )
    s3_kafka_broker.restart()
    second = produce_traces(s3_kafka_broker.bootstrap, "otlp_spans", 20, offset=20)
    wait_until(lambda: len(sink.items) >= 40, 60, "second half evaluated after the restart")

    def seen() -> list[str]:
        return [i.record.trace_id for i in list(sink.items)]

    sentinels = await_sentinels(s3_kafka_broker.bootstrap, "otlp_spans", 2, seen)
    evaluated = [t for t in seen() if t not in sentinels]
    assert sorted(evaluated) == sorted(first + second)  # nothing evaluated twice


def _serve(bootstrap: str, results: Path, group: str = "ragpulse") -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "RAGPULSE_ASSEMBLY__GRACE_S": "0.2",
        "RAGPULSE_KAFKA__SESSION_TIMEOUT_MS": "2000",
        "RAGPULSE_KAFKA__HEARTBEAT_INTERVAL_MS": "500",
        "RAGPULSE_KAFKA__COMMIT_INTERVAL_S": "0.2",
        "RAGPULSE_KAFKA__MAX_POLL_RECORDS": "10",
        # Cheap tier only: a record waiting for the model tier holds its offset's
        # commit back, so model speed would set how much is re-read after a kill.
        "RAGPULSE_EVALUATION__MODEL__RATE": "0",
    }
    return subprocess.Popen(
        [sys.executable, "-m", "ragpulse.cli", "--log-level", "WARNING", "serve",
         "--source", "kafka", "--kafka-bootstrap", bootstrap, "--kafka-group", group,
         "--metrics-port", "0", "--results-jsonl", str(results)],
        env=env,
    )  # fmt: skip


def _trace_ids(path: Path) -> list[str]:
    if not path.exists():
        return []
    ids = []
    for line in path.read_text().splitlines():
        try:
            ids.append(json.loads(line)["trace_id"])
        except ValueError:
            pass  # a line cut short by SIGKILL
    return ids


def test_sigkill_mid_stream_then_restart_loses_no_trace(
    kafka_broker: Broker, tmp_path: Path
) -> None:
    kafka_broker.create_topic("otlp_spans", partitions=2)
    ids = produce_traces(kafka_broker.bootstrap, "otlp_spans", 400)
    results = tmp_path / "results.jsonl"
    proc = _serve(kafka_broker.bootstrap, results)
    try:
        wait_until(lambda: len(_trace_ids(results)) >= 60, 60, "some traces evaluated")
        proc.send_signal(signal.SIGKILL)
        proc.wait(60)
        before = len(set(_trace_ids(results)))
        assert before < 400, "the stream finished before the kill: make it longer"
        proc = _serve(kafka_broker.bootstrap, results)
        wait_until(lambda: set(_trace_ids(results)) >= set(ids), 90, "every trace evaluated")
    finally:
        proc.kill()
        proc.wait(60)
    evaluated = _trace_ids(results)
    duplicates = len(evaluated) - len(set(evaluated))
    # Only what the killed process evaluated past its last commit is evaluated again,
    # once: at most `before` duplicates (how many depends on where the 0.2 s commit
    # tick fell: at ~1,400 traces/s that can be hundreds), and no trace three times.
    assert duplicates <= before, (duplicates, before)
    assert max(Counter(evaluated).values()) <= 2


def test_app_side_kafka_exporter(kafka_broker: Broker, collectors: list[Collector]) -> None:
    kafka_broker.create_topic("app_spans", partitions=3)

    @ragpulse.retrieval
    def retrieve(q: str) -> list[str]:
        return DOCS

    @ragpulse.pipeline
    def ask(q: str) -> str:
        retrieve(q)
        return "It costs 6 dollars per month."

    provider = TracerProvider(resource=Resource.create({"service.name": "kafka-app"}))
    ragpulse.configure(
        exporter="kafka",
        kafka_bootstrap=kafka_broker.bootstrap,
        kafka_topic="app_spans",
        tracer_provider=provider,
    )
    try:
        for i in range(6):
            ask(f"How much is the Pro plan, take {i}?")
    finally:
        ragpulse.shutdown()
        provider.shutdown()
    sink = InMemorySink()
    start(collectors, settings(kafka_broker.bootstrap, topic="app_spans"), sink)
    wait_until(lambda: len(sink.items) >= 6, 60, "6 records from the app")
    assert {i.record.service for i in sink.items} == {"kafka-app"}
    evaluated = {i.record.trace_id for i in sink.items}
    messages = read_topic(
        kafka_broker.bootstrap, "app_spans", lambda got: {m.key.decode() for m in got} >= evaluated
    )
    for m in messages:  # keyed by the trace id they carry
        req = trace_service_pb2.ExportTraceServiceRequest.FromString(m.value)
        trace_ids = {s.trace_id.hex() for rs in req.resource_spans for ss in rs.scope_spans
                     for s in ss.spans}  # fmt: skip
        assert trace_ids == {m.key.decode()}


def test_a_trace_past_a_megabyte_travels_as_one_message(
    kafka_broker: Broker, collectors: list[Collector]
) -> None:
    """25 documents of 64k characters: past kafka-python's and the Collector's 1 MB
    default, within the 8 MiB that the app-side exporter, the deploy configs and
    the consumer allow."""
    kafka_broker.create_topic("big_spans", partitions=1)
    exporter = KafkaSpanExporter(kafka_broker.bootstrap, "big_spans", timeout_s=30)
    provider = TracerProvider(resource=Resource.create({"service.name": "big-docs"}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    documents = {
        sc.document_attr(i, sc.DOCUMENT_CONTENT): f"Document {i} says plans cost 6. " * 2000
        for i in range(25)
    }
    with tracer.start_as_current_span("rag") as root:
        root.set_attributes({sc.OPENINFERENCE_SPAN_KIND: sc.KIND_CHAIN,
                             sc.INPUT_VALUE: "How much is a plan?",
                             sc.OUTPUT_VALUE: "Plans cost 6."})  # fmt: skip
        with tracer.start_as_current_span("retrieve") as retriever:
            retriever.set_attributes({sc.OPENINFERENCE_SPAN_KIND: sc.KIND_RETRIEVER, **documents})
    provider.shutdown()
    sink = InMemorySink()
    start(collectors, settings(kafka_broker.bootstrap, topic="big_spans"), sink)
    wait_until(lambda: len(sink.items) >= 1, 60, "the big trace was not evaluated")
    [item] = sink.items
    assert item.record.service == "big-docs" and len(item.record.documents) == 25
    # One message per span as each ended: the retriever's is past the 1 MB defaults.
    messages = read_topic(kafka_broker.bootstrap, "big_spans", lambda got: len(got) >= 2)
    assert max(len(m.value) for m in messages) > 1_000_000


def test_rotel_to_kafka_to_rekey_to_evaluation(
    kafka_broker: Broker, rotel_agent: Any, collectors: list[Collector]
) -> None:
    for topic in ("otlp_spans_raw", "otlp_spans"):
        kafka_broker.create_topic(topic, partitions=2)
    otlp_url = rotel_agent(kafka_broker, traces_topic="otlp_spans_raw")
    s = settings(kafka_broker.bootstrap)
    registry = CollectorRegistry()
    rekeyer = Rekeyer(s.kafka, registry)
    thread = threading.Thread(target=rekeyer.run, daemon=True)
    thread.start()
    sink = InMemorySink()
    start(collectors, s, sink)

    @ragpulse.retrieval
    def retrieve(q: str) -> list[str]:
        return DOCS

    @ragpulse.generation(model="m")
    def generate(q: str) -> str:
        return "The Pro plan costs 6 dollars per month."

    @ragpulse.pipeline(route="/rotel")
    def ask(q: str) -> str:
        retrieve(q)
        return generate(q)

    provider = TracerProvider(resource=Resource.create({"service.name": "via-rotel"}))
    ragpulse.configure(endpoint=otlp_url, tracer_provider=provider)
    try:
        for i in range(5):
            ask(f"How much does the Pro plan cost, try {i}?")
    finally:
        ragpulse.shutdown()
        provider.shutdown()
    try:
        wait_until(lambda: len(sink.items) >= 5, 60, "5 records through rotel and re-key")
    finally:
        rekeyer.stop()
        thread.join(60)
    records = [i.record for i in sink.items]
    assert {r.service for r in records} == {"via-rotel"} and {r.route for r in records} == {
        "/rotel"
    }
    faithfulness = [r for i in sink.items for r in i.results if r.name == "faithfulness/lexical"]
    assert all(r.score == 1.0 for r in faithfulness)
    assert (registry.get_sample_value("ragpulse_rekey_traces_total") or 0) >= 5
