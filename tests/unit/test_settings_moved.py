"""Keys of earlier releases (ragpulse/settings_moved.py) still read, in every source, at
their new places: the sinks' settings under ``sinks.<name>``, the model tier's in
``evaluation.model``. Each gets one deprecation message naming the new key; where one
source gives both, the new key wins and the message says the old one was ignored."""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import pytest

from ragpulse.cli import build_parser, main
from ragpulse.cli.serve import serve_overrides
from ragpulse.config import EvaluationSettings, Settings, load_settings
from ragpulse.errors import ConfigError, RagpulseDeprecationWarning
from ragpulse.exporters.jsonl import JsonlSink
from ragpulse.exporters.otel import OtelEvaluationSink
from ragpulse.exporters.prometheus import PrometheusSink
from ragpulse.exporters.regression import RegressionSink
from ragpulse.plugins import plugin_problems, sink_class
from ragpulse.settings_env import check_environment
from ragpulse.settings_moved import DEPRECATED_KEYS, move_keys


@pytest.fixture(autouse=True)
def no_ragpulse_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.upper().startswith("RAGPULSE_")]:
        monkeypatch.delenv(name)


def said(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, RagpulseDeprecationWarning)]


def loaded(config: Path | None = None, **flags: object) -> tuple[Settings, list[str]]:
    """Settings as a command loads them (plug-in options checked), and the messages."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        settings = load_settings(config, checks=[plugin_problems], **flags)
    return settings, said(caught)


def prometheus(settings: Settings) -> PrometheusSink.Options:
    options = PrometheusSink.options_from(settings)
    assert isinstance(options, PrometheusSink.Options)
    return options


def otel(settings: Settings) -> OtelEvaluationSink.Options:
    options = OtelEvaluationSink.options_from(settings)
    assert isinstance(options, OtelEvaluationSink.Options)
    return options


OLD_FILE = """\
results_jsonl: /tmp/results.jsonl
otlp_export_endpoint: http://127.0.0.1:4318
service_name: evals
prometheus: {max_routes: 5, routes: [/ask]}
otel_export:
  timeout_s: 3
regression:
  directory: /tmp/sets
  max_bytes: 4096
evaluation:
  model_rate: 0.3
  model_batch_size: 4
  model_max_wait_s: 0.1
  model_max_queue: 9
  model_budget: 0.5
  model_max_delay_s: 2
