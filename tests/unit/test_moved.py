"""The public plug-in contracts, and the names of earlier releases on their deprecation path.

Third-party plug-ins written against the old names (``_score``, ``name()``, the old module
paths) keep working and say what to rename; the contracts themselves are checked when a
class is defined.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

import pytest

from ragpulse.errors import RagpulseDeprecationWarning
from ragpulse.evaluators.base import Evaluator
from ragpulse.exporters.base import Sink
from ragpulse.moved import MOVED
from ragpulse.record import EvalResult, RagRecord

RECORD = RagRecord(question="q", answer="a")


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_module_path_imports_with_a_warning_naming_the_new_one(old: str) -> None:
    sys.modules.pop(old, None)
    with pytest.warns(RagpulseDeprecationWarning, match=MOVED[old][0].replace(".", r"\.")):
        module = importlib.import_module(old)
    new = importlib.import_module(MOVED[old][0])
    public = [n for n in vars(new) if not n.startswith("_") and n != "annotations"]
    for name in public[:5]:
        assert getattr(module, name) is getattr(new, name)
    with pytest.raises(AttributeError):
        module.no_such_name  # noqa: B018


def test_split_modules_find_each_name_where_it_lives_now() -> None:
    from ragpulse.evaluators.answer_relevance.lexical import LexicalAnswerRelevance
    from ragpulse.evaluators.judge.reference import ReferenceJudge

    for old in ("ragpulse.evaluators.lexical", "ragpulse.evaluators.judge_correctness"):
        sys.modules.pop(old, None)
    with pytest.warns(RagpulseDeprecationWarning):
        lexical = importlib.import_module("ragpulse.evaluators.lexical")
        judges = importlib.import_module("ragpulse.evaluators.judge_correctness")
    assert lexical.LexicalAnswerRelevance is LexicalAnswerRelevance
    assert judges.ReferenceJudge is ReferenceJudge


def test_results_format_names_moved_out_of_the_jsonl_sink() -> None:
    from ragpulse import results
    from ragpulse.exporters import jsonl

    with pytest.warns(RagpulseDeprecationWarning, match=r"import it from ragpulse\.results"):
        assert jsonl.result_dict is results.result_dict


@pytest.mark.parametrize(
    ("old", "name", "new"),
    [
        ("ragpulse.evaluators.injection_followed", "InjectionFollowed", "injection_followed.rules"),
        ("ragpulse.evaluators.answer_correctness", "TokenF1", "answer_correctness.token_overlap"),
        ("ragpulse.evaluators.text", "TextAnalyses", "text.analyses"),
        ("ragpulse.evaluators.injection", "scan_text", "injection_engine"),
    ],
)
def test_a_module_that_became_a_package_still_gives_its_names(
    old: str, name: str, new: str
) -> None:
    package = importlib.import_module(old)
    with pytest.warns(RagpulseDeprecationWarning, match=new.replace(".", r"\.")):
        value = getattr(package, name)
    assert value is getattr(importlib.import_module(f"ragpulse.evaluators.{new}"), name)


def test_an_evaluator_with_the_old_hook_works_and_says_to_rename_it() -> None:
    with pytest.warns(RagpulseDeprecationWarning, match=r"\._score is deprecated: name it score"):

        class Old(Evaluator):
            metric, method = "old", "hook"

            def _score(self, record: RagRecord) -> EvalResult:
                return self.result(0.5)

    assert Old().evaluate([RECORD])[0].score == 0.5
    with pytest.warns(RagpulseDeprecationWarning, match=r"Evaluator\.name\(\) is deprecated"):
        assert Old.name() == "old/hook"  # type: ignore[operator]
    assert Old.name == "old/hook"


def test_an_evaluator_without_score_or_score_batch_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match=r"must implement score\(record\) or score_batch"):

        class Nothing(Evaluator):
            metric, method = "nothing", "here"


def test_a_base_without_a_name_need_not_score() -> None:
    class Base(Evaluator):
        metric = "family"  # no method: a base for others

    class Batch(Base):
        method = "batch"

        def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
            return [self.result(1.0) for _ in records]

    assert Batch.name == "family/batch"
    assert Batch().evaluate([RECORD, RECORD])[1].score == 1.0


def test_a_named_sink_without_export_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match=r"sink 'mute'.*must implement export"):

        class Mute(Sink):
            name = "mute"


def test_every_sink_keeps_its_options() -> None:
    from ragpulse.plugins import sink_classes

    for name, cls in sink_classes().items():
        assert issubclass(cls.Options, object)
        assert "force_flush" in dir(cls), name
    from ragpulse.exporters.jsonl import JsonlSink
    from ragpulse.exporters.memory import InMemorySink

    assert isinstance(InMemorySink().options, InMemorySink.Options)
    assert JsonlSink(sys.stdout).options.path is None
