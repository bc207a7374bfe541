from __future__ import annotations

from pathlib import Path

import pytest

from ragpulse.config import load_settings
from ragpulse.errors import ConfigError


def test_precedence_flag_over_env_over_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cfg = tmp_path / "ragpulse.yaml"
    cfg.write_text("metrics_port: 1111\notlp_http_port: 2222\nassembly:\n  grace_s: 0.5\n")
    monkeypatch.setenv("RAGPULSE_OTLP_HTTP_PORT", "3333")
    monkeypatch.setenv("RAGPULSE_ASSEMBLY__TIMEOUT_S", "12")
    s = load_settings(cfg, metrics_port=4444)
    assert (s.metrics_port, s.otlp_http_port) == (4444, 3333)
    assert (s.assembly.grace_s, s.assembly.timeout_s) == (0.5, 12.0)


def test_config_file_from_env_and_toml(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "ragpulse.toml"
    cfg.write_text('host = "127.0.0.1"\n[evaluation]\nevaluators = ["faithfulness"]\n')
    monkeypatch.setenv("RAGPULSE_CONFIG", str(cfg))
    assert load_settings().evaluation.evaluators == ["faithfulness"]


def test_secret_token_is_not_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAGPULSE_AUTH_TOKEN", "hunter2")
    s = load_settings()
    assert s.auth_token is not None and s.auth_token.get_secret_value() == "hunter2"
    assert "hunter2" not in repr(s) and "hunter2" not in str(s.model_dump())


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("metrics_port: [1\n", "does not parse"),
        ("- a list\n", "mapping"),
        ("metrics_prot: 1\n", "metrics_prot"),
        ("assembly:\n  grace_s: -1\n", "grace_s"),
    ],
)
def test_bad_files_say_what_is_wrong(tmp_path: Path, text: str, match: str) -> None:
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(text)
    with pytest.raises(ConfigError, match=match):
        load_settings(cfg)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "nope.yaml")
