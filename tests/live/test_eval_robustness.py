"""``ragpulse eval`` never loses rows, bounds memory, and says what went wrong.

Runs the real command (a subprocess where exit status, signals or memory are
the point) against real files: a 50 MB row, empty, gzip and binary files,
unreachable and working judges (the local OpenAI-compatible test server), and
an interrupted run. Nothing here waits on time: runs are awaited with generous
deadlines, and memory is bounded (memory bounds are stable, time is not).
"""

from __future__ import annotations

import gzip
import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from support.judge_server import Behaviour, JudgeServer

from ragpulse.cli import main
from ragpulse.config import Settings
from ragpulse.evaluation import evaluate_records, load_evaluators_safely
from ragpulse.offline.io import read_rows
from ragpulse.plugin_context import PluginContext
from ragpulse.plugins import load_evaluators
from ragpulse.record import Document, RagRecord

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from giant_row import run_eval, write_giant_input

ROW = {
    "question": "When was the tower completed?",
    "contexts": ["The tower was completed in 1889."],
    "answer": "It was completed in 1889.",
}
NO_RETRIES = "evaluation:\n  judge:\n    max_retries: 0\n"


def write_rows(path: Path, rows: list[dict[str, object]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def run(*args: str | Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "eval", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )


def output_rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def red_line(proc: subprocess.CompletedProcess[str]) -> str:
    """The last line on stderr: where the one-line verdict goes."""
    return last_line(proc.stderr)


def last_line(text: str) -> str:
    return text.strip().splitlines()[-1]


def test_giant_row_is_cut_and_every_row_written(tmp_path: Path) -> None:
    source, out = tmp_path / "giant.jsonl", tmp_path / "out.jsonl"
    write_giant_input(source, mb=50)
    code, peak_mib, _ = run_eval([str(source), "-o", str(out)], tmp_path / "log.txt")
    print(f"peak RSS of ragpulse eval on a 50 MB row + 2 small rows: {peak_mib:.0f} MiB")
    assert code == 0, (tmp_path / "log.txt").read_text()[-3000:]
    rows = output_rows(out)
    assert len(rows) == 3
    assert all(row["results"] for row in rows)
    assert "truncated_input" not in rows[0] and "truncated_input" not in rows[2]
    [cut] = rows[1]["truncated_input"]
    assert cut == {
        "field": "documents[0].content",
        "chars": 50_000_000,
        "evaluated_chars": 200_000,
    }
    for result in rows[1]["results"]:
        assert result["details"]["truncated_input"] == [cut]
        assert result.get("error") is None
    assert rows[1]["contexts"][0] == json.loads(source.read_text().splitlines()[1])["contexts"][0]
    assert peak_mib < 2048  # was 6.6 GB before texts were cut; ~210 MiB measured


def test_record_limits_apply_wherever_evaluate_records_runs() -> None:
    """The collector, eval and replay all score through evaluate_records with evaluators
    loaded from a context: the context's settings set the bound."""
    settings = Settings(evaluation={"max_text_chars": 1_000, "max_record_chars": 2_500})
    names = ["faithfulness/lexical", "injection/rules"]
    evaluators = load_evaluators_safely(load_evaluators(names), PluginContext(settings))
    record = RagRecord(
        question="What is the refund policy?",
        answer="Thirty days. " * 100,  # 1,300 characters
        documents=[
            Document(id=str(i), content="Returns within thirty days. " * 50) for i in range(4)
        ],
    )
    [results] = evaluate_records([record], evaluators)
    cuts = results[0].details["truncated_input"]
    assert cuts == [
        {"field": "answer", "chars": 1_300, "evaluated_chars": 1_000},
        {"field": "documents[0].content", "chars": 1_400, "evaluated_chars": 1_000},
        {"field": "documents[1].content", "chars": 1_400, "evaluated_chars": 474},
        {"field": "documents[2:]", "chars": 2_800, "evaluated_chars": 0, "documents": 2},
    ]
    assert all(r.details["truncated_input"] == cuts for r in results)
    assert all(r.score is not None for r in results)
    small = RagRecord(question="Refunds?", answer="Thirty days.", documents=[Document(content="x")])
    [results] = evaluate_records([small], evaluators)
    assert all("truncated_input" not in r.details for r in results)


def test_a_line_past_the_line_limit_is_an_error_row_and_the_next_rows_survive() -> None:
    text = json.dumps(ROW) + "\n" + "x" * 5_000 + "\n" + json.dumps(ROW) + "\n"
    rows = list(read_rows(io.StringIO(text), max_line_chars=1_000))
    assert [r.line for r in rows] == [1, 2, 3]
    assert rows[0].row == ROW and rows[2].row == ROW
    assert rows[1].row is None and "5001 characters long" in (rows[1].error or "")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"", "no rows"),
        (b"\n\n  \n", "no rows"),
        (gzip.compress(b'{"question": "q"}\n' * 50), "gzip-compressed"),
        (bytes(range(256)) * 20, "binary"),
        (b"nope\n{broken\n[1, 2]\n", "nothing scored: all 3 lines are unreadable"),
    ],
    ids=["empty", "blank-lines", "gzip", "binary", "all-unreadable"],
)
def test_nothing_scored_exits_1_with_one_line(tmp_path: Path, content: bytes, message: str) -> None:
    source = tmp_path / "in.jsonl"
    source.write_bytes(content)
    proc = run(source, "-o", tmp_path / "out.jsonl")
    assert proc.returncode == 1, proc.stderr
    assert message in red_line(proc)
    assert "Traceback" not in proc.stderr


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_unreachable_judge_exits_1_naming_the_evaluator(tmp_path: Path) -> None:
    source = write_rows(tmp_path / "in.jsonl", [ROW, ROW])
    config = tmp_path / "ragpulse.yaml"
    config.write_text(NO_RETRIES)
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    proc = run(source, "-o", tmp_path / "out.jsonl", "--config", config,
               "--judge-base-url", url, "--judge-model", "m",
               "--metrics", "faithfulness/lexical,faithfulness/llm_judge")  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert red_line(proc).startswith("faithfulness/llm_judge failed on every row (2)")
    rows = output_rows(tmp_path / "out.jsonl")
    assert len(rows) == 2  # the rows are written all the same, errors included
    judged = [r for row in rows for r in row["results"] if r["method"] == "llm_judge"]
    assert all(r["error"] for r in judged)


