"""Smoke tests of the Kafka test environment (tests/support/kafka_env.py) against real processes.

Startup times are printed with a ``[kafka_env]`` prefix: run with ``-s`` to see them.
Nothing here asserts on a clock: waits poll for a condition with a generous deadline.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata
from support.kafka_env import (
    FAST_GROUP_CONFIG,
    Broker,
    MotoS3,
    ProcessStartError,
    kafka_broker,
    moto_s3,
    rotel_agent,
    rotel_binary,
    s3_kafka_broker,
    tansu_binary,
    wait_until,
)

__all__ = ["kafka_broker", "moto_s3", "rotel_agent", "s3_kafka_broker"]  # fixtures in use

pytestmark = pytest.mark.integration


def report(name: str, value: float | None, unit: str = "s") -> None:
    print(f"[kafka_env] {name}: {value if value is None else round(value, 3)}{unit}")


def producer(broker: Broker, **config: Any) -> KafkaProducer:
    return KafkaProducer(bootstrap_servers=broker.bootstrap, **config)


def consumer(broker: Broker, **config: Any) -> KafkaConsumer:
    config.setdefault("enable_auto_commit", False)
    config.setdefault("auto_offset_reset", "earliest")
    return KafkaConsumer(bootstrap_servers=broker.bootstrap, **config)


def drain(c: KafkaConsumer, count: int, timeout: float = 60) -> list[Any]:
    """Poll until ``count`` records arrived (or fail after ``timeout`` seconds)."""
    records: list[Any] = []

    def arrived() -> bool:
        for batch in c.poll(timeout_ms=100).values():
            records.extend(batch)
        return len(records) >= count

    wait_until(arrived, timeout, f"fewer than {count} records arrived")
    return records


def test_binaries_are_found() -> None:
    assert tansu_binary().is_file()
    assert rotel_binary().is_file()


def test_produce_consume_and_manual_commit(kafka_broker: Broker) -> None:
    report("memory broker startup", kafka_broker.startup_s)
    kafka_broker.create_topic("events", partitions=1)
    tp = TopicPartition("events", 0)
    p = producer(kafka_broker)
    c = consumer(kafka_broker, group_id="ingest")
    try:
        for i in range(5):
            p.send("events", key=b"k", value=f"v{i}".encode()).get(timeout=60)
        c.assign([tp])
        assert [r.value for r in drain(c, 5)] == [f"v{i}".encode() for i in range(5)]

        c.commit({tp: OffsetAndMetadata(5, "batch=1", -1)})
        assert c.committed(tp) == 5
        # tansu 0.6.0 accepts commit metadata but never returns it from OffsetFetch.
        assert c.committed(tp, metadata=True).metadata is None
    finally:
        c.close()

    p.send("events", value=b"v5").get(timeout=60)
    p.close()
    again = consumer(kafka_broker, group_id="ingest")
    try:
        again.assign([tp])
        assert [(r.offset, r.value) for r in drain(again, 1)] == [(5, b"v5")]
    finally:
        again.close()


def test_topic_auto_creation_and_explicit_partitions(kafka_broker: Broker) -> None:
    p = producer(kafka_broker)
    try:
        p.send("never_created", b"x").get(timeout=60)
    finally:
        p.close()
    assert "never_created" in kafka_broker.topics()
    assert len(kafka_broker.partitions_for("never_created")) == 4  # tansu's default

    kafka_broker.create_topic("two", partitions=2)
    assert kafka_broker.partitions_for("two") == {0, 1}
    kafka_broker.create_topic("two", partitions=2, exist_ok=True)


def test_keyed_messages_land_on_consistent_partitions(kafka_broker: Broker) -> None:
    kafka_broker.create_topic("keyed", partitions=4)
    keys = [f"trace-{i}".encode() for i in range(16)]
    p = producer(kafka_broker)
    try:
        sent = [p.send("keyed", key=k, value=b"%d" % n) for n in range(3) for k in keys]
        p.flush()
        by_key: dict[bytes, set[int]] = {}
        for future, key in zip(sent, keys * 3, strict=True):
            by_key.setdefault(key, set()).add(future.get(timeout=60).partition)
    finally:
        p.close()
    assert all(len(parts) == 1 for parts in by_key.values()), by_key
    assert len(set().union(*by_key.values())) > 1  # the keys spread over partitions

    c = consumer(kafka_broker)
    try:
        c.assign([TopicPartition("keyed", i) for i in range(4)])
        records = drain(c, len(keys) * 3)
    finally:
        c.close()
    for r in records:
        assert {r.partition} == by_key[r.key]


def test_end_offsets_are_last_batch_base_plus_one(kafka_broker: Broker) -> None:
    kafka_broker.create_topic("lag", partitions=1)
    tp = TopicPartition("lag", 0)
    p = producer(kafka_broker, linger_ms=1000)
    c = consumer(kafka_broker)
    try:
        for i in range(3):  # one record per batch: end offset is exact
            single = p.send("lag", partition=0, value=b"%d" % i)
            p.flush()
            single.get(timeout=60)
        assert c.end_offsets([tp])[tp] == 3
        futures = [p.send("lag", partition=0, value=b"b%d" % i) for i in range(10)]
        p.flush()  # one batch of 10 records at offsets 3..12
        assert [f.get(timeout=60).offset for f in futures] == list(range(3, 13))
        # A real broker says 13; tansu says base offset of the last batch + 1.
        assert c.end_offsets([tp])[tp] == 4
        c.assign([tp])
        assert len(drain(c, 13)) == 13  # fetching is not affected
    finally:
        p.close()
        c.close()


def test_two_consumers_split_partitions(kafka_broker: Broker) -> None:
    kafka_broker.create_topic("split", partitions=4)
    assignments: dict[str, frozenset[int]] = {}
    stop = threading.Event()
    errors: list[BaseException] = []

    def member(name: str) -> None:
        try:
            c = consumer(kafka_broker, group_id="split-group", **FAST_GROUP_CONFIG)
            c.subscribe(["split"])
            try:
                while not stop.is_set():
                    c.poll(timeout_ms=100)
                    assignments[name] = frozenset(tp.partition for tp in c.assignment())
            finally:
                c.close()
            assignments.pop(name, None)
        except BaseException as exc:  # surfaced by the main thread
            errors.append(exc)

    def split() -> bool:
        a, b = assignments.get("a", frozenset()), assignments.get("b", frozenset())
        return bool(a and b and not a & b and a | b == {0, 1, 2, 3})

    threads = [threading.Thread(target=member, args=(n,), daemon=True) for n in "ab"]
    try:
        threads[0].start()
        wait_until(
            lambda: assignments.get("a") == frozenset(range(4)), 60, "first member never joined"
        )
        threads[1].start()
        try:
            wait_until(split, 60, "members never split the 4 partitions")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; assignments: {assignments}") from None
        assert not errors, errors
    finally:
        stop.set()
        for t in threads:
            if t.is_alive():
                t.join(60)
    assert not errors, errors


def test_pause_and_resume_partitions(kafka_broker: Broker) -> None:
    kafka_broker.create_topic("pausable", partitions=2)
    tp0, tp1 = TopicPartition("pausable", 0), TopicPartition("pausable", 1)
    p = producer(kafka_broker)
    c = consumer(kafka_broker)
    try:
        for tp in (tp0, tp1):
            for i in range(3):
                p.send("pausable", partition=tp.partition, value=b"%d" % i).get(timeout=60)
        c.assign([tp0, tp1])
        c.pause(tp0)
        assert c.paused() == {tp0}
        first = drain(c, 3)
        assert {r.partition for r in first} == {1}
        # tp0 stays silent while paused: a marker sent to tp1 after it arrives alone.
        p.send("pausable", partition=1, value=b"marker").get(timeout=60)
        assert [(r.partition, r.value) for r in drain(c, 1)] == [(1, b"marker")]
        c.resume(tp0)
        assert {r.partition for r in drain(c, 3)} == {0}
    finally:
        p.close()
        c.close()


@pytest.mark.parametrize("kill", [False, True], ids=["sigint", "sigkill"])
def test_s3_broker_restart_keeps_topics_records_and_offsets(
    s3_kafka_broker: Broker, moto_s3: MotoS3, kill: bool
) -> None:
    broker = s3_kafka_broker
    report("moto_server startup", moto_s3.startup_s)
    report("s3 broker startup", broker.startup_s)
    broker.create_topic("durable", partitions=2)
    tp = TopicPartition("durable", 0)
    p = producer(broker)
    c = consumer(broker, group_id="durable-group")
    try:
        for i in range(5):
            p.send("durable", partition=0, value=b"r%d" % i).get(timeout=60)
        c.assign([tp])
        assert len(drain(c, 5)) == 5
        c.commit({tp: OffsetAndMetadata(3, "cursor", -1)})
        report("end offset under S3 (5 records written)", c.end_offsets([tp])[tp], "")

        broker.restart(kill=kill)
        report(f"s3 broker ready after a restart, kill={kill}", broker.startup_s)

        assert "durable" in broker.topics()
        assert broker.partitions_for("durable") == {0, 1}
        # The producer and consumer opened before the restart reconnect by themselves.
        assert p.send("durable", partition=0, value=b"r5").get(timeout=60).offset == 5
        assert [r.value for r in drain(c, 1)] == [b"r5"]
        assert c.committed(tp) == 3
    finally:
        p.close()
        c.close()

    resumed = consumer(broker, group_id="durable-group")
    try:
        resumed.assign([tp])
        assert [r.value for r in drain(resumed, 3)] == [b"r3", b"r4", b"r5"]
    finally:
        resumed.close()

    bucket = broker.storage.removeprefix("s3://").rstrip("/")
    offsets_key = (
        "clusters/tansu_cluster/groups/consumers/durable-group"
        "/offsets/durable/partitions/0000000000.json"
    )
    stored = json.loads(moto_s3.get_object(bucket, offsets_key))
    # The metadata string is persisted, only OffsetFetch drops it.
    assert stored["offset"] == 3 and stored["metadata"] == "cursor"


def test_memory_broker_forgets_everything_on_restart(kafka_broker: Broker) -> None:
    kafka_broker.create_topic("volatile", partitions=1)
    port = kafka_broker.port
    kafka_broker.restart()
    assert kafka_broker.port == port
    assert "volatile" not in kafka_broker.topics()


def test_rotel_exports_otlp_batches_to_kafka(
    kafka_broker: Broker, rotel_agent: Callable[..., str]
) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
        ExportTraceServiceRequest,
    )
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    base_url = rotel_agent(kafka_broker, traces_topic="otlp_spans")

    provider = TracerProvider(resource=Resource.create({"service.name": "smoke"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{base_url}/v1/traces")))
    tracer = provider.get_tracer("smoke")
    with tracer.start_as_current_span("rag.request"), tracer.start_as_current_span("retrieve"):
        pass
    provider.shutdown()

    c = consumer(kafka_broker)
    try:
        wait_until(lambda: kafka_broker.partitions_for("otlp_spans"), 60, "no otlp_spans topic")
        c.assign(
            [TopicPartition("otlp_spans", i) for i in kafka_broker.partitions_for("otlp_spans")]
        )
        spans: list[str] = []

        def both_spans() -> bool:
            for batch in c.poll(timeout_ms=200).values():
                for record in batch:
                    assert record.key == b""  # rotel writes unkeyed, empty-key records
                    request = ExportTraceServiceRequest.FromString(record.value)
                    for rs in request.resource_spans:
                        attrs = {a.key: a.value.string_value for a in rs.resource.attributes}
                        assert attrs["service.name"] == "smoke"
                        spans.extend(s.name for ss in rs.scope_spans for s in ss.spans)
            return len(spans) >= 2

        wait_until(both_spans, 60, f"rotel did not deliver both spans to Kafka (got {spans})")
    finally:
        c.close()
    assert sorted(spans) == ["rag.request", "retrieve"]


def test_start_failure_reports_the_process_output(tmp_path: Any) -> None:
    broker = Broker(storage="bogus://nowhere/", log_dir=tmp_path, start_timeout=60)
    with pytest.raises(ProcessStartError) as info:
        broker.start()
    assert "exited with code" in str(info.value)
    assert "UnsupportedStorageUrl" in str(info.value)
    assert not broker.running


def test_start_timeout_reports_the_process_output(moto_s3: MotoS3, tmp_path: Any) -> None:
    env = moto_s3.tansu_env()
    del env["AWS_ALLOW_HTTP"]  # tansu starts, but every storage request fails
    broker = Broker(
        storage=moto_s3.storage_url(moto_s3.create_bucket()),
        env=env,
        log_dir=tmp_path,
        start_timeout=2,
    )
    with pytest.raises(ProcessStartError) as info:
        broker.start()
    assert "not ready within 2.0s" in str(info.value)
    assert "BadScheme" in str(info.value)  # the broker's own error, from its log
    assert not broker.running
