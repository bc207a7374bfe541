"""``ragpulse judge calibrate``: agreement, baseline file, drift gate, errors.

The judge is the local OpenAI-compatible double (tests/support/judge_server.py) talked to by
the real ``openai`` client, programmed here to answer every calibration row by its
label (perfect agreement) or against it (``flip``: a broken model). One test runs
the real llama.cpp server (SmolLM2-135M) for the machinery, not for its verdicts.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from support.judge_server import JudgeServer, _data

from ragpulse.cli import main
from ragpulse.offline.calibrate import (
    Calibration,
    CalibrationError,
    CalibrationRow,
    auroc,
    figures,
    load_baseline,
    load_set,
    percentile,
)
from ragpulse.offline.calibrate_flags import METRICS
from ragpulse.record import EvalResult

SECRET = "sk-calibrate-SECRET-7f3a"
LIMIT = 8  # rows per metric: 4 of each label; keeps the module to a few seconds


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _places(value: Any) -> Iterator[dict[str, Any]]:
    """Every object with a ``where`` (injection locations, whatever the input's shape)."""
    if isinstance(value, dict):
        if "where" in value:
            yield value
        for v in value.values():
            yield from _places(v)
    elif isinstance(value, list):
        for v in value:
            yield from _places(v)


class LabelJudge(JudgeServer):
    """Answers each prompt with the verdict the row's label calls for (``flip``: the
    opposite). The row is found by its texts in the request's data blocks."""

    def __init__(self) -> None:
        super().__init__()
        self.flip = False
        self.rows = {m: load_set(m) for m in METRICS}

    def _row(self, metric: str, data: dict[str, Any]) -> CalibrationRow:
        """The metric's row whose texts the request carries (sets share questions)."""
        seen = set(_strings(data))

        def hits(row: CalibrationRow) -> int:
            texts = [row.question, row.answer, *row.contexts]
            return sum(t in seen for t in texts if t)

        return max(self.rows[metric], key=hits)

    def verdicts(self, prompt: str, data: dict[str, Any]) -> dict[str, Any]:
        row = self._row(prompt.split(".")[0], data)
        yes = bool(row.label) != self.flip
        if prompt == "faithfulness.claims":
            return {"claims": [row.answer]}
        if prompt == "faithfulness.verdicts":
            verdict = "supported" if yes else "not_found"
            return {"verdicts": [
                {"claim_index": c["index"], "document_index": d["index"], "verdict": verdict,
                 "reason": "by label"}
                for c in data["claims"] for d in data["documents"]
            ]}  # fmt: skip
        if prompt == "faithfulness.whole":
            return {"verdict": int(yes), "reasoning": "by label"}
        if prompt == "context_relevance.verdicts":
            docs = data["documents"]
            return {"verdicts": [
                {"document_index": d["index"], "relevant": yes, "reason": "by label"} for d in docs
            ]}  # fmt: skip
        if prompt == "answer_relevance.verdict":
            return {"verdict": "yes" if yes else "no", "reason": "by label"}
        if prompt == "injection.verdicts":
            places = list(_places(data))
            return {"verdicts": [
                {"where": p["where"], "injection": yes, "reason": "by label"} for p in places
            ]}  # fmt: skip
        raise AssertionError(f"unexpected prompt {prompt}")

    async def _answer(self, body: dict[str, Any]) -> web.Response:
        if self.behaviour.status:  # errors are the base double's business
            return await super()._answer(body)
        system = body["messages"][0]["content"]
        prompt = system.split("[prompt ", 1)[1].split("@", 1)[0]
        content = json.dumps(self.verdicts(prompt, _data(body["messages"])))
        return web.json_response({
            "id": "c", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "finish_reason": "stop",
                         "message": {"role": "assistant", "content": content}}],
            "usage": {"prompt_tokens": 100, "completion_tokens": 10, "total_tokens": 110},
        })  # fmt: skip


@pytest.fixture(scope="module")
def judge() -> Iterator[LabelJudge]:
    with LabelJudge() as server:
        yield server