@pytest.fixture
def judge() -> Iterator[JudgeServer]:
    with JudgeServer() as server:
        yield server


def test_a_working_judge_exits_0_and_one_failing_row_is_not_a_failed_tier(
    tmp_path: Path, judge: JudgeServer
) -> None:
    source = write_rows(tmp_path / "in.jsonl", [ROW, ROW, ROW])
    config = tmp_path / "ragpulse.yaml"
    config.write_text(NO_RETRIES)
    judge.behaviour = Behaviour(status=500, times=1)  # the first judge call fails
    proc = run(source, "-o", tmp_path / "out.jsonl", "--config", config,
               "--judge-base-url", judge.base_url, "--judge-model", "m",
               "--metrics", "faithfulness/llm_judge")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    results = [row["results"][0] for row in output_rows(tmp_path / "out.jsonl")]
    assert sum(1 for r in results if r.get("error")) == 1
    assert sum(1 for r in results if r["score"] is not None) == 2


def test_path_problems_exit_2_before_any_model_loads(tmp_path: Path) -> None:
    """A folder as input, with a model-tier metric asked for: refused, torch never imported."""
    code = (
        "import sys; from ragpulse.cli import main; rc = main(sys.argv[1:]); "
        "print('torch' in sys.modules); sys.exit(rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, "eval", str(tmp_path), "-o", str(tmp_path / "out.jsonl"),
         "--metrics", "faithfulness/probe"],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert red_line(proc) == f"input is a folder, not a file: {tmp_path}"
    assert proc.stdout.strip() == "False"


def test_path_problems(tmp_path: Path) -> None:
    source = write_rows(tmp_path / "in.jsonl", [ROW])
    out = tmp_path / "out.jsonl"
    assert main(["eval", str(tmp_path / "missing.jsonl"), "-o", str(out)]) == 2
    assert main(["eval", str(source), "-o", str(source)]) == 2  # would overwrite the input
    assert main(["eval", str(source), "-o", str(tmp_path)]) == 2  # output is a folder
    assert main(["eval", str(source), "-o", str(source / "sub" / "out.jsonl")]) == 2
    assert source.read_text() == json.dumps(ROW) + "\n"
    if os.geteuid() == 0:
        pytest.skip("running as root: chmod 000 does not stop root from reading")
    source.chmod(0)
    try:
        assert main(["eval", str(source), "-o", str(out)]) == 2
    finally:
        source.chmod(0o644)


