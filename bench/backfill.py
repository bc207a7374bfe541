"""Stored traces: how fast ``ragpulse eval --from`` reads, scores and writes back, per tool.

For each tool: N demo-app traces (pipeline, retrieval with 3 documents, chat: 3 spans)
are sent to it over OTLP (Phoenix, MLflow: the real servers the live tests use, from
``.backends``) or stored in the Langfuse double (tests/support/langfuse_double.py: no
Langfuse server can run here, so its figures are ragpulse's side plus a local Python
server). Then, with the clock running:

- read: the reader alone (find the traces, fetch their spans, decode), in this process;
- first run: ``ragpulse eval --from URL -o FILE`` in a subprocess: read, score with the
  default cheap tier, write every result back (annotations, assessments, scores) and
  wait until the tool took them all;
- second run: the same again (each result replaces the first run's: for MLflow a
  lookup of the earlier assessments, then updates in place).

It prints traces/s for each and the subprocess's peak RSS. One machine, shared with the
tool's server: the figures are what this machine does, not a bound.

    .venv/bin/python bench/backfill.py [--traces 500] [--tools phoenix,mlflow,langfuse]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from prometheus_client import CollectorRegistry  # noqa: E402
from support.langfuse_double import LangfuseDouble  # noqa: E402
from support.tracing_backends import MlflowServer, PhoenixServer, request  # noqa: E402

from ragpulse.collector.stored.common import SourceMetrics  # noqa: E402
from ragpulse.collector.stored.tool import open_reader, parse_backend_url  # noqa: E402
from ragpulse.config import StoredTracesSettings  # noqa: E402
from ragpulse.errors import BackendError  # noqa: E402

PROJECT = "bench-app"
RUNNER = (
    "import resource, sys\n"
    "from ragpulse.cli import main\n"
    "code = main(sys.argv[1:])\n"
    "print('peak_rss_kb', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def send(otlp: str, count: int, headers: dict[str, str]) -> None:
    app = subprocess.run(
        [sys.executable, str(ROOT / "tests/support/backend_app.py"), "--backend", otlp,
         "--count", str(count), "--project", PROJECT, "--service", PROJECT,
         *(f"--header={k}={v}" for k, v in headers.items())],
        capture_output=True, text=True, timeout=1800, check=True,
    )  # fmt: skip
    assert len(app.stdout.splitlines()) == count


def read_only(url: str, env: dict[str, str], expected: int) -> float:
    """Seconds for the reader alone to find and fetch every trace (waits until the tool
    holds them all: it may still be inserting)."""
    settings = StoredTracesSettings(
        public_key=env.get("LANGFUSE_PUBLIC_KEY"), secret_key=env.get("LANGFUSE_SECRET_KEY")
    )
    reader = open_reader(parse_backend_url(url), settings, SourceMetrics(CollectorRegistry()))
    since = time.time_ns() - 3600 * 10**9
    deadline = time.monotonic() + 600
    while True:
        started = time.monotonic()
        try:
            ids = [r.trace_id for refs in reader.roots(since, None) for r in refs]
            spans = sum(len(page.spans) for page in reader.traces(ids))
        except BackendError:  # Phoenix: no such project until its first span is inserted
            if time.monotonic() > deadline:
                raise
            continue
        took = time.monotonic() - started
        if len(ids) >= expected or time.monotonic() > deadline:
            break
    reader.close()
    assert len(ids) == expected and spans == 3 * expected, (len(ids), spans)
    return took


def eval_from(url: str, env: dict[str, str], out: Path) -> tuple[float, int, str]:
    """(seconds, peak RSS in KiB, ragpulse's own traces/s line) of one ``eval --from``."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, "--log-level", "WARNING", "eval", "--from", url,
         "--since", "1h", "-o", str(out)],
        capture_output=True, text=True, timeout=3600, env=env, check=False,
    )  # fmt: skip
    took = time.monotonic() - started
    assert done.returncode == 0, done.stderr[-2000:]
    rss = int(re.search(r"peak_rss_kb (\d+)", done.stderr).group(1))  # type: ignore[union-attr]
    line = next(ln for ln in done.stderr.splitlines() if "read from" in ln)
    return took, rss, line


