"""The evaluator contract and the shared work every evaluator gets for free."""

from __future__ import annotations

import logging
import time
from abc import ABC
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from ragpulse.errors import deprecated
from ragpulse.evaluators.text.analyses import TextAnalyses
from ragpulse.plugin_context import PluginContext, PluginOptions, validate_options
from ragpulse.record import ConversationRecord, Direction, EvalResult, RagRecord

if TYPE_CHECKING:
    from ragpulse.config import EvaluationSettings

log = logging.getLogger(__name__)
# EvalResult's own validator, called on a dict of the fields: the same checks and the same
# object as ``EvalResult(**fields)`` without the keyword-argument wrapper (0.8 instead of
# 1.3 us; the cheap tier builds several results per trace).
_validated_result = EvalResult.__pydantic_validator__.validate_python

TEXT_ANALYSES = "ragpulse/text-analyses"
"""The plug-in context key of the :class:`TextAnalyses` every evaluator shares."""


RECORD_KINDS = frozenset({"rag", "agent", "retrieval"})
"""What a record can be (:attr:`~ragpulse.record.RagRecord.kind`)."""
ANSWERED = frozenset({"rag", "agent"})
"""The records with an answer: what an answer metric scores (not a retrieval alone)."""
AGENT_TURNS = frozenset({"agent"})
"""Agent turns only: what the agent signals score."""


class Scoring(Protocol):
    """A batch being scored (:meth:`Evaluator.start`)."""

    def results(self) -> list[EvalResult]:
        """The i-th record's result at index i; blocks until they are ready, never raises."""
        ...


class Scored:
    """A batch scored already (what :meth:`Evaluator.start` returns by default)."""

    def __init__(self, results: list[EvalResult]) -> None:
        self._results = results

    def results(self) -> list[EvalResult]:
        return self._results


class Tier(StrEnum):
    """Cost class of an evaluator; sampling decides per tier."""

    CHEAP = "cheap"  # lexical / rules: microseconds, all traffic
    MODEL = "model"  # local CPU models, on a sample
    JUDGE = "judge"  # LLM judges, on a budgeted sample


class _Name(str):
    """An evaluator's ``metric/method`` name. Calling it (``cls.name``, the form of earlier
    releases) still works, with a deprecation warning."""

    def __call__(self) -> str:
        deprecated(f"Evaluator.name() is deprecated: read the attribute Evaluator.name ({self})")
        return str(self)


_LEGACY_HOOKS = {"_score": "score", "_score_batch": "score_batch"}


