"""The judge tier's health: a warning only when calls really fail, and a cache that
remembers whole answers (a rerun over the same rows makes no call, with any judge).

The real ``openai`` client against the local judge double (tests/support/judge_server.py).
"""

from __future__ import annotations

import json
import logging
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest
from support.helpers import new_trace_id
from support.judge_server import JudgeServer

from ragpulse.cli import main
from ragpulse.config import EvaluationSettings, JudgeSettings, Settings
from ragpulse.disk_cache import cache_root
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.evaluators.answer_relevance.llm_judge import JudgeAnswerRelevance
from ragpulse.evaluators.judge.cache import DISK_FILE, DiskCache
from ragpulse.evaluators.judge.client import FAILURES_BEFORE_WARNING, display_url
from ragpulse.plugin_context import PluginContext
from ragpulse.record import Document, RagRecord

DOCS = ["The Pro plan costs 6 dollars per month."]


@pytest.fixture
def server() -> Iterator[JudgeServer]:
    with JudgeServer() as s:
        yield s


def test_the_unusable_warning_waits_for_failures_in_a_row(
    server: JudgeServer, caplog: pytest.LogCaptureFixture
) -> None:
    # Failures the client counts as "cannot reach the judge" (here a refused key, 401:
    # no clock involved); a generous timeout, so that no answer fails by load alone.
    settings = JudgeSettings(base_url=server.base_url, model="m", api_key="k", max_retries=0,
                             timeout_s=60, cache="memory", cache_size=0)  # fmt: skip
    context = PluginContext(Settings(evaluation=EvaluationSettings(judge=settings)))
    [judge] = load_evaluators_safely([JudgeAnswerRelevance()], context)
    asked = 0

    def call(fails: bool) -> str | None:
        nonlocal asked
        asked += 1
        server.behaviour.status, server.behaviour.times = (401, 1) if fails else (None, 0)
        record = RagRecord(trace_id=new_trace_id(), question=f"question {asked}?",
                           documents=[Document(content=DOCS[0])], answer="6 dollars.")  # fmt: skip
        [result] = judge.evaluate([record])
        return result.error

    caplog.set_level(logging.INFO, logger="ragpulse")
    # This judge's lines only: a client of an earlier test may still log about its own.
    unusable, again = (f"LLM judge at {display_url(server.base_url)} {s}" for s in
                       ("cannot be used", "answers again"))  # fmt: skip
    try:
        # Failures among good answers (a judge under load): no outage reported.
        for _ in range(FAILURES_BEFORE_WARNING - 1):
            assert call(fails=True) is not None
        assert call(fails=False) is None
        for _ in range(FAILURES_BEFORE_WARNING - 1):
            assert call(fails=True) is not None
        assert unusable not in caplog.text
        # Failures in a row: one warning, then one line when it answers again.
        assert call(fails=True) is not None
        assert call(fails=True) is not None
        assert caplog.text.count(unusable) == 1
        assert call(fails=False) is None
        assert again in caplog.text
    finally:
        context.close()


def test_a_rerun_makes_no_call_with_a_judge_that_answers_once_per_claim(
    server: JudgeServer, tmp_path: Path
) -> None:
    server.behaviour.one_verdict_per_claim = True
    src = tmp_path / "rows.jsonl"
    # Each row its own documents and claim: what one row leaves out, no other row asks.
    rows = [{"question": f"How much is plan {i}?",
             "contexts": [f"Plan {i} costs {i} dollars per month.", f"Plan {i} keeps notes."],
             "answer": f"Plan {i} costs {i} dollars per month."} for i in range(40)]  # fmt: skip
    src.write_text("\n".join(json.dumps(r) for r in rows))
    cache = cache_root() / DISK_FILE  # ragpulse eval's default: on disk (this test's own)

    def run(out: Path) -> list[float]:
        flags = ["--judge-base-url", server.base_url, "--judge-model", "per-claim",
                 "--judge-calls-per-minute", "10000"]  # fmt: skip
        code = main(["eval", str(src), "-o", str(out), "--metrics", "faithfulness/llm_judge",
                     *flags])  # fmt: skip
        assert code == 0
        return [json.loads(x)["results"][0]["score"] for x in out.read_text().splitlines()]

    first = run(tmp_path / "first.jsonl")
    calls = len(server.seen.requests)
    assert calls > 0
    second = run(tmp_path / "second.jsonl")
    assert len(server.seen.requests) == calls  # every answer came from the cache
    assert second == first
    # Closed cleanly: the write-ahead log is checkpointed into the file and gone.
    assert not Path(f"{cache}-wal").exists()


def test_the_disk_cache_is_bounded_by_age_and_size(tmp_path: Path) -> None:
    path = tmp_path / "cache.sqlite3"
    cache = DiskCache(path, size=0, max_bytes=1024 * 1024, max_age_s=3600)
    for i in range(3):
        cache.put(f"old-{i}", "x")
    cache.close()
    with closing(sqlite3.connect(path)) as db, db:  # age them past the bound
        db.execute("UPDATE judge SET created = created - 7200")
    big = "y" * 4000
    cache = DiskCache(path, size=0, max_bytes=1024 * 1024, max_age_s=3600)
    assert cache.get("old-0") is None  # pruned when it opened
    for i in range(600):  # ~2.4 MB: past the size bound, pruned every 1,000 writes at most
        cache.put(f"new-{i}", big)
    cache.prune()
    with closing(sqlite3.connect(path)) as db:
        rows = db.execute("SELECT count(*) FROM judge").fetchone()[0]
        oldest_kept = db.execute("SELECT min(key) FROM judge").fetchone()[0]
    assert rows < 600
    assert cache.get("new-599") == big  # the newest stay
    assert oldest_kept != "new-0"
    cache.close()
    assert not Path(f"{path}-wal").exists()