"""


def test_old_keys_in_a_file_read_at_their_new_places(tmp_path: Path) -> None:
    config = tmp_path / "old.yaml"
    config.write_text(OLD_FILE)
    settings, messages = loaded(config)
    model = settings.evaluation.model
    assert (model.rate, model.batch_size, model.max_wait_s) == (0.3, 4, 0.1)
    assert (model.max_queue, model.budget, model.max_delay_s) == (9, 0.5, 2.0)
    assert (prometheus(settings).max_routes, prometheus(settings).routes) == (5, ["/ask"])
    exported = otel(settings)
    assert (exported.endpoint, exported.service_name, exported.timeout_s) == (
        "http://127.0.0.1:4318", "evals", 3.0,
    )  # fmt: skip
    jsonl = JsonlSink.options_from(settings)
    assert isinstance(jsonl, JsonlSink.Options) and jsonl.path == Path("/tmp/results.jsonl")
    sets = RegressionSink.options_from(settings)
    assert isinstance(sets, RegressionSink.Options)
    assert (sets.directory, sets.max_bytes) == (Path("/tmp/sets"), 4096)
    # One message per old key, at its line, naming the new key.
    assert f"{config}:1: results_jsonl is deprecated: use sinks.jsonl.path" in messages
    assert f"{config}:4: prometheus.max_routes is deprecated: use sinks.prometheus.max_routes" in (
        messages
    )
    assert f"{config}:6: otel_export.timeout_s is deprecated: use sinks.otel.timeout_s" in messages
    assert f"{config}:11: evaluation.model_rate is deprecated: use evaluation.model.rate" in (
        messages
    )
    assert len(messages) == 14


def test_old_keys_in_a_toml_file(tmp_path: Path) -> None:
    config = tmp_path / "old.toml"
    config.write_text("[evaluation]\nmodel_rate = 0.4\n[prometheus]\nmax_services = 3\n")
    settings, messages = loaded(config)
    assert settings.evaluation.model.rate == 0.4 and prometheus(settings).max_services == 3
    assert len(messages) == 2 and all(m.startswith(str(config)) for m in messages)


def test_old_variables_read_at_their_new_places(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "RAGPULSE_PROMETHEUS__MAX_ROUTES": "5",
        "RAGPULSE_PROMETHEUS__ROUTES": '["/ask", "/search"]',  # a list as JSON, as it was
        "RAGPULSE_EVALUATION__MODEL_RATE": "0.3",
        "RAGPULSE_EVALUATION__MODEL_BUDGET": "0.5",
        "RAGPULSE_OTEL_EXPORT": '{"timeout_s": 3, "spans": false}',  # a whole section
        "RAGPULSE_REGRESSION__REDACTION__EMAILS": "false",
        "RAGPULSE_SERVICE_NAME": "evals",
    }.items():
        monkeypatch.setenv(name, value)
    check_environment(Settings)  # not refused as unknown
    settings, messages = loaded()
    assert (settings.evaluation.model.rate, settings.evaluation.model.budget) == (0.3, 0.5)
    assert prometheus(settings).max_routes == 5
    assert prometheus(settings).routes == ["/ask", "/search"]
    exported = otel(settings)
    assert (exported.timeout_s, exported.spans, exported.service_name) == (3.0, False, "evals")
    sets = RegressionSink.options_from(settings)
    assert isinstance(sets, RegressionSink.Options)
    assert sets.redaction is not None and not sets.redaction.emails
    # Each names the new key and its variable.
    assert (
        "RAGPULSE_PROMETHEUS__MAX_ROUTES: prometheus.max_routes is deprecated: use "
        "sinks.prometheus.max_routes (RAGPULSE_SINKS__PROMETHEUS__MAX_ROUTES)"
    ) in messages
    assert (
        "RAGPULSE_EVALUATION__MODEL_RATE: evaluation.model_rate is deprecated: use "
        "evaluation.model.rate (RAGPULSE_EVALUATION__MODEL__RATE)"
    ) in messages
    assert (
        "RAGPULSE_REGRESSION__REDACTION__EMAILS: regression.redaction.emails is deprecated: "
        "use sinks.regression.redaction.emails (RAGPULSE_SINKS__REGRESSION__REDACTION__EMAILS)"
    ) in messages
    assert len(messages) == 8  # RAGPULSE_OTEL_EXPORT holds two keys


def test_the_new_variables_of_a_sinks_options(monkeypatch: pytest.MonkeyPatch) -> None:
    """A sink's option from the environment is text; a list or a mapping is read as JSON."""
    monkeypatch.setenv("RAGPULSE_SINKS__PROMETHEUS__ROUTES", '["/ask"]')
    monkeypatch.setenv("RAGPULSE_SINKS__PROMETHEUS__MAX_ROUTES", "4")
    monkeypatch.setenv("RAGPULSE_SINKS__OTEL__HEADERS", '{"x-tenant": "a"}')
    monkeypatch.setenv("RAGPULSE_EVALUATION__MODEL__RATE", "0.2")
    settings, messages = loaded()
    assert messages == []
    assert (prometheus(settings).routes, prometheus(settings).max_routes) == (["/ask"], 4)
    assert otel(settings).headers == {"x-tenant": "a"}
    assert settings.evaluation.model.rate == 0.2


def test_old_keys_as_flags_and_the_flags_set_the_new_keys(tmp_path: Path) -> None:
    # Keyword arguments of load_settings are the flags' source: old names still read.
    settings, messages = loaded(
        results_jsonl=tmp_path / "r.jsonl", evaluation={"model_max_queue": 3}
    )
    assert settings.evaluation.model.max_queue == 3
    assert settings.sinks["jsonl"]["path"] == tmp_path / "r.jsonl"
    assert messages == [
        "--results-jsonl: results_jsonl is deprecated: use sinks.jsonl.path",
        "--model-max-queue: evaluation.model_max_queue is deprecated: use "
        "evaluation.model.max_queue",
    ]
    # serve's flags keep their names and set the new keys, without a message.
    args = build_parser().parse_args(
        ["serve", "--results-jsonl", str(tmp_path / "s.jsonl"),
         "--otlp-export-endpoint", "http://127.0.0.1:4318"]
    )  # fmt: skip
    settings, messages = loaded(**serve_overrides(args))
    assert messages == []
    assert otel(settings).endpoint == "http://127.0.0.1:4318"
    assert settings.sinks["jsonl"] == {"path": tmp_path / "s.jsonl"}


def test_old_and_new_key_in_one_source_the_new_one_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "both.yaml"
    config.write_text(
        "prometheus: {max_routes: 5, max_services: 2}\n"
        "sinks: {prometheus: {max_routes: 7}}\n"
        "evaluation: {model_rate: 0.3, model: {rate: 0.6}}\n"
    )
    settings, messages = loaded(config)
    assert (prometheus(settings).max_routes, prometheus(settings).max_services) == (7, 2)
    assert settings.evaluation.model.rate == 0.6
    assert (
        f"{config}:1: prometheus.max_routes is deprecated and was ignored: "
        "sinks.prometheus.max_routes is set as well and wins; remove the old key"
    ) in messages
    assert f"{config}:1: prometheus.max_services is deprecated: use " in " ".join(messages)
    assert any("evaluation.model_rate is deprecated and was ignored" in m for m in messages)

    monkeypatch.setenv("RAGPULSE_EVALUATION__MODEL_RATE", "0.1")
    monkeypatch.setenv("RAGPULSE_EVALUATION__MODEL__RATE", "0.2")
    settings, messages = loaded()
    assert settings.evaluation.model.rate == 0.2
    assert messages == [
        "RAGPULSE_EVALUATION__MODEL_RATE: evaluation.model_rate is deprecated and was ignored: "
        "evaluation.model.rate (RAGPULSE_EVALUATION__MODEL__RATE) is set as well and wins; "
        "remove the old key"
    ]

    settings, messages = loaded(evaluation={"model_rate": 0.1, "model": {"rate": 0.4}})
    assert settings.evaluation.model.rate == 0.4 and "was ignored" in messages[0]