def test_coercions_are_reported_on_the_row_and_counted(tmp_path: Path) -> None:
    rows = [
        {"question": 42, "contexts": "not a list", "answer": None},
        {"question": "q", "contexts": [{"content": 5, "score": "high"}, 7, {"text": "t"}],
         "answer": "a"},
        ROW,
    ]  # fmt: skip
    source = write_rows(tmp_path / "in.jsonl", rows)
    proc = run(source, "-o", tmp_path / "out.jsonl")
    assert proc.returncode == 0, proc.stderr
    first, second, third = output_rows(tmp_path / "out.jsonl")
    assert first["coerced"] == [
        "question: int -> str",
        "contexts: str -> [str]",
        "answer: null -> ''",
    ]
    assert second["coerced"] == [
        "contexts[].content: int -> str",
        "contexts[].score: str -> null",
        "contexts[]: int -> str",
    ]
    assert "coerced" not in third
    assert first["question"] == 42  # the row itself is written back as it came
    assert "2 rows coerced" in proc.stderr


def test_bad_conversations_are_bounded_counted_and_never_a_crash(tmp_path: Path) -> None:
    """A conversation of 10,000 turns in one row, a 5 MB message in a history, ids that
    are empty or not text, turns out of order: every row is written back, what was cut or
    dropped is said on the row, each conversation of two turns or more gets one record."""
    huge = [m for i in range(10_000) for m in (
        {"role": "user", "content": f"question {i}"}, {"role": "assistant", "content": f"a {i}"},
    )]  # fmt: skip
    big_history = [{"role": "user", "content": "x " * 2_500_000},
                   {"role": "assistant", "content": "ok"},
                   {"role": "user", "content": ROW["question"]},
                   {"role": "assistant", "content": ROW["answer"]}]  # fmt: skip
    rows = [
        {"messages": huge},
        {"messages": big_history, "conversation_id": "big"},
        {**ROW, "conversation_id": ""},  # an empty id is no id
        {**ROW, "conversation_id": {"id": 1}},
        {**ROW, "conversation_id": "late", "turn": 3},  # turns out of order
        {**ROW, "conversation_id": "late", "turn": 1},
    ]
    source = write_rows(tmp_path / "in.jsonl", rows)
    proc = run(source, "-o", tmp_path / "out.jsonl", "--metrics", "faithfulness/lexical")
    assert proc.returncode == 0, proc.stderr
    written = output_rows(tmp_path / "out.jsonl")
    records = [r for r in written if "conversation" in r]
    rows_back = [r for r in written if "conversation" not in r and "line" not in r]
    assert len(rows_back) == len(rows)  # every row back, in its order
    huge_row, big = rows_back[:2]
    assert huge_row["coerced"] == [
        "messages: 20000 -> the last 2000 read",
        "history: 989 turns keep their last 20 messages",
    ]  # 12 on
    assert len([r for r in written if r.get("conversation_id") == "line-1"]) == 1000
    assert "history: 1 messages cut at 2000 chars" in big["coerced"]
    assert {r["conversation"]["conversation_id"] for r in records} == {"line-1", "big", "late"}
    late = next(r for r in records if r["conversation"]["conversation_id"] == "late")
    assert [t["turn"] for t in late["conversation"]["turns"]] == [1, 3]
    assert "conversation_id: dict -> null" in " ".join(
        c for r in rows_back for c in r.get("coerced", [])
    )
    assert "3 conversations" in proc.stderr


def test_eval_output_is_redacted_only_when_apply_to_names_it(tmp_path: Path) -> None:
    mail = "jane.doe@example.com"
    row = {"question": f"Mail {mail}?", "contexts": [f"Write to {mail}"], "answer": mail}
    source = tmp_path / "in.jsonl"
    source.write_text(json.dumps(row) + "\n" + f"not json {mail}\n", encoding="utf-8")
    config = tmp_path / "ragpulse.yaml"
    config.write_text("redaction: {apply_to: [eval_output]}\n")
    assert main(["eval", str(source), "-o", str(tmp_path / "kept.jsonl")]) == 0
    assert (tmp_path / "kept.jsonl").read_text().count(mail) == 4  # your rows, as they came
    assert (
        main(["eval", str(source), "-o", str(tmp_path / "red.jsonl"), "--config", str(config)]) == 0
    )
    redacted = output_rows(tmp_path / "red.jsonl")
    assert mail not in (tmp_path / "red.jsonl").read_text()
    assert redacted[0]["answer"] == "[EMAIL]" and "[EMAIL]" in redacted[1]["raw"]