class Evaluator(ABC):
    """Turns records into one :class:`EvalResult` each.

    A plug-in is one subclass in one file plus one entry-point line:

    - ``metric``, ``method``, ``tier`` and ``direction`` (which way is good); ``name``
      (``metric/method``) is set from the first two;
    - ``class Options(PluginOptions)``: its settings (``evaluation.options.<name>``),
      validated when the settings load; read them as ``self.options``;
    - :meth:`load` receives the :class:`PluginContext` (settings, metrics, shared
      models and clients) once, before the first batch;
    - :meth:`score` (one record) or :meth:`score_batch` (a batch): one of the two is
      required, checked when the class is defined;
    - :attr:`texts` gives each text's analysis (tokens, sentences, normalised form, or
      anything derived once per text), shared with the other evaluators.

    Contract: :meth:`evaluate` is called from the collector's evaluation worker thread
    (never from the intake path), may block, and never raises: whatever ``score`` or
    ``score_batch`` raises becomes that record's error result. Subclasses hold no
    per-call state, so one instance may score concurrently from several threads.
    """

    metric: ClassVar[str]
    method: ClassVar[str]
    name: ClassVar[str]
    """``metric/method``, the name users type; set when a class gives both."""
    tier: ClassVar[Tier] = Tier.CHEAP
    direction: ClassVar[Direction] = Direction.HIGHER_IS_BETTER
    default_enabled: ClassVar[bool] = True
    """Selected when the configuration names no evaluators (and :meth:`missing` is None)."""
    applies_to: ClassVar[frozenset[str]] = RECORD_KINDS
    """The record kinds it scores (:data:`ANSWERED` for an answer metric, :data:`AGENT_TURNS`
    for an agent signal); records of another kind get no result of it at all."""
    requires_reference: ClassVar[bool] = False
    """Scores against a test-set row's :class:`~ragpulse.record.Reference` (recall@k, answer
    correctness, behaviour): never on by default in ``serve`` (live records carry none);
    ``ragpulse eval`` adds them when its rows carry references."""

    class Options(PluginOptions):
        """No options."""

    options: PluginOptions
    _texts: TextAnalyses | None = None

    def __init__(
        self, options: PluginOptions | Mapping[str, Any] | None = None, **overrides: Any
    ) -> None:
        """``Options`` from a model, a mapping, keyword arguments, or both (keywords win)."""
        if isinstance(options, self.Options) and not overrides:
            self.options = options
        else:
            raw = options.model_dump() if isinstance(options, PluginOptions) else options
            self.options = self.validate_options({**(raw or {}), **overrides})
        self.context: PluginContext | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for old, new in _LEGACY_HOOKS.items():
            if old in cls.__dict__ and new not in cls.__dict__:
                deprecated(
                    f"{cls.__module__}.{cls.__qualname__}.{old} is deprecated: name it {new} "
                    f"(ragpulse.evaluators.base.Evaluator.{new})",
                    stacklevel=2,
                )
                setattr(cls, new, cls.__dict__[old])
        metric, method = getattr(cls, "metric", None), getattr(cls, "method", None)
        if metric is None or method is None:
            return  # a base for others (JudgeEvaluator, LexicalEvaluator, ...)
        cls.name = _Name(f"{metric}/{method}")
        if cls.score is Evaluator.score and cls.score_batch is Evaluator.score_batch:
            raise TypeError(
                f"{cls.__qualname__} ({cls.name}) must implement score(record) or "
                "score_batch(records)"
            )

    @classmethod
    def validate_options(cls, raw: Mapping[str, Any]) -> PluginOptions:
        """``raw`` checked against ``Options``; ConfigError naming this evaluator and the key."""
        return validate_options("evaluator", cls.name, cls.Options, raw)

    @classmethod
    def missing(cls) -> str | None:
        """Why this evaluator cannot run here (e.g. an extra not installed), else None.

        Cheap: import checks only, no model loading.
        """
        return None

    @classmethod
    def unconfigured(cls, settings: EvaluationSettings) -> str | None:
        """Why the defaults leave this evaluator out under ``settings`` (e.g. no judge)."""
        return None

    def load(self, context: PluginContext) -> None:
        """Take what the evaluator needs from ``context``; called once, before scoring.

        Subclasses that load models or clients override this (calling super),
        getting shared objects through ``context.shared`` so that evaluators
        that use the same model load it once. Raises
        :class:`ragpulse.errors.ModelUnavailable` with a message that says the
        fix; the collector then disables this evaluator (logged once, counted
        in ``ragpulse_evaluator_available``) instead of crashing.
        """
        self.context = context
        self._texts = context.shared(TEXT_ANALYSES, TextAnalyses)

    @property
    def texts(self) -> TextAnalyses:
        """The plug-in context's text analyses: each text is analysed once, whichever
        evaluator asks first (before :meth:`load`: a fresh one per use, shared by none)."""
        return self._texts if self._texts is not None else TextAnalyses()

    def evaluate(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        """Score a batch; the i-th result belongs to the i-th record."""
        if not records:
            return []
        start = time.perf_counter()
        try:
            results = self.score_batch(records)
            if len(results) != len(records):
                raise RuntimeError(
                    f"{self.name} returned {len(results)} results for {len(records)} records"
                )
        except Exception:
            # The batch failed as a whole: retry one by one so that one bad record
            # costs only its own result.
            log.debug("batch failed in %s, retrying per record", self.name, exc_info=True)
            results = [self._evaluate_one_safely(r) for r in records]
        per_record_ms = (time.perf_counter() - start) * 1000 / len(records)
        for r in results:
            if r.duration_ms is None:
                # The results were built during this call and no one else holds them yet:
                # stamping in place spares a pydantic copy per result on the hot path.
                object.__setattr__(r, "duration_ms", per_record_ms)
        return results

    def start(self, records: Sequence[RagRecord], priority: bool = False) -> Scoring:
        """Begin scoring a batch; ``results()`` of what it returns gives what
        :meth:`evaluate` would. Evaluators that wait on a device override it to queue the
        work and return at once, so that several evaluators' work shares the device (and
        the caller can prepare the next batch meanwhile); ``priority`` work goes first.
        The default scores now."""
        return Scored(self.evaluate(records))

    def placement(self) -> tuple[str, str] | None:
        """(device, number format) of the model this evaluator runs, once loaded; None
        when it runs no model."""
        return None

    def _evaluate_one_safely(self, record: RagRecord) -> EvalResult:
        start = time.perf_counter()
        try:
            return self.score_batch([record])[0]
        except Exception as exc:
            log.warning("%s failed on trace %s: %r", self.name, record.trace_id, exc)
            return self.error_result(exc, duration_ms=(time.perf_counter() - start) * 1000)

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        """The i-th record's result at index i. Default: :meth:`score` per record;
        override it where a batch is cheaper than its records one by one (a model)."""
        return [self.score(r) for r in records]

    def score(self, record: RagRecord) -> EvalResult:
        """One record's result (:meth:`result`, :meth:`not_applicable`); may raise, the
        caller turns an exception into the record's error result."""
        raise NotImplementedError(f"{type(self).__name__} implements score_batch only")

    def result(
        self,
        score: float | None,
        label: str | None = None,
        explanation: str | None = None,
        **details: object,
    ) -> EvalResult:
        """Build a result stamped with this evaluator's metric and method."""
        fields = {
            "metric": self.metric,
            "method": self.method,
            "score": None if score is None else min(1.0, max(0.0, float(score))),
            "label": label,
            "explanation": explanation,
            "details": details,
            "direction": self.direction,
        }
        result: EvalResult = _validated_result(fields)
        return result

    def not_applicable(self, why: str) -> EvalResult:
        return self.result(None, label="not_applicable", explanation=why)

    def error_result(self, exc: BaseException, duration_ms: float | None = None) -> EvalResult:
        return EvalResult(
            metric=self.metric,
            method=self.method,
            label="error",
            error=f"{type(exc).__name__}: {exc}"[:500],
            duration_ms=duration_ms,
            direction=self.direction,
        )


class ConversationEvaluator(Evaluator):
    """Turns conversation records into one :class:`EvalResult` each: a conversation metric.

    A plug-in like any evaluator (same entry-point group, ``Options``, :meth:`load`,
    :meth:`result`), that implements :meth:`score_conversation` instead of ``score``. The
    collector calls :meth:`evaluate_conversations` when a conversation closes (and again,
    on its revised record, when it resumes); turn records never reach it.
    """

    applies_to: ClassVar[frozenset[str]] = frozenset()  # no turn record

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        named = getattr(cls, "metric", None) and getattr(cls, "method", None)
        if named and cls.score_conversation is ConversationEvaluator.score_conversation:
            raise TypeError(f"{cls.__qualname__} ({cls.name}) must implement score_conversation")

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        raise TypeError(f"{self.name} scores conversations, not turn records")

    def score_conversation(self, conversation: ConversationRecord) -> EvalResult:
        """One conversation's result; may raise (the caller makes it an error result)."""
        raise NotImplementedError

    def evaluate_conversations(
        self, conversations: Sequence[ConversationRecord]
    ) -> list[EvalResult]:
        """Score each conversation; never raises (a failure is that conversation's error)."""
        out = []
        for conversation in conversations:
            start = time.perf_counter()
            try:
                result = self.score_conversation(conversation)
            except Exception as exc:
                log.warning(
                    "%s failed on conversation %s: %r", self.name, conversation.conversation_id, exc
                )
                result = self.error_result(exc)
            if result.duration_ms is None:
                object.__setattr__(result, "duration_ms", (time.perf_counter() - start) * 1000)
            out.append(result)
        return out