def test_between_sources_the_usual_order_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An old key is its source's: a variable still wins over the file, whichever of the
    two uses the old name."""
    config = tmp_path / "new.yaml"
    config.write_text("sinks: {prometheus: {max_routes: 7}}\nevaluation: {model_rate: 0.3}\n")
    monkeypatch.setenv("RAGPULSE_PROMETHEUS__MAX_ROUTES", "5")
    monkeypatch.setenv("RAGPULSE_EVALUATION__MODEL__RATE", "0.6")
    settings, _ = loaded(config)
    assert prometheus(settings).max_routes == 5
    assert settings.evaluation.model.rate == 0.6


def test_a_bad_value_under_an_old_key_names_where_it_was_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("assembly: {grace_s: 1}\nprometheus:\n  max_routes: 0\n")
    monkeypatch.setenv("RAGPULSE_EVALUATION__MODEL_RATE", "abc")
    with pytest.raises(ConfigError) as raised, warnings.catch_warnings():
        warnings.simplefilter("ignore", RagpulseDeprecationWarning)
        load_settings(config, checks=[plugin_problems])
    report = " ".join(str(raised.value).split())
    assert "2 problems in the settings" in report
    assert "RAGPULSE_EVALUATION__MODEL_RATE: evaluation.model.rate: input should be a valid" in (
        report
    )
    assert f"{config}:3: sinks.prometheus.max_routes: input should be greater than" in report


def test_config_check_notes_and_config_show_origins(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "old.yaml"
    config.write_text("metrics_port: 9465\nprometheus: {max_routes: 5}\n")
    assert main(["config", "check", str(config)]) == 0
    out, err = capsys.readouterr()
    assert out == f"{config}: ok\n"  # notes, not errors: the file is valid
    assert (
        f"note: {config}:2: prometheus.max_routes is deprecated: use sinks.prometheus.max_routes"
        in err
    )
    with pytest.warns(RagpulseDeprecationWarning):  # show says it as serve does
        assert main(["config", "show", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    rows = {line.split("│")[1].strip(): line for line in out.splitlines() if line.count("│") > 2}
    row = " ".join(rows["sinks.prometheus.max_routes"].split())
    assert "5" in row and "old.yaml:2" in row and "prometheus.max_routes" in row
    assert "default" in rows["sinks.prometheus.max_services"]
    assert "prometheus.max_routes" not in rows  # the old key is shown only as the origin


def test_regression_list_reads_the_directory_from_an_old_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "sets").mkdir()
    config = tmp_path / "old.yaml"
    config.write_text(f"regression: {{directory: {tmp_path / 'sets'}}}\n")
    with pytest.warns(RagpulseDeprecationWarning, match="use sinks.regression.directory"):
        assert main(["regression", "list", "--config", str(config)]) == 0
    assert "no sets yet" in capsys.readouterr().out


def test_moving_is_pure_and_the_table_names_real_places() -> None:
    given = {"prometheus": {"max_routes": 5}, "evaluation": {"model_rate": 0.1, "batch_size": 3}}
    moved, moves = move_keys(given)
    assert given["prometheus"] == {"max_routes": 5}  # not changed in place
    assert moved == {
        "evaluation": {"batch_size": 3, "model": {"rate": 0.1}},
        "sinks": {"prometheus": {"max_routes": 5}},
    }
    assert [(m.old, m.new, m.ignored) for m in moves] == [
        (("prometheus", "max_routes"), ("sinks", "prometheus", "max_routes"), False),
        (("evaluation", "model_rate"), ("evaluation", "model", "rate"), False),
    ]
    for new in DEPRECATED_KEYS.values():  # each new place exists (a sink, its option, ...)
        first, *rest = new.split(".")
        if first == "sinks":
            assert all(part in sink_class(rest[0]).Options.model_fields for part in rest[1:])
        else:
            assert rest[-1] in EvaluationSettings.model_fields[rest[0]].annotation.model_fields


def test_the_old_class_names_still_import() -> None:
    with pytest.warns(RagpulseDeprecationWarning, match="PrometheusSink.Options"):
        from ragpulse.config import PrometheusSettings
    assert PrometheusSettings is PrometheusSink.Options
    with pytest.warns(RagpulseDeprecationWarning, match="ragpulse.exporters.regression"):
        from ragpulse.config import RegressionSetRule
    assert RegressionSetRule(kind="random", rate=0.5).rate == 0.5