def test_work_abandoned_by_an_interrupt_is_not_reported_as_a_crash() -> None:
    """The signal can land between making a batch's coroutine and handing it to the judge
    client's loop (seen once in a loaded run of the test below): the coroutine is then
    never awaited, and Python's warning about it would be the last line the user sees."""
    import gc
    import logging
    import warnings

    from ragpulse.cli.common import quiet_abandoned_tasks

    async def batch() -> None:
        pass

    level = logging.getLogger("asyncio").level
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            quiet_abandoned_tasks()
            abandoned = batch()
            del abandoned
            gc.collect()
            warnings.warn("still reported", RuntimeWarning, stacklevel=1)
    finally:
        logging.getLogger("asyncio").setLevel(level)
    assert [str(w.message) for w in seen] == ["still reported"]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_run_keeps_every_row_written(
    tmp_path: Path, judge: JudgeServer, sig: signal.Signals
) -> None:
    """A slow judge keeps the run going; the signal lands mid-batch, with calls in flight.

    Every row is different: identical rows would be answered from the judge cache at
    once (cache hits take no budget), and the run could end before the signal."""
    rows = [{**ROW, "id": i, "answer": f"It was completed in 1889, case {i}."} for i in range(400)]
    source = write_rows(tmp_path / "in.jsonl", rows)
    out = tmp_path / "out.jsonl"
    judge.behaviour = Behaviour(delay_s=0.2)
    proc = subprocess.Popen(
        [sys.executable, "-m", "ragpulse.cli", "eval", str(source), "-o", str(out),
         "--batch-size", "2", "--judge-base-url", judge.base_url, "--judge-model", "m",
         "--metrics", "faithfulness/lexical,faithfulness/llm_judge"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while not (out.exists() and out.read_text().count("\n") >= 2):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no row written within 300 s"
            time.sleep(0.2)
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, stderr
    assert "Traceback" not in stderr and "destroyed but it is pending" not in stderr
    rows = output_rows(out)  # every line whole
    assert f"interrupted ({sig.name}): {len(rows)} rows written" in last_line(stderr)
    assert 2 <= len(rows) < 400
    assert [row["id"] for row in rows] == list(range(len(rows)))  # input order, no gap


def test_results_are_written_alike_however_they_are_encoded() -> None:
    """A line's results hold every field of a result but its duration, and its error only
    when there is one, whether the list is encoded at once (no error) or result by result."""
    from ragpulse.record import EvalResult
    from ragpulse.results import WrittenResult, result_dict, results_json

    written = [f for f in EvalResult.model_fields if f not in ("duration_ms", "error")]
    assert list(WrittenResult.__annotations__) == written
    ok = EvalResult(metric="m", method="x", score=0.5, details={"a": [1, "b"]}, duration_ms=3.0)
    failed = EvalResult(metric="m", method="y", error="ValueError: boom", duration_ms=1.0)
    assert results_json([ok, ok]) == json.dumps([result_dict(ok)] * 2, separators=(",", ":"))
    assert json.loads(results_json([ok, failed])) == [result_dict(ok), result_dict(failed)]


def test_rows_come_back_as_written_with_the_results_appended(tmp_path: Path) -> None:
    """Short rows are written back as their own text plus the results (no second encoding);
    a row that already has a key scoring adds, or one past KEEP_TEXT_CHARS, is encoded anew.
    Either way each output line is the input object with the results."""
    from ragpulse.offline import score

    lines = [
        '{ "question" : "Caf\\u00e9 hours?",  "contexts": ["Caf\u00e9 opens at 8."], '
        '"answer": "8", "n": 1.50 }\r\n',  # escapes, spacing and number text as written
        json.dumps({**ROW, "results": "an earlier run's"}) + "\n",  # replaced, not doubled
        json.dumps({**ROW, "question": 7}) + "\n",  # coerced: says so on the row
        json.dumps({**ROW, "contexts": ["x " * score.KEEP_TEXT_CHARS]}) + "\n",  # too long
    ]
    source, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    source.write_text("".join(lines), encoding="utf-8", newline="")
    assert main(["eval", str(source), "-o", str(out)]) == 0
    written = out.read_text(encoding="utf-8").splitlines()
    assert written[0].startswith(lines[0].rstrip()[:-1].rstrip() + ', "results": [')
    for line, got in zip(lines, written, strict=True):
        row = json.loads(got)
        results = row.pop("results")
        assert [r["metric"] for r in results] and all("duration_ms" not in r for r in results)
        row.pop("coerced", None)
        row.pop("truncated_input", None)
        assert row == {k: v for k, v in json.loads(line).items() if k != "results"}
    assert json.loads(written[2])["coerced"] == ["question: int -> str"]
