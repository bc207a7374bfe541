"""``@ragpulse.evaluator`` on a plain function, named as ``module:function``: no package,
the built-ins' contract (never raises, options, shared context), in ``eval`` and ``serve``."""

from __future__ import annotations

import json
import sys
import textwrap
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from support.helpers import new_trace_id, post_rag_trace, start_serve, stop_process
from support.kafka_env import free_port, wait_until

import ragpulse
from ragpulse.cli import main
from ragpulse.config import EvaluationSettings
from ragpulse.errors import ConfigError
from ragpulse.evaluation import load_evaluators_safely
from ragpulse.plugin_context import PluginContext
from ragpulse.plugins import load_evaluators, resolve_evaluator_names
from ragpulse.record import Direction, RagRecord

MODULE = textwrap.dedent(
    """
    import ragpulse
    from ragpulse.options import PluginOptions
    from ragpulse.record import EvalResult


    class PriceOptions(PluginOptions):
        currency: str = "$"


    @ragpulse.evaluator(metric="mentions_price", options=PriceOptions)
    def mentions_price(record, options):
        if not record.answer:
            return None
        return options.currency in record.answer


    @ragpulse.evaluator(metric="shouting", direction="lower_is_better", tier="model")
    def shouting(record, context):
        calls = context.shared("shouting-calls", lambda: [])
        calls.append(record.trace_id)
        if record.answer == "boom":
            raise RuntimeError("boom")
        if record.answer == "seven":
            return 7.0
        if record.answer == "label":
            return EvalResult(metric="x", method="y", score=0.25, label="quiet")
        letters = [c for c in record.answer if c.isalpha()] or ["a"]
        return sum(c.isupper() for c in letters) / len(letters)


    def undecorated(record):
        return 1.0
    """
)


@pytest.fixture
def metrics_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    (tmp_path / "my_metrics.py").write_text(MODULE)
    monkeypatch.chdir(tmp_path)  # importable from the current directory, as documented
    yield tmp_path
    sys.modules.pop("my_metrics", None)


def rows(path: Path, answers: list[str]) -> Path:
    path.write_text("\n".join(
        json.dumps({"question": "Price?", "contexts": ["It costs $6."], "answer": a})
        for a in answers
    ))  # fmt: skip
    return path


def test_eval_runs_plain_functions_with_options(metrics_module: Path) -> None:
    src = rows(
        metrics_module / "in.jsonl", ["It costs $6.", "SIX EUR", "boom", "seven", "label", ""]
    )
    out = metrics_module / "out.jsonl"
    config = metrics_module / "ragpulse.yaml"
    config.write_text("evaluation:\n  options:\n    my_metrics:mentions_price: {currency: EUR}\n")
    chosen = "my_metrics:mentions_price,my_metrics:shouting,faithfulness/lexical"
    code = main(["eval", str(src), "-o", str(out), "--config", str(config), "--metrics", chosen])
    assert code == 0
    results = [
        {f"{r['metric']}/{r['method']}": r for r in json.loads(line)["results"]}
        for line in out.read_text().splitlines()
    ]
    price = [r["mentions_price/mentions_price"] for r in results]
    assert [p.get("score") for p in price] == [0.0, 1.0, 0.0, 0.0, 0.0, None]  # EUR, not $
    assert price[-1]["label"] == "not_applicable"
    shout = [r["shouting/shouting"] for r in results]
    assert shout[0]["score"] == pytest.approx(1 / 7) and shout[0]["direction"] == "lower_is_better"
    assert shout[2]["label"] == "error" and "boom" in shout[2]["error"]  # never raises
    assert shout[3]["label"] == "error" and "[0, 1]" in shout[3]["error"]
    assert (shout[4]["score"], shout[4]["label"]) == (0.25, "quiet")  # an EvalResult, renamed


def test_contract_options_context_and_threads(metrics_module: Path) -> None:
    settings = EvaluationSettings(options={"my_metrics:mentions_price": {"currency": "EUR"}})
    names = resolve_evaluator_names(["my_metrics:mentions_price", "my_metrics:shouting"], settings)
    assert names == ["my_metrics:mentions_price", "my_metrics:shouting"]
    context = PluginContext()
    price, shout = load_evaluators_safely(load_evaluators(names, settings), context)
    assert (price.name, shout.name) == ("mentions_price/mentions_price", "shouting/shouting")
    assert shout.tier.value == "model" and shout.direction is Direction.LOWER_IS_BETTER
    records = [RagRecord(trace_id=f"{i:032x}", answer=f"Answer {i} in EUR") for i in range(40)]
    alone = [r.score for r in shout.evaluate(records)]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda r: shout.evaluate([r])[0].score, records))
    assert together == alone
    assert len(context.shared("shouting-calls", list)) == 80  # one shared object, all calls
    assert [r.score for r in price.evaluate(records[:2])] == [1.0, 1.0]
    with pytest.raises(ConfigError, match="currency"):
        load_evaluators(
            ["my_metrics:mentions_price"],
            EvaluationSettings(options={"my_metrics:mentions_price": {"currncy": "EUR"}}),
        )
    with pytest.raises(ConfigError, match="not decorated"):
        resolve_evaluator_names(["my_metrics:undecorated"])
    with pytest.raises(ConfigError, match="cannot import"):
        resolve_evaluator_names(["no_such_module:f"])


def test_the_decorated_function_is_still_a_function() -> None:
    @ragpulse.evaluator(metric="length")
    def length(record: RagRecord) -> float:
        return min(1.0, len(record.answer) / 100)

    assert length(RagRecord(answer="x" * 50)) == 0.5
    with pytest.raises(ConfigError, match="async"):

        @ragpulse.evaluator(metric="slow")
        async def slow(record: RagRecord) -> float:
            return 1.0


@pytest.mark.integration
def test_serve_runs_a_plain_function(metrics_module: Path) -> None:
    results = metrics_module / "results.jsonl"
    config = metrics_module / "serve.yaml"
    config.write_text(
        "evaluation:\n  evaluators: [faithfulness/lexical, my_metrics:mentions_price]\n"
        f"sinks: {{jsonl: {{path: {json.dumps(str(results))}}}}}\n"
    )
    port = free_port()
    proc, _ = start_serve(
        "--config", str(config), "--otlp-http-port", str(port),
        env={"PYTHONPATH": str(metrics_module)},
    )  # fmt: skip
    try:
        trace_id = new_trace_id()
        post_rag_trace(port, trace_id, "Price?", ["It costs $6."], "It costs $6.")
        wait_until(lambda: results.exists() and trace_id in results.read_text(), 120,
                   "serve wrote no result for the trace")  # fmt: skip
    finally:
        stop_process(proc)
    [line] = [json.loads(x) for x in results.read_text().splitlines()]
    named = {f"{r['metric']}/{r['method']}": r for r in line["results"]}
    assert named["mentions_price/mentions_price"]["score"] == 1.0
