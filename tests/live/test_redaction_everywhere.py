"""Redaction wherever content leaves the process: the results JSONL, the OTLP
evaluation export, log lines, /metrics (route labels; exemplars carry ids only),
regression sets; and with ``redaction: {enabled: false}`` all of it is kept.

The end-to-end tests run a real ``ragpulse serve`` at DEBUG with every path on, send
it one RAG trace holding e-mail addresses, Luhn-valid card numbers and phone numbers
(distinct ones in the question, the document and the answer, so that the answer's
are "unsupported" and quoted word by word in the faithfulness details), and three
malformed OTLP/JSON requests whose decoder errors echo a value (logged at DEBUG).
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from support.helpers import (
    CaptureServer,
    http_get,
    metrics_once_evaluated,
    new_trace_id,
    rag_request,
    stop_process,
)
from support.kafka_env import free_port, wait_until

from ragpulse.config import RedactionSettings, load_settings
from ragpulse.exporters.jsonl import JsonlSink
from ragpulse.exporters.regression import RegressionSink
from ragpulse.log_redaction import RedactingFilter, install_log_redaction, remove_log_redaction
from ragpulse.record import Document, EvalResult, ExportItem, RagRecord
from ragpulse.redaction import Redactor, luhn_valid

EMAILS = {
    "question": "zoltan.quixby@example.com",
    "document": "mirela.vantongeren@example.org",
    "answer": "kazimir.obrecht@example.net",
}
CARDS = {
    "question": "4111 1111 1111 1111",
    "document": "5555-5555-5555-4444",
    "answer": "4012888888881881",
}
PHONES = {
    "question": "+1 (555) 123-4567",
    "document": "+44 20 7946 0958",
    "answer": "(555) 987-6543",
}
PII = [*EMAILS.values(), *CARDS.values(), *PHONES.values()]
# The answer's e-mail is not in the document: faithfulness lists its words as
# unsupported tokens, one string each. These words must not leave either.
NAME_WORDS = ["quixby", "vantongeren", "obrecht", "kazimir", "zoltan", "mirela"]
ROUTE = f"/support/{EMAILS['question']}"
KEEP_ALL = {"kind": "random", "rate": 1.0}


def text_for(where: str) -> str:
    return {
        "question": f"I am {EMAILS['question']}, card {CARDS['question']}, phone "
        f"{PHONES['question']}: when does my refund arrive?",
        "document": f"Refund for {EMAILS['document']} (card {CARDS['document']}, phone "
        f"{PHONES['document']}) is processed within five business days.",
        "answer": f"Your refund to card {CARDS['answer']} arrives in five business days; "
        f"we will write to {EMAILS['answer']} or call {PHONES['answer']}.",
    }[where]


def test_fixture_values_are_what_they_claim() -> None:
    for card in CARDS.values():
        assert luhn_valid(card.replace(" ", "").replace("-", ""))
    redactor = Redactor()
    for where in ("question", "document", "answer"):
        text = redactor.redact(text_for(where))
        assert not [v for v in PII if v in text], text
        assert all(token in text for token in ("[EMAIL]", "[CARD]", "[PHONE]")), text


# --- End to end: ragpulse serve -----------------------------------------------------------


@dataclass
class Outputs:
    """Everything the collector let out, as text, per path."""

    jsonl: str
    otel: str
    logs: str
    metrics: str
    regression: str


def _post(url: str, body: bytes, content_type: str) -> int:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def _malformed(value: str) -> bytes:
    """An OTLP/JSON request the decoder refuses, quoting ``value`` in its error."""
    span = {
        "traceId": new_trace_id(),
        "spanId": "ab" * 8,
        "name": "x",
        "attributes": [{"key": "k", "value": {"intValue": value}}],
    }
    return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()


def _run_serve(tmp_path: Path, backend: CaptureServer, redaction: dict[str, object]) -> Outputs:
    results, sets = tmp_path / "results.jsonl", tmp_path / "sets"
    config = tmp_path / "ragpulse.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "assembly": {"grace_s": 0.2},
                "evaluation": {"model": {"rate": 0}},  # the cheap tier: this is about the exits
                "sinks": {"regression": {"directory": str(sets), "sets": {"all": KEEP_ALL}}},
                "redaction": redaction,
            }
        )
    )
    otlp, metrics = free_port(), free_port()
    log_path = tmp_path / "serve.log"
    with log_path.open("wb") as log_file:
        proc = subprocess.Popen(
            [sys.executable, "-m", "ragpulse.cli", "--log-level", "DEBUG", "serve",
             "--config", str(config), "--otlp-http-port", str(otlp), "--otlp-grpc-port", "0",
             "--metrics-port", str(metrics), "--results-jsonl", str(results),
             "--otlp-export-endpoint", backend.url],
            env={k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")},
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
        try:
            metrics_url = f"http://127.0.0.1:{metrics}/metrics"

            traces_url = f"http://127.0.0.1:{otlp}/v1/traces"

            def up() -> bool:
                assert proc.poll() is None, "ragpulse serve exited:\n" + log_path.read_text()
                # /metrics answers before the receiver listens: wait for both (an empty
                # request is a valid one that adds nothing).
                empty = _post(traces_url, b"", "application/x-protobuf") == 200
                return empty and bool(http_get(metrics_url))

            wait_until(up, 60, "ragpulse serve did not start", interval=0.1, ignore=(OSError,))
            request = rag_request(
                [(bytes.fromhex(new_trace_id()), text_for("question"),
                  [text_for("document")], text_for("answer"))]
            )  # fmt: skip
            for span in request.resource_spans[0].scope_spans[0].spans:
                for attr in span.attributes:
                    if attr.key == "ragpulse.route":
                        attr.value.string_value = ROUTE
            assert _post(traces_url, request.SerializeToString(), "application/x-protobuf") == 200
            for value in (EMAILS["question"], CARDS["question"], PHONES["question"]):
                assert _post(traces_url, _malformed(value), "application/json") == 400

            wait_until(
                lambda: results.exists() and results.read_text().count("\n") >= 1,
                60,
                "serve did not write the evaluated record within 60s",
            )
            metrics_text = metrics_once_evaluated(metrics_url, 1, openmetrics=True)
        finally:
            stop_process(proc)
    assert proc.returncode == 0, log_path.read_text()
    otel = [
        *(str(s) for s in backend.captured.spans()),
        *(str(r) for r in backend.captured.log_records()),
    ]
    return Outputs(
        jsonl=results.read_text(),
        otel="\n".join(otel),
        logs=log_path.read_text(errors="replace"),
        metrics=metrics_text,
        regression="\n".join(p.read_text() for p in sorted(sets.rglob("*.jsonl"))),
    )


@pytest.fixture
def backend() -> Iterator[CaptureServer]:
    """Receives the OTLP evaluation export (a test double of Tempo/Jaeger)."""
    with CaptureServer() as server:
        yield server


def _leaks(text: str) -> list[str]:
    return [v for v in [*PII, *NAME_WORDS] if v in text]


@pytest.mark.integration
def test_serve_redacts_everything_that_leaves_it(tmp_path: Path, backend: CaptureServer) -> None:
    out = _run_serve(tmp_path, backend, {})  # the defaults
    for path in ("jsonl", "otel", "logs", "metrics", "regression"):
        assert _leaks(getattr(out, path)) == [], f"{path} leaks: {_leaks(getattr(out, path))}"

    # Each output was really there and held the (redacted) content.
    [row] = [json.loads(line) for line in out.jsonl.splitlines()]
    assert row["question"] == Redactor().redact(text_for("question"))
    assert "[EMAIL]" in row["documents"][0]["content"] and "[PHONE]" in row["answer"]
    assert len(row["trace_id"]) == 32 and len(row["span_id"]) == 16  # ids untouched
    [faith] = [r for r in row["results"] if r["metric"] == "faithfulness"]
    assert "[REDACTED]" in faith["details"]["unsupported_tokens"]
    assert "gen_ai.evaluation.name" in out.otel and "[REDACTED]" in out.otel
    assert out.logs.count("refused OTLP request") == 3
    assert 'route="/support/[EMAIL]"' in out.metrics
    assert f'trace_id="{row["trace_id"]}"' in out.metrics  # exemplars: ids only
    [kept] = [json.loads(line) for line in out.regression.splitlines()]
    assert kept["record"]["question"] == row["question"]


@pytest.mark.integration
def test_redaction_off_keeps_everything(tmp_path: Path, backend: CaptureServer) -> None:
    out = _run_serve(tmp_path, backend, {"enabled": False})
    for value in PII:
        assert value in out.jsonl and value in out.regression
    for value in (EMAILS["question"], CARDS["question"], PHONES["question"]):
        assert value in out.logs  # the refused requests' decoder errors
    assert "kazimir" in out.otel and "obrecht" in out.otel  # unsupported tokens
    assert f'route="{ROUTE}"' in out.metrics


# --- Settings and the parts, in process -----------------------------------------------------


def _record() -> RagRecord:
    return RagRecord(
        trace_id=new_trace_id(),
        span_id="1234567890123452",  # all digits and Luhn-valid: an id, kept as it is
        question=text_for("question"),
        documents=[Document(id="kb-1", content=text_for("document"))],
        answer=text_for("answer"),
    )


def _result() -> EvalResult:
    return EvalResult(
        metric="faithfulness",
        method="lexical",
        score=0.5,
        explanation=f"judge: the answer names {EMAILS['answer']}",
        details={"unsupported_tokens": ["kazimir", "obrecht", "arrives"]},
    )


def test_apply_to_chooses_the_paths_and_eval_output_is_opt_in(tmp_path: Path) -> None:
    settings = load_settings()
    for path in ("jsonl", "otel", "prometheus", "logs", "regression"):
        assert Redactor.from_settings(settings, path).enabled, path
    assert not Redactor.from_settings(settings, "eval_output").enabled

    config = tmp_path / "c.yaml"
    config.write_text("redaction: {apply_to: [regression, eval_output]}\n")
    only = load_settings(config)
    assert Redactor.from_settings(only, "eval_output").enabled
    assert not Redactor.from_settings(only, "jsonl").enabled

    out = tmp_path / "results.jsonl"
    sink = JsonlSink.from_settings(load_settings(config, sinks={"jsonl": {"path": out}}))
    assert sink is not None
    sink.export(ExportItem(_record(), [_result()]))
    sink.shutdown()
    assert EMAILS["question"] in out.read_text()  # jsonl not in apply_to


def test_jsonl_keeps_ids_and_scrubs_quoted_words(tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    record = _record()
    sink = JsonlSink(out)  # built directly: redaction on by default
    sink.export(ExportItem(record, [_result()]))
    sink.shutdown()
    [row] = [json.loads(line) for line in out.read_text().splitlines()]
    assert row["span_id"] == record.span_id and row["trace_id"] == record.trace_id
    assert _leaks(out.read_text()) == []
    [result] = row["results"]
    assert result["details"]["unsupported_tokens"] == ["[REDACTED]", "[REDACTED]", "arrives"]
    assert result["explanation"] == "judge: the answer names [EMAIL]"


def test_regression_redaction_overrides_the_top_level_section(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "redaction": {"enabled": False},
                "sinks": {
                    "regression": {
                        "directory": str(tmp_path / "sets"),
                        "sets": {"all": KEEP_ALL},
                        "redaction": {"patterns": {"ticket": r"TCK-\d{4}"}},
                    }
                },
            }
        )
    )
    settings = load_settings(config)
    assert not Redactor.from_settings(settings, "jsonl").enabled
    sink = RegressionSink.from_settings(settings)
    assert isinstance(sink, RegressionSink)
    record = _record().model_copy(update={"question": f"{text_for('question')} TCK-1234"})
    sink.export(ExportItem(record, [_result()]))
    sink.shutdown()
    written = "".join(p.read_text() for p in (tmp_path / "sets").rglob("*.jsonl"))
    assert _leaks(written) == [] and "TCK-1234" not in written and "[TICKET]" in written

    # Without sinks.regression.redaction, regression sets follow the top-level section.
    config.write_text(
        yaml.safe_dump(
            {
                "redaction": {"enabled": False},
                "sinks": {"regression": {"directory": str(tmp_path / "sets2")}},
            }
        )
    )
    assert not Redactor.from_settings(load_settings(config), "regression").enabled
    plain = RegressionSink.from_settings(load_settings(config))
    assert isinstance(plain, RegressionSink) and not plain.redactor.enabled
    plain.shutdown()


def test_log_filter_redacts_messages_arguments_and_tracebacks() -> None:
    logger = logging.getLogger("ragpulse.test_redaction_logs")
    logger.propagate = False
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        installed = install_log_redaction(load_settings(), logger)
        assert isinstance(installed, RedactingFilter)
        logger.debug("refused: %s", text_for("question"))
        logger.info("as a dict: %r", {"who": EMAILS["document"]})
        try:
            raise ValueError(f"bad value {CARDS['answer']}")
        except ValueError:
            logger.exception("failed for %s", PHONES["answer"])
        logger.warning("mismatched %s %s", EMAILS["answer"])  # a format error, not a crash
        assert _leaks(stream.getvalue()) == [], stream.getvalue()
        assert stream.getvalue().count("[EMAIL]") == 3
        assert "ValueError: bad value [CARD]" in stream.getvalue()

        off = RedactionSettings(apply_to=["jsonl"])
        assert install_log_redaction(load_settings(redaction=off), logger) is None
        assert not [f for f in handler.filters if isinstance(f, RedactingFilter)]
        logger.info("kept: %s", EMAILS["question"])
        assert EMAILS["question"] in stream.getvalue()
    finally:
        remove_log_redaction(logger=logger)
        logger.removeHandler(handler)


def test_quick_checks_never_miss_what_the_full_patterns_redact() -> None:
    """The redactor looks for card and phone numbers only around digit runs, and skips
    JSON values whose serialization shows nothing to redact: both must agree with the
    patterns applied to the whole text, on texts built to sit at their edges (escaped
    characters, separators, numbers glued to words, several per text)."""
    from ragpulse import redaction as r

    def reference(text: str) -> str:
        text = r._EMAIL.sub(r.EMAIL, text) if "@" in text else text
        return r._PHONE.sub(r._phone, r._CARD.sub(r._card, text))

    pieces = [*"0123456789" * 6, *" ().+-" * 3, *'ab\n\t"\\@x.,:/_', *PII, "2024-01-15",
              "192.168.1.1", "555-123-4567", "(020) 7946 0958", "0.9285714285714286"]  # fmt: skip
    rng = random.Random(12)
    redactor = Redactor()
    for _ in range(20_000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(1, 30)))
        assert redactor.redact(text) == reference(text), text
        value = {"q": text, "l": [text[:5], {"k": text}]}
        if r.redact_json(value, redactor) != value:  # the walk, string by string
            assert redactor.needs_redaction(value), text
