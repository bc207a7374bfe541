"""Module paths of earlier releases, still importable with a deprecation warning.

The evaluators moved to ``ragpulse.evaluators.<metric>.<method>`` (the name users type),
the sinks' shared machinery to ``ragpulse.exporters.support``, the results format to
:mod:`ragpulse.results` and the app-side Kafka exporter to the SDK. A plug-in written
against an old path keeps working: importing it warns once
(:class:`~ragpulse.errors.RagpulseDeprecationWarning`) naming where its names live now,
and each name is read from there. Installed by ``ragpulse/__init__.py``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Sequence
from typing import Any

from ragpulse.errors import deprecated

_E = "ragpulse.evaluators."
_X = "ragpulse.exporters."

MOVED: dict[str, tuple[str, ...]] = {
    _E + "lexical": (
        _E + "faithfulness.lexical",
        _E + "context_relevance.lexical",
        _E + "answer_relevance.lexical",
        _E + "text.overlap",
    ),
    _E + "embedding": (
        _E + "faithfulness.embedding",
        _E + "context_relevance.embedding",
        _E + "answer_relevance.embedding",
        _E + "models.embedding_metric",
    ),
    _E + "judge_relevance": (_E + "context_relevance.llm_judge", _E + "answer_relevance.llm_judge"),
    _E + "judge_correctness": (
        _E + "answer_correctness.llm_judge",
        _E + "answer_compliance.llm_judge",
        _E + "answer_completeness.llm_judge",
        _E + "judge.reference",
    ),
    _E + "judge_faithfulness": (_E + "faithfulness.llm_judge",),
    _E + "judge_injection": (_E + "injection.llm_judge",),
    _E + "injection_rules": (_E + "injection.rules",),
    _E + "injection_classifier": (_E + "injection.classifier",),
    _E + "injection_probe": (_E + "injection.probe",),
    _E + "refusal_rules": (_E + "refusal.rules",),
    _E + "question_likelihood": (_E + "context_relevance.perplexity",),
    _E + "reward": (_E + "answer_reward.reward_model",),
    _E + "faithfulness_probe": (_E + "faithfulness.probe",),
    _E + "nli_faithfulness": (_E + "faithfulness.nli",),
    _E + "span_faithfulness": (_E + "faithfulness.spans",),
    _E + "cross_encoder_relevance": (_E + "context_relevance.cross_encoder",),
    **{
        f"{_E}injection.{sub}": (f"{_E}injection_engine.{sub}",)
        for sub in (
            "engine",
            "findings",
            "gate",
            "normalize",
            "payloads",
            "planted",
            "rule",
            "rules_content",
            "rules_override",
            "scan",
            "vocabulary",
        )
    },
    _X + "otel_eval": (_X + "otel", _X + "support.results"),
    _X + "delivery": (_X + "support.delivery", _X + "support.results"),
    _X + "eval_targets": (_X + "support.targets",),
    _X + "prometheus_series": (_X + "support.prometheus_series",),
    _X + "kafka_spans": ("ragpulse.sdk.kafka_exporter",),
}
"""old module -> the modules its names live in now (searched in this order)."""


def _names(target: str, names: str) -> dict[str, str]:
    return dict.fromkeys(names.split(), target)


MOVED_NAMES: dict[str, dict[str, str]] = {
    _X + "jsonl": _names(
        "ragpulse.results", "result_dict results_json record_line WrittenResult UPDATE_FIELDS"
    ),
    # Modules of earlier releases whose names are packages now (the metric's folder).
    _E + "injection_followed": _names(_E + "injection_followed.rules", "InjectionFollowed"),
    _E + "answer_correctness": _names(
        _E + "answer_correctness.token_overlap", "TokenRecall TokenF1"
    ),
    _E + "text": _names(
        _E + "text.analyses",
        "ANALYSES_KEPT TextAnalyses TextView content_token_set content_tokens normalize sentences",
    ),
    # The sinks' settings sections are the sinks' Options now (sinks.<name>).
    "ragpulse.config": {
        "PrometheusSettings": _X + "prometheus:PrometheusSink.Options",
        "OtelExportSettings": _X + "otel:OtelEvaluationSink.Options",
        "RegressionSettings": _X + "regression:RegressionSink.Options",
        "RegressionSetRule": _X + "regression",
    },
    _E + "injection": _names(
        _E + "injection_engine",
        "DELIMITER DOC_COMMAND ENCODED EXCERPT_CHARS EXFIL EXTRACTION FAMILIES HIDDEN HIJACK "
        "OVERRIDE RULES TOOL Rule TextScan scan_text",
    ),
}
"""module -> names that left it for another module (the module itself stays, or is a
package of the same name now: its ``__getattr__`` calls :func:`moved_name`); a target
``module:Name.Inner`` names a class inside the module (a sink's ``Options``)."""


def name_from(targets: Sequence[str], old: str, name: str) -> Any:
    """``name`` as the first of ``targets`` that defines it has it."""
    for target in targets:
        module = importlib.import_module(target)
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {old!r} has no attribute {name!r}")


def moved_name(module: str, name: str) -> Any:
    """For a module's ``__getattr__``: a name that moved out of it, with a warning."""
    target = MOVED_NAMES.get(module, {}).get(name)
    if target is None:
        raise AttributeError(f"module {module!r} has no attribute {name!r}")
    where, _, inner = target.partition(":")
    if inner:
        deprecated(f"{module}.{name} moved: it is {where}.{inner}", stacklevel=3)
    else:
        deprecated(f"{module}.{name} moved: import it from {target}", stacklevel=3)
    found: Any = importlib.import_module(where)
    for part in (inner or name).split("."):
        found = getattr(found, part)
    return found


class _Alias(importlib.abc.Loader):
    def __init__(self, targets: tuple[str, ...]) -> None:
        self.targets = targets

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = types.ModuleType(spec.name, f"Moved: see {', '.join(self.targets)}.")
        targets, old = self.targets, spec.name

        def __getattr__(name: str) -> Any:
            return name_from(targets, old, name)

        module.__getattr__ = __getattr__  # type: ignore[method-assign]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        deprecated(
            f"{module.__name__} is deprecated: import from {' or '.join(self.targets)}",
            stacklevel=8,  # past importlib's frames, to the import statement
        )


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds the old paths of :data:`MOVED` (after every real finder has looked)."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None = None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        targets = MOVED.get(fullname)
        if targets is None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _Alias(targets))


def install() -> None:
    """Add the finder once (importing ragpulse twice, or reloading it, adds nothing)."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
