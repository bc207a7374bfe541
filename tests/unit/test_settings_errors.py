"""Settings errors a person can act on: every problem at once, each naming the file and
line, the variable or the flag, the setting, what is wrong and the closest real name;
no validation-library text; ``ragpulse config check/show``, ``ragpulse --version``."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragpulse import __version__
from ragpulse.cli import main


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def lines(err: str) -> list[str]:
    return [line.strip() for line in err.splitlines() if line.strip()]


def test_a_bad_file_names_itself_the_line_the_key_and_the_fix(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("assembly:\n  grace_s: abc\n  tmeout_s: 3\n")
    code, _, err = run(capsys, "serve", "--config", str(bad))
    assert code == 2
    assert f"{bad}:2: assembly.grace_s: input should be a valid number" in err
    assert f"{bad}:3: assembly.tmeout_s: unknown setting (did you mean assembly.timeout_s?)" in err
    assert "pydantic" not in err and "errors.pydantic.dev" not in err and "[type=" not in err


def test_every_problem_in_one_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "sinks:\n"
        "  regression: {directroy: /tmp/sets}\n"
        "evaluation:\n"
        "  options:\n"
        "    injection/rules: {treshold: 0.5}\n"
        "    faithfulness/lexical: {thresold: 0.5}\n"
    )
    code, _, err = run(capsys, "config", "check", str(bad))
    assert code == 2
    assert "3 problems in the settings" in err
    report = " ".join(err.split())
    assert (
        f"{bad}:2: sinks.regression: unknown option 'directroy' (did you mean 'directory'?)"
        in report
    )
    assert f"{bad}:5: evaluation.options.injection/rules: unknown option 'treshold'" in report
    assert "(did you mean 'threshold'?)" in report
    assert f"{bad}:6: evaluation.options.faithfulness/lexical: unknown option 'thresold'" in report


def test_a_bad_evaluator_name_gets_a_suggestion_not_the_whole_registry(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(capsys, "serve", "--evaluators", "faithfulness/lexcal")
    assert code == 2
    report = " ".join(err.split())
    assert "--evaluators: evaluation.evaluators: unknown evaluator 'faithfulness/lexcal'" in report
    assert "did you mean faithfulness/lexical" in report
    assert "`ragpulse metrics` lists the" in report
    assert "refusal/rules" not in report  # not all 40-odd names
    code, out, _ = run(capsys, "metrics")
    assert code == 0 and "faithfulness/lexical" in out and "refusal/rules" in out


def test_a_bad_variable_is_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAGPULSE_METRICS_PORT", "abc")
    code, _, err = run(capsys, "serve")
    assert code == 2
    report = " ".join(err.split())
    assert "RAGPULSE_METRICS_PORT: metrics_port: input should be a valid integer" in report
    assert "got 'abc'" in report


def test_a_secret_is_never_repeated(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("auth_token: [s3cr3t-value]\n")
    code, _, err = run(capsys, "config", "check", str(bad))
    assert code == 2 and "auth_token" in err and "s3cr3t" not in err


def test_config_check_and_show(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(
        "assembly:\n  grace_s: 0.5\nauth_token: hunter2\n"
        "sinks: {langfuse: {host: 'http://h', public_key: pk-1, secret_key: sk-hunter3}}\n"
    )
    assert run(capsys, "config", "check", str(good))[:2] == (0, f"{good}: ok\n")
    monkeypatch.setenv("RAGPULSE_METRICS_PORT", "9999")
    code, out, _ = run(capsys, "config", "show", "--config", str(good))
    assert code == 0
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 2}
    assert "0.5" in rows["assembly.grace_s"] and f"{good.name}:2" in rows["assembly.grace_s"]
    assert "9999" in rows["metrics_port"] and "RAGPULSE_METRICS_PORT" in rows["metrics_port"]
    assert "default" in rows["assembly.timeout_s"]
    assert "hunter2" not in out and "********" in rows["auth_token"]
    assert "sk-hunter3" not in out  # a sink's key, masked before its Options read it


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"ragpulse {__version__}"