@pytest.fixture(scope="module", autouse=True)
def _own_settings() -> Iterator[None]:
    """Module-wide (autouse: set before the module's baseline run): generous timeouts for
    a busy CI machine, no budget pacing (60 calls a minute by default), no outside judge."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAGPULSE_EVALUATION__JUDGE__TIMEOUT_S", "60")
        mp.setenv("RAGPULSE_JUDGE_CALLS_PER_MINUTE", "100000")
        for name in ("RAGPULSE_JUDGE_BASE_URL", "RAGPULSE_JUDGE_MODEL", "RAGPULSE_CONFIG"):
            mp.delenv(name, raising=False)
        yield


def calibrate(judge: JudgeServer, *extra: str) -> int:
    return main([
        "judge", "calibrate", "--judge-base-url", judge.base_url, "--judge-model", "judge-test",
        "--judge-api-key", SECRET, "--limit", str(LIMIT), *extra,
    ])  # fmt: skip


@pytest.fixture(scope="module")
def baseline(judge: LabelJudge, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("calibrate") / "baseline.json"
    judge.flip = False
    assert calibrate(judge, "--out", str(path), "--price-in", "2.5", "--price-out", "10") == 0
    return path


def test_perfect_agreement_written_as_a_baseline(
    judge: LabelJudge, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = baseline.read_text()
    calibration = load_baseline(baseline)
    assert Calibration.model_validate_json(calibration.model_dump_json()) == calibration
    assert calibration.judge_model == "judge-test"
    assert calibration.judge_host == f"127.0.0.1:{judge.port}"
    assert calibration.limit == LIMIT and calibration.threshold == 0.5
    assert set(calibration.metrics) == set(METRICS)
    for metric, m in calibration.metrics.items():
        assert (m.rows, m.judged, m.unjudged) == (LIMIT, LIMIT, {}), metric
        assert (m.auroc, m.balanced_accuracy, m.coverage) == (1.0, 1.0, 1.0), metric
        assert (m.tp, m.fp, m.tn, m.fn) == (LIMIT // 2, 0, LIMIT // 2, 0), metric
        assert m.calls >= LIMIT and m.prompt_tokens == 100 * m.calls
        assert m.latency_p50_s is not None and m.latency_p95_s is not None
        assert m.prompts and all("@" in p for p in m.prompts)
        assert m.cost == pytest.approx((m.prompt_tokens * 2.5 + m.completion_tokens * 10) / 1e6)
    assert calibration.metrics["faithfulness"].calls == 2 * LIMIT  # claims, then verdicts
    assert SECRET not in text and "/v1" not in text
    out, err = capsys.readouterr()
    assert SECRET not in out + err


def test_same_judge_passes_the_gate(
    judge: LabelJudge, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge.flip = False
    assert calibrate(judge, "--baseline", str(baseline), "--max-drop", "0.05") == 0
    out = capsys.readouterr().out
    assert "no figure dropped by more than 0.05" in out
    assert "1.000 (1.000)" in out  # the baseline's figure beside the new one


def test_flipped_judge_trips_the_drift_gate(
    judge: LabelJudge, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    judge.flip = True
    try:
        status = calibrate(judge, "--baseline", str(baseline), "--max-drop", "0.05")
    finally:
        judge.flip = False
    assert status == 1
    out = capsys.readouterr().out
    for metric in METRICS:
        assert f"drift: {metric} auroc: 1.000 -> 0.000" in out
        assert f"drift: {metric} balanced_accuracy: 1.000 -> 0.000" in out


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "does not exist"),
        ("{not json", "is not a ragpulse judge calibration"),
        ('{"kind": "something else"}', "is not a ragpulse judge calibration"),
        (b"\xff\xfe\x00", "cannot be read"),
    ],
)
def test_bad_baseline_exits_2_before_any_call(
    judge: LabelJudge,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    content: str | bytes | None,
    message: str,
) -> None:
    path = tmp_path / "baseline.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    before = len(judge.seen.requests)
    assert calibrate(judge, "--baseline", str(path)) == 2
    assert message in capsys.readouterr().err
    assert len(judge.seen.requests) == before


def test_baseline_of_another_limit_is_refused(
    judge: LabelJudge, baseline: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = len(judge.seen.requests)
    status = main(["judge", "calibrate", "--judge-base-url", judge.base_url, "--judge-model",
                   "judge-test", "--limit", "4", "--baseline", str(baseline)])  # fmt: skip
    assert status == 2
    assert f"was made with --limit {LIMIT}" in capsys.readouterr().err
    assert len(judge.seen.requests) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--max-drop", "0.05"], "--max-drop needs --baseline"),
        (["--metrics", "faithfulness,bogus"], "unknown bogus"),
        (["--limit", "1"], "--limit must be at least 2"),
        (["--price-in", "-1"], "--price-in must be a number >= 0"),
    ],
)
def test_usage_problems_exit_2(
    judge: LabelJudge, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert main(["judge", "calibrate", "--judge-base-url", judge.base_url,
                 "--judge-model", "m", *argv]) == 2  # fmt: skip
    assert message in capsys.readouterr().err


def test_no_judge_configured_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["judge", "calibrate", "--limit", "2"]) == 2
    assert "no LLM judge configured" in capsys.readouterr().err


def test_failing_judge_is_counted_and_exits_1(
    judge: LabelJudge,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("RAGPULSE_EVALUATION__JUDGE__MAX_RETRIES", "0")
    judge.behaviour.status, judge.behaviour.times = 500, 10_000
    out_file = tmp_path / "failing.json"
    try:
        status = calibrate(judge, "--metrics", "answer_relevance", "--out", str(out_file))
    finally:
        judge.behaviour.status, judge.behaviour.times = None, 0
    assert status == 1
    assert "no row judged: answer_relevance" in capsys.readouterr().out
    m = load_baseline(out_file).metrics["answer_relevance"]
    assert (m.judged, m.unjudged, m.auroc, m.calls) == (
        0,
        {"error:server_error": LIMIT},
        None,
        LIMIT,
    )


def test_the_shipped_set_is_pinned_balanced_and_limit_keeps_balance() -> None:
    for metric in METRICS:
        rows = load_set(metric)
        assert len(rows) == 24 and sum(r.label for r in rows) == 12
        assert len({r.id for r in rows}) == len(rows)
        for n in (2, 4, 8):
            assert sum(r.label for r in load_set(metric, n)) == n // 2
    sources = {r.source for m in METRICS for r in load_set(m)}
    assert not any(word in s for s in sources for word in ("FaithBench", "BIPIA", "garak", "RGB"))


def test_figures_count_unjudged_rows_and_ties() -> None:
    rows = [CalibrationRow(id=str(i), source="s", label=y) for i, y in enumerate([1, 0, 1, 0])]
    results = [
        EvalResult(metric="m", method="llm_judge", score=1.0),
        EvalResult(metric="m", method="llm_judge", score=0.5),  # on the fail side of 0.5
        EvalResult(metric="m", method="llm_judge", score=None, label="error:timeout", error="t"),
        EvalResult(metric="m", method="llm_judge", score=None, label="skipped"),
    ]
    f = figures("m/llm_judge", rows, results, [0.2, 0.4], (3, 30, 3), (None, None))
    assert (f.judged, f.unjudged, f.coverage) == (2, {"error:timeout": 1, "skipped": 1}, 0.5)
    assert (f.tp, f.fp, f.tn, f.fn, f.auroc, f.balanced_accuracy) == (1, 0, 1, 0, 1.0, 1.0)
    assert f.cost is None and f.latency_p50_s == 0.2 and f.latency_p95_s == 0.4
    assert auroc([0.5, 0.5], [1, 0]) == 0.5 and auroc([1.0], [1]) is None
    assert percentile([], 50) is None


def test_modified_calibration_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    import ragpulse.offline.calibrate as calibrate_module

    monkeypatch.setattr(
        calibrate_module, "_manifest", lambda: {"files": {"injection.jsonl": {"sha256": "0"}}}
    )
    with pytest.raises(CalibrationError, match="differs from the SHA-256"):
        load_set("injection")


@pytest.mark.integration
def test_real_llama_cpp_judge(
    llm_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SmolLM2-135M through llama.cpp's server: real structured outputs, usage and timings.
    Its verdicts are near chance, so only the machinery is asserted."""
    # A call takes seconds on 2 busy cores; a small model can run on: cap its reply.
    monkeypatch.setenv("RAGPULSE_EVALUATION__JUDGE__TIMEOUT_S", "600")
    monkeypatch.setenv("RAGPULSE_EVALUATION__JUDGE__MAX_TOKENS", "200")
    out_file = tmp_path / "smollm2.json"
    status = main([
        "judge", "calibrate", "--judge-base-url", llm_server.base_url,
        "--judge-model", llm_server.model, "--metrics", "answer_relevance", "--limit", "2",
        "--out", str(out_file),
    ])  # fmt: skip
    m = load_baseline(out_file).metrics["answer_relevance"]
    assert m.rows == 2 and m.judged + sum(m.unjudged.values()) == 2
    assert status == (0 if m.judged else 1)
    assert m.calls >= 2
    if m.judged:
        assert m.prompt_tokens > 0 and m.completion_tokens > 0
