"""The SDK an app imports (``import ragpulse``, the decorators, ``ragpulse.configure``)
imports nothing that only the collector needs, so ``pip install ragpulse`` (no extra)
is enough for it; what does need an extra says the one line that installs it.

Each check runs in a fresh interpreter (a subprocess): the test process has imported the
collector already. The install itself, into a venv of its own, is
tests/live/test_sdk_install.py."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from ragpulse import extras

APP = textwrap.dedent(
    """
    import json, sys
    import ragpulse
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    ragpulse.configure(service_name="tiny", exporter=exporter)

    @ragpulse.retrieval(data_source="kb")
    def retrieve(q):
        return [{"id": "kb-1", "content": "The Pro plan includes 100 GB of storage."}]

    @ragpulse.tool(retrieval=True)
    def search(query):
        return retrieve(query)

    @ragpulse.generation(model="tiny-model")
    def generate(q, docs):
        return "100 GB."

    @ragpulse.pipeline(route="/ask")
    def answer(q):
        search(q)
        return generate(q, retrieve(q))

    with ragpulse.conversation("c-1"):
        answer("How much storage?")
    ragpulse.feedback(score=1.0, trace_id="0" * 32, span_id="0" * 16)
    ragpulse.shutdown()
    print(json.dumps({"spans": len(exporter.get_finished_spans()),
                      "modules": sorted({m.split(".")[0] for m in sys.modules})}))
    """
)

COLLECTOR_ONLY = {
    *(m.split(".")[0] for m in extras.MODULES["collector"] if m != "google.protobuf"),
    "numpy", "redis", "torch",
}  # fmt: skip
"""Top-level modules the SDK must not import (protobuf comes with the OTLP exporter)."""


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


def test_the_sdk_imports_nothing_only_the_collector_needs() -> None:
    done = run(APP)
    assert done.returncode == 0, done.stderr
    said = json.loads(done.stdout.splitlines()[-1])
    assert said["spans"] >= 5  # the app's spans were written
    assert COLLECTOR_ONLY.isdisjoint(said["modules"]), COLLECTOR_ONLY & set(said["modules"])


@pytest.mark.parametrize(
    ("module", "extra"),
    [("pydantic", "collector"), ("yaml", "collector"), ("kafka", "kafka"),
     ("kafka.producer", "kafka"), ("redis", "redis"), ("google", "collector"),
     ("requests", None), (None, None)],
)  # fmt: skip
def test_a_missing_module_names_its_extra(module: str | None, extra: str | None) -> None:
    assert extras.extra_of(module) == extra


def test_the_message_says_the_one_line() -> None:
    said = extras.needs("collector", "ragpulse serve", ["pydantic", "yaml", "rich", "httpx"])
    assert said == (
        "ragpulse serve needs the collector extra (not installed: pydantic, yaml, rich and 1 "
        "more): pip install 'ragpulse[collector]'"
    )
    assert extras.missing("collector") == []  # this venv has every extra
