"""A third-party evaluator, sink and trace source, installed with pip, configured from a
settings file, run by `ragpulse eval` and `ragpulse serve` without any change to ragpulse.

The package (tests/third_party/ragpulse_example_plugins) is installed into a folder
of this test's own and put on PYTHONPATH for the subprocesses, so the project's
environment is left as it was.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.helpers import new_span_id, new_trace_id, rag_request, start_serve, stop_process
from support.kafka_env import free_port, wait_until

pytestmark = pytest.mark.integration

PACKAGE = Path(__file__).resolve().parents[1] / "third_party" / "ragpulse_example_plugins"


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    site = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("build")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(site), str(PACKAGE)],
        check=True, cwd=build,
    )  # fmt: skip
    paths = [str(site), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}


def settings_file(tmp_path: Path, csv_path: Path, polite_at: object = 0.5) -> Path:
    path = tmp_path / "ragpulse.yaml"
    path.write_text(
        "evaluation:\n"
        "  evaluators: [faithfulness/lexical, politeness/keywords]\n"
        "  options:\n"
        f"    politeness/keywords: {{words: [please, thank], polite_at: {polite_at}}}\n"
        "sinks:\n"
        f"  csv_scores: {{path: {json.dumps(str(csv_path))}, metrics: [politeness]}}\n"
    )
    return path


def ragpulse(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", *args],
        env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_eval_runs_the_third_party_evaluator(tmp_path: Path, plugin_env: dict[str, str]) -> None:
    rows = [
        {"question": "Price?", "contexts": ["It costs 6 dollars."], "answer": "Thank you! 6."},
        {"question": "Price?", "contexts": ["It costs 6 dollars."], "answer": "6 dollars."},
    ]
    src, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    src.write_text("\n".join(json.dumps(r) for r in rows))
    config = settings_file(tmp_path, tmp_path / "unused.csv")
    done = ragpulse("eval", str(src), "-o", str(out), "--config", str(config), env=plugin_env)
    assert done.returncode == 0, done.stderr
    results = [json.loads(line)["results"] for line in out.read_text().splitlines()]
    polite = [next(r for r in rs if r["metric"] == "politeness") for rs in results]
    assert [(p["score"], p["label"]) for p in polite] == [(0.5, "polite"), (0.0, "curt")]


def test_serve_runs_the_third_party_evaluator_and_sink(
    tmp_path: Path, plugin_env: dict[str, str]
) -> None:
    csv_path = tmp_path / "scores.csv"
    config = settings_file(tmp_path, csv_path)
    port = free_port()
    proc, _ = start_serve("--config", str(config), "--otlp-http-port", str(port), env=plugin_env)
    try:
        trace_id = new_trace_id()
        body = rag_request(
            [(bytes.fromhex(trace_id), "Price?", ["It costs 6 dollars."], "Please note: 6.")]
        ).SerializeToString()
        import urllib.request

        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/v1/traces",
            data=body,
            headers={"Content-Type": "application/x-protobuf"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            assert response.status == 200

        def written() -> bool:
            return csv_path.exists() and trace_id in csv_path.read_text()

        wait_until(written, 120, "the third-party sink wrote no row for the trace")
    finally:
        stop_process(proc)
    rows = list(csv.reader(csv_path.open()))
    assert rows == [[trace_id, "politeness/keywords", "0.5", "polite"]]  # faithfulness filtered


def test_bad_third_party_option_fails_at_start(tmp_path: Path, plugin_env: dict[str, str]) -> None:
    config = settings_file(tmp_path, tmp_path / "x.csv", polite_at=2)
    done = ragpulse("serve", "--config", str(config), "--otlp-http-port", "0", env=plugin_env)
    assert done.returncode == 2
    assert "politeness/keywords" in done.stderr and "polite_at" in done.stderr


def source_settings(tmp_path: Path, spans: Path, results: Path, poll: str = "poll_s") -> Path:
    path = tmp_path / "ragpulse.yaml"
    path.write_text(
        "evaluation: {evaluators: [faithfulness/lexical]}\n"
        "assembly: {grace_s: 0.1}\n"
        f"sources:\n  span_file: {{path: {json.dumps(str(spans))}, {poll}: 0.05}}\n"
        f"sinks:\n  jsonl: {{path: {json.dumps(str(results))}}}\n"
    )
    return path


def test_serve_runs_the_third_party_source(tmp_path: Path, plugin_env: dict[str, str]) -> None:
    """`--source span_file`: the spans a source of another package reads become records."""
    spans, results = tmp_path / "spans.jsonl", tmp_path / "results.jsonl"
    config = source_settings(tmp_path, spans, results)
    proc, _ = start_serve("--config", str(config), "--source", "span_file", env=plugin_env)
    trace_id = new_trace_id()
    try:
        span = {
            "trace_id": trace_id, "span_id": new_span_id(), "name": "answer",
            "start_time_ns": 1_000, "end_time_ns": 2_000, "resource": {"service.name": "shop"},
            "attributes": {"ragpulse.role": "pipeline", "input.value": "Price?",
                           "output.value": "It costs 6 dollars."},
        }  # fmt: skip
        spans.write_text(json.dumps(span) + "\n")

        def written() -> bool:
            return results.exists() and trace_id in results.read_text()

        wait_until(written, 120, "the span the source read became no record")
    finally:
        stop_process(proc)
    [line] = [json.loads(line) for line in results.read_text().splitlines()]
    assert (line["trace_id"], line["question"]) == (trace_id, "Price?")


def test_bad_third_party_source_option_fails_at_start(
    tmp_path: Path, plugin_env: dict[str, str]
) -> None:
    config = source_settings(tmp_path, tmp_path / "s.jsonl", tmp_path / "r.jsonl", poll="pol_s")
    done = ragpulse("serve", "--config", str(config), "--source", "span_file", env=plugin_env)
    assert done.returncode == 2
    assert "sources.span_file.pol_s" in done.stderr and "did you mean poll_s" in done.stderr