def bench(tool: str, url: str, env: dict[str, str], count: int, work: Path) -> dict[str, Any]:
    read_s = read_only(url, env, count)
    first_s, first_rss, first_line = eval_from(url, env, work / f"{tool}-1.jsonl")
    second_s, second_rss, _ = eval_from(url, env, work / f"{tool}-2.jsonl")
    return {
        "tool": tool,
        "traces": count,
        "read traces/s": count / read_s,
        "first run traces/s": count / first_s,
        "second run traces/s": count / second_s,
        "peak RSS MiB": max(first_rss, second_rss) / 1024,
        "ragpulse says": first_line.strip(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--traces", type=int, default=500)
    parser.add_argument("--tools", default="phoenix,mlflow,langfuse")
    args = parser.parse_args()
    tools = args.tools.split(",")
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        env = {k: v for k, v in os.environ.items() if not k.startswith("RAGPULSE_")}
        env["RAGPULSE_CACHE_DIR"] = str(work / "cache")
        if "phoenix" in tools:
            (work / "phoenix").mkdir()
            server = PhoenixServer(work / "phoenix")
            server.start()
            try:
                send(server.url, args.traces, {})
                url = server.url.replace("http://", "phoenix://") + f"/{PROJECT}"
                rows.append(bench("phoenix", url, env, args.traces, work))
            finally:
                server.stop()
        if "mlflow" in tools:
            (work / "mlflow").mkdir()
            mlflow = MlflowServer(work / "mlflow")
            mlflow.start()
            try:
                experiment = mlflow.create_experiment(PROJECT)
                send(mlflow.url, args.traces, {"x-mlflow-experiment-id": experiment})
                url = mlflow.url.replace("http://", "mlflow://") + f"/{experiment}"
                rows.append(bench("mlflow", url, env, args.traces, work))
                info = request(f"{mlflow.url}/api/3.0/mlflow/traces/search", {
                    "locations": [{"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": experiment}}],
                    "max_results": 1,
                })  # fmt: skip
                trace_id = info["traces"][0]["trace_id"]
                full = request(f"{mlflow.url}/api/3.0/mlflow/traces/{trace_id}")
                kept = full["trace"]["trace_info"].get("assessments", [])
                rows[-1]["assessments on one trace after 2 runs"] = len(kept)
            finally:
                mlflow.stop()
        if "langfuse" in tools:
            with LangfuseDouble() as double:
                from opentelemetry.sdk.resources import Resource
                from opentelemetry.sdk.trace import TracerProvider
                from opentelemetry.sdk.trace.export import SimpleSpanProcessor
                from opentelemetry.sdk.trace.export.in_memory_span_exporter import (
                    InMemorySpanExporter,
                )

                import ragpulse  # the double stores SDK spans: record them in this process
                from ragpulse.cli import demo_app

                provider = TracerProvider(resource=Resource.create({"service.name": PROJECT}))
                recorded = InMemorySpanExporter()
                provider.add_span_processor(SimpleSpanProcessor(recorded))
                ragpulse.configure(exporter="none", tracer_provider=provider)
                questions = demo_app.corpus()["questions"]
                for i in range(args.traces):
                    demo_app.answer(questions[i % len(questions)]["question"])
                ragpulse.shutdown()
                double.add_spans(recorded.get_finished_spans())
                keys = {
                    "LANGFUSE_PUBLIC_KEY": double.public_key,
                    "LANGFUSE_SECRET_KEY": double.secret_key,
                }
                url = double.url.replace("http://", "langfuse://")
                rows.append(bench("langfuse (double)", url, {**env, **keys}, args.traces, work))
                assert not double.invalid
    for row in rows:
        print(json.dumps(row))
    print()
    print(f"{'tool':<20}{'read/s':>10}{'1st run/s':>12}{'2nd run/s':>12}{'peak RSS MiB':>14}")
    for row in rows:
        print(
            f"{row['tool']:<20}{row['read traces/s']:>10.1f}{row['first run traces/s']:>12.1f}"
            f"{row['second run traces/s']:>12.1f}{row['peak RSS MiB']:>14.0f}"
        )


if __name__ == "__main__":
    main()
