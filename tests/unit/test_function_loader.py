"""The one loader of ``module:function`` names (:mod:`ragpulse.function_loader`): the
app's retriever, generator and pipeline for ``ragpulse eval`` and ``@ragpulse.evaluator``
functions. Every error names where the name was given (the flag) and suggests the
closest attribute. The modules are real files imported from the current directory."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from ragpulse.errors import ConfigError
from ragpulse.function_evaluator import load
from ragpulse.function_loader import is_spec, load_function, resolve, spec_problem

APP = textwrap.dedent(
    """
    import ragpulse

    VALUE = 3

    def generate(question, documents):
        return "an answer"

    class Client:
        def ask(self, question):
            return question

    client = Client()

    @ragpulse.evaluator(metric="shout")
    def shout(record):
        return 0.0
    """
)


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """``loader_app.py`` (and a module that fails on import) in the current directory."""
    (tmp_path / "loader_app.py").write_text(APP)
    (tmp_path / "loader_broken.py").write_text("import os\nos.no_such_thing\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))  # restored after the test
    yield tmp_path
    for name in ("loader_app", "loader_broken"):
        sys.modules.pop(name, None)


def test_a_function_a_method_and_an_evaluator_load(app: Path) -> None:
    assert load_function("loader_app:generate", "--generator")("q", []) == "an answer"
    assert load_function("loader_app:client.ask", "--replay")("q") == "q"
    assert load("loader_app:shout")().name == "shout/shout"


@pytest.mark.parametrize(
    ("spec", "flag", "message"),
    [
        ("loader_app:generat", "--generator",
         "--generator loader_app:generat: module loader_app has no attribute 'generat' "
         "(did you mean generate?)"),
        ("loader_app:llm", "--retriever",
         "--retriever loader_app:llm: module loader_app has no attribute 'llm'"),
        ("loader_app:client.askk", "--replay",
         "--replay loader_app:client.askk: loader_app:client has no attribute 'askk' "
         "(did you mean ask?)"),
        ("loader_app:VALUE", "--control", "--control loader_app:VALUE: a int, not a function"),
        ("loader_broken:f", "--generator",
         "--generator loader_broken:f: cannot import module loader_broken: AttributeError: "),
        ("loader_nowhere:f", "--replay",
         "--replay loader_nowhere:f: cannot import module loader_nowhere: "
         "ModuleNotFoundError: No module named 'loader_nowhere'"),
    ],
)  # fmt: skip
def test_an_error_names_the_flag_and_suggests(
    app: Path, spec: str, flag: str, message: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_function(spec, flag)
    assert str(err.value).startswith(message), str(err.value)


@pytest.mark.parametrize("spec", ["loader_app", "loader_app:", ":generate", "loader_app:a..b"])
def test_a_malformed_name_is_refused_before_any_import(spec: str) -> None:
    assert spec_problem(spec, "--generator") == f"--generator takes module:function, got {spec!r}"
    with pytest.raises(ConfigError, match="takes module:function"):
        resolve(spec, "--generator")


def test_one_definition_of_a_function_name() -> None:
    """A registered plug-in name never holds the separator; a function name always does
    (whether it is well formed is the loader's to say, with the flag)."""
    assert is_spec("my_metrics:mentions_price") and is_spec("loader_app:")
    assert not is_spec("faithfulness/lexical") and not is_spec("recall@5")


def test_an_evaluator_error_comes_from_the_same_loader(app: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load("loader_app:shoutt")
    assert str(err.value) == (
        "evaluator loader_app:shoutt: module loader_app has no attribute 'shoutt' "
        "(did you mean shout?)"
    )
    with pytest.raises(ConfigError, match="not decorated"):
        load("loader_app:generate")


@pytest.mark.parametrize(
    ("flag", "extra"), [("--generator", ["--conditions", "retrieved"]), ("--replay", [])]
)
def test_the_command_names_the_flag_the_user_passed(app: Path, flag: str, extra: list[str]) -> None:
    """The harness used to say ``--replay`` for a bad ``--generator``."""
    (app / "set.jsonl").write_text('{"question": "q?", "contexts": ["c"], "answer": "a"}\n')
    done = subprocess.run(
        [sys.executable, "-m", "ragpulse.cli", "eval", "set.jsonl", "-o", "out.jsonl",
         flag, "loader_app:llm", *extra, "--metrics", "faithfulness/lexical"],
        capture_output=True, text=True, timeout=120, cwd=app, check=False,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    text = " ".join((done.stdout + done.stderr).split())
    assert f"{flag} loader_app:llm: module loader_app has no attribute 'llm'" in text
