"""Bounded nesting wherever ragpulse reads JSON (or YAML/TOML) it did not write."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import pytest
from kafka.structs import TopicPartition
from support.helpers import Message

from ragpulse import safe_json, safe_yaml
from ragpulse.cli import main
from ragpulse.collector.intake import otlp
from ragpulse.collector.intake.kafka import SpanConsumer
from ragpulse.collector.service import Collector
from ragpulse.config import load_settings, read_config_file
from ragpulse.errors import ConfigError, DecodeError
from ragpulse.offline.io import read_rows
from ragpulse.safe_json import MAX_DEPTH, NestingTooDeep

DEEP = 5_000


def nested(depth: int, open_: str = "[", close: str = "]", leaf: str = "1") -> str:
    return open_ * depth + leaf + close * depth


# -- the helper --------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [("[", "]"), ('{"a":', "}")], ids=["arrays", "objects"])
def test_depth_at_the_limit_loads_and_one_more_is_refused(shape: tuple[str, str]) -> None:
    ok = nested(MAX_DEPTH, *shape)
    assert safe_json.nesting_depth(ok) == MAX_DEPTH
    assert safe_json.loads(ok) == json.loads(ok)
    with pytest.raises(NestingTooDeep, match=f"JSON nested deeper than {MAX_DEPTH} levels"):
        safe_json.loads(nested(MAX_DEPTH + 1, *shape))


def test_far_too_deep_is_a_value_error_not_a_recursion_error() -> None:
    for text in (nested(DEEP), "[" * DEEP, nested(DEEP).encode(), '{"a":' * DEEP):
        with pytest.raises(ValueError, match="nested deeper"):
            safe_json.loads(text)


def test_brackets_inside_strings_do_not_count() -> None:
    deep_string = json.dumps({"s": "[" * DEEP + "{" * DEEP, "t": ['"]]]', "\\[[["]})
    assert safe_json.nesting_depth(deep_string) == 2
    assert safe_json.loads(deep_string)["s"].startswith("[[[")
    # An escaped quote does not end the string; an escaped backslash does not escape it.
    assert safe_json.nesting_depth(r'["\"[[[[", "\\", [[]]]') == 3


def test_a_custom_limit_and_other_encodings() -> None:
    assert safe_json.loads("[[1]]", max_depth=2) == [[1]]
    with pytest.raises(NestingTooDeep, match="deeper than 1 levels"):
        safe_json.loads("[[1]]", max_depth=1)
    utf16 = nested(MAX_DEPTH + 1).encode("utf-16")
    with pytest.raises(NestingTooDeep):
        safe_json.loads(utf16)
    assert safe_json.loads(nested(3).encode("utf-16")) == [[[1]]]


def test_invalid_json_is_still_a_value_error() -> None:
    for text in ("{broken", "", '"unterminated [[[', b"\xff\xfe\xfd"):
        with pytest.raises(ValueError):
            safe_json.loads(text)


def test_yaml_bound_counts_collections_in_flow_and_block_style() -> None:
    assert safe_yaml.load_yaml(nested(MAX_DEPTH)) == json.loads(nested(MAX_DEPTH))
    with pytest.raises(NestingTooDeep, match="YAML nested deeper"):
        safe_yaml.load_yaml(nested(MAX_DEPTH + 1))
    block = "".join("  " * i + "k:\n" for i in range(MAX_DEPTH + 1)) + "  " * (MAX_DEPTH + 1) + "v"
    with pytest.raises(NestingTooDeep):
        safe_yaml.load_yaml(block)
    with pytest.raises(NestingTooDeep):
        safe_yaml.load_yaml("[" * DEEP)


# -- OTLP/JSON (receiver and Kafka otlp_json share parse_request) ------------------------


def test_deep_otlp_json_is_a_decode_error() -> None:
    with pytest.raises(otlp.NestingTooDeep, match="nested deeper than 64"):
        otlp.parse_request(nested(DEEP).encode(), otlp.JSON)
    assert isinstance(otlp.NestingTooDeep("x"), DecodeError)


def _deep_any_value(depth: int) -> bytes:
    """A request whose span has an attribute nested ``depth`` AnyValue arrays deep."""

    def field(number: int, payload: bytes) -> bytes:
        n, varint = len(payload), bytearray()
        while True:
            byte, n = n & 0x7F, n >> 7
            varint.append(byte | (0x80 if n else 0))
            if not n:
                break
        return bytes([number << 3 | 2]) + bytes(varint) + payload

    value = field(1, b"leaf")  # AnyValue.string_value
    for _ in range(depth):
        value = field(5, field(1, value))  # AnyValue.array_value -> ArrayValue.values
    span = field(1, bytes(range(1, 17))) + field(2, bytes(range(1, 9)))  # trace_id, span_id
    span += field(9, field(1, b"deep") + field(2, value))  # attributes
    return field(1, field(2, field(2, span)))  # resource_spans -> scope_spans -> spans


def test_deep_protobuf_attribute_values_are_decode_errors(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Past the protobuf runtime's own limit (100 nested messages): refused by the parser.
    for depth in (60, DEEP):
        with pytest.raises(otlp.NestingTooDeep, match="MaxDepth"):
            otlp.parse_request(_deep_any_value(depth), otlp.PROTOBUF)
    # Within it: decoded, values and all.
    ok = otlp.decode_request(otlp.parse_request(_deep_any_value(40), otlp.PROTOBUF))
    assert len(ok.spans) == 1
    # Our own bound on values (for a runtime without that limit) is a decode error too.
    monkeypatch.setattr(otlp, "MAX_VALUE_DEPTH", 10)
    with pytest.raises(otlp.NestingTooDeep, match="attribute value nested deeper than 10"):
        otlp.decode_request(otlp.parse_request(_deep_any_value(40), otlp.PROTOBUF))


class NoMetadataConsumer:
    def committed(self, tp: TopicPartition, metadata: bool = False) -> Any:
        return None


def test_kafka_otlp_json_message_nested_too_deep_is_poison_not_a_crash() -> None:
    settings = load_settings(
        source="kafka", kafka={"encoding": "otlp_json", "dead_letter_topic": None}
    )
    collector = Collector(settings, evaluators=[], sinks=[], receiver=False, metrics_server=False)
    source = SpanConsumer(settings.kafka, collector, collector.metrics)
    tp = TopicPartition("otlp_spans", 0)
    source.on_partitions_assigned({tp})
    message = Message(tp.topic, 0, 0, b"k", nested(DEEP).encode())
    source._handle(NoMetadataConsumer(), tp, message)
    registry = collector.metrics.registry
    assert registry.get_sample_value("ragpulse_kafka_messages_total", {"outcome": "poison"}) == 1
    dead = {"result": "skipped"}
    assert registry.get_sample_value("ragpulse_kafka_dead_letters_total", dead) == 1


# -- ragpulse eval input -----------------------------------------------------------------


def test_eval_input_line_nested_too_deep_is_a_bad_row() -> None:
    ok = json.dumps({"question": "q", "answer": "a", "contexts": ["c"]})
    lines = [ok, nested(DEEP), ok]
    parsed = list(read_rows(io.StringIO("\n".join(lines))))
    assert [p.row is not None for p in parsed] == [True, False, True]
    assert parsed[1].line == 2 and parsed[1].error is not None
    assert "invalid JSON: JSON nested deeper than 64 levels" in parsed[1].error


def test_ragpulse_eval_keeps_going_past_a_deep_line(tmp_path: Path) -> None:
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    row = json.dumps({"question": "q", "answer": "a", "contexts": ["a"]})
    src.write_text("\n".join([row, nested(DEEP), row]) + "\n")
    assert main(["eval", str(src), "-o", str(out), "--metrics", "faithfulness/lexical"]) == 0
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 3
    assert lines[1]["line"] == 2 and "nested deeper than 64" in lines[1]["error"]
    assert lines[0]["results"] and lines[2]["results"]


# -- the settings file -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("deep.yaml", "evaluation: " + "[" * DEEP),
        ("deep-balanced.yaml", "x: " + nested(DEEP)),
        ("deep-block.yaml", "".join("  " * i + "k:\n" for i in range(200))),
        ("deep.toml", "x = " + nested(DEEP)),
        ("deep-table.toml", "x = " + nested(DEEP, "{a = ", "}")),
    ],
)
def test_settings_file_nested_too_deep_is_a_config_error(
    tmp_path: Path, name: str, text: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"does not parse: .* nested deeper than {MAX_DEPTH}"):
        read_config_file(path)


def test_settings_file_with_brackets_in_strings_still_loads(tmp_path: Path) -> None:
    toml = tmp_path / "ok.toml"
    toml.write_text(f'host = "{"[" * 100}"\n[assembly]\ngrace_s = 2.0\n')
    assert read_config_file(toml) == {"host": "[" * 100, "assembly": {"grace_s": 2.0}}
    yml = tmp_path / "ok.yaml"
    yml.write_text(f"host: '{'[' * 100}'\nassembly:\n  grace_s: 2.0\n")
    assert read_config_file(yml)["host"] == "[" * 100
