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
    bad.write_text("assembly:\n  grace_s: abc\n  idel_s: 3\n")
    code, _, err = run(capsys, "serve", "--config", str(bad))
    assert code == 2
    assert f"{bad}:2: assembly.grace_s: input should be a valid number" in err
    assert f"{bad}:3: assembly.idel_s: unknown setting (did you mean assembly.idle_s?)" in err
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
        f"{bad}:2: sinks.regression.directroy: unknown option (did you mean directory?)" in report
    )
    assert (
        f"{bad}:5: evaluation.options.injection/rules.treshold: unknown option "
        "(did you mean threshold?)" in report
    )
    assert f"{bad}:6: evaluation.options.faithfulness/lexical.thresold: unknown option" in report


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
    assert "default" in rows["assembly.idle_s"]
    assert "hunter2" not in out and "********" in rows["auth_token"]
    assert "sk-hunter3" not in out  # a sink's key, masked before its Options read it


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"ragpulse {__version__}"


# --- One test per source: each names where the value was written, shows only what was
# written there, and suggests the closest real name. ---------------------------------------


def report_of(err: str) -> str:
    return " ".join(err.split())


def test_yaml_a_file_that_does_not_parse_names_its_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("evaluation:\n  batch_size: 3\n  evaluators: [faithfulness\nhost: x\n")
    code, _, err = run(capsys, "config", "check", str(bad))
    assert code == 2
    report = report_of(err)
    assert f"{bad}:4: does not parse: " in report, report
    assert "in a flow sequence that starts at line 3" in report
    assert "<unicode string>" not in report


def test_toml_keys_and_parse_errors_name_their_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(
        "# ragpulse\n"
        'host = "127.0.0.1"\n'
        "\n"
        "[evaluation]\n"
        "evaluators = [\n"
        '  "faithfulness",\n'
        "]\n"
        "batch_sise = 3\n"
        "[evaluation.judge]\n"
        "rate = 3\n"
    )
    code, _, err = run(capsys, "config", "check", str(bad))
    assert code == 2
    report = report_of(err)
    assert (
        f"{bad}:8: evaluation.batch_sise: unknown setting (did you mean evaluation.batch_size?)"
        in report
    )
    assert f"{bad}:10: evaluation.judge.rate: input should be less than or equal to 1, got 3" in (
        report
    )
    broken = tmp_path / "broken.toml"
    broken.write_text('host = "127.0.0.1"\n[evaluation]\nbatch size = 3\n')
    code, _, err = run(capsys, "config", "check", str(broken))
    assert code == 2
    assert f"{broken}:3: does not parse: Expected '=' after a key" in report_of(err)


def test_environment_misspelled_variables_and_sink_options_are_named(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("RAGPULSE_EVALUATION__BATCH_SISE", "3")
    monkeypatch.setenv("RAGPULSE_SINKS__PHOENIX__ENDPONT", "http://127.0.0.1:6006")
    code, _, err = run(capsys, "serve")
    assert code == 2
    report = report_of(err)
    assert (
        "RAGPULSE_EVALUATION__BATCH_SISE: unknown environment variable (did you mean "
        "RAGPULSE_EVALUATION__BATCH_SIZE?)" in report
    )
    assert (
        "RAGPULSE_SINKS__PHOENIX__ENDPONT: sinks.phoenix.endpont: unknown option (did you "
        "mean endpoint?)" in report
    )
    assert "required" not in report  # the misspelled key was meant for it: said once


def test_flags_unknown_and_bad_values_are_named(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["serve", "--metrics-prt", "9000"])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "unrecognized arguments: --metrics-prt 9000 (did you mean --metrics-port?)" in err
    with pytest.raises(SystemExit):
        main(["eval", "rows.jsonl", "-o", "out.jsonl", "--genrator", "app:llm"])
    assert "(did you mean --generator?)" in capsys.readouterr().err
    code, _, err = run(capsys, "serve", "--judge-rate", "3")
    assert code == 2
    assert "--judge-rate: evaluation.judge.rate: input should be less than or equal to 1, got " in (
        report_of(err)
    )


def test_sink_options_name_the_key_and_show_only_what_was_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "sinks:\n"
        "  phoenix:\n"
        "    endpont: http://127.0.0.1:6006\n"
        "  regression:\n"
        "    directory: sets\n"
        "    max_bytes: 10\n"
        "  jsonl: {path: r.jsonl, redaction: {emials: false}}\n"
    )
    code, _, err = run(capsys, "config", "check", str(bad))
    assert code == 2
    report = report_of(err)
    assert "3 problems in the settings" in report
    assert f"{bad}:3: sinks.phoenix.endpont: unknown option (did you mean endpoint?)" in report
    assert (
        f"{bad}:6: sinks.regression.max_bytes: input should be greater than or equal to 1024, "
        "got 10" in report
    )
    assert f"{bad}:7: sinks.jsonl.redaction.emials: unknown option (did you mean emails?)" in report
    # Nothing the user did not write: no sink's defaults, no required field said twice.
    assert "apply_to" not in report and "phone_numbers" not in report
    assert "required" not in report


def test_evaluator_options_and_functions_get_the_closest_name(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "team_metrics.py").write_text(
        "import ragpulse\n\n\n"
        "@ragpulse.evaluator(metric='brevity')\n"
        "def short_answers(record):\n"
        "    return 1.0\n\n\n"
        "@ragpulse.evaluator(metric='tone')\n"
        "def polite_tone(record):\n"
        "    return 1.0\n"
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "evaluation:\n"
        "  evaluators: [team_metrics:short_answer, team_metrics:brevity]\n"
        "  options:\n"
        "    injection/rules: {treshold: 0.5}\n"
        "    faithfulness/lexcal: {}\n"
    )
    code, _, err = run(capsys, "config", "check", str(bad))
    assert code == 2
    report = report_of(err)
    assert (
        f"{bad}:4: evaluation.options.injection/rules.treshold: unknown option "
        "(did you mean threshold?)" in report
    )
    assert (
        f"{bad}:5: evaluation.options.faithfulness/lexcal: unknown evaluator "
        "'faithfulness/lexcal' (did you mean faithfulness/lexical" in report
    )
    assert "refusal/rules" not in report  # the closest name, not the whole registry
    assert (
        "module team_metrics has no attribute 'short_answer' (did you mean short_answers?)"
        in report
    )
    assert (
        "module team_metrics has no attribute 'brevity' (its evaluators: polite_tone, "
        "short_answers)" in report
    )
