"""The evaluator contracts and the shared work every evaluator gets for free.

Three contracts, each an abstract class whose abstract method a plug-in implements:
:class:`Evaluator` (``score``: one turn record), :class:`BatchEvaluator` (``score_batch``:
turn records in batches, where a model is cheaper on many at once) and
:class:`ConversationEvaluator` (``score_conversation``: a closed conversation). What they
share (name, tier, direction, options, ``load``, ``result``) is :class:`EvaluatorBase`,
which no plug-in subclasses directly. A class that gives ``metric`` and ``method`` and
leaves its contract's abstract method out is refused when it is defined.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeAlias

from ragpulse.evaluators.text.analyses import TextAnalyses
from ragpulse.plugin_context import PluginContext, PluginOptions, unimplemented, validate_options
from ragpulse.record import ConversationRecord, Direction, EvalResult, RagRecord

if TYPE_CHECKING:
    from ragpulse.config import EvaluationSettings

__all__ = [
    "AGENT_TURNS",
    "ANSWERED",
    "RECORD_KINDS",
    "AnyEvaluator",
    "BatchEvaluator",
    "ConversationEvaluator",
    "Evaluator",
    "EvaluatorBase",
    "Tier",
]

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


class EvaluatorBase(ABC):
    """What every evaluator is, whatever it scores; a plug-in subclasses one of the three
    contracts (:class:`Evaluator`, :class:`BatchEvaluator`, :class:`ConversationEvaluator`),
    one file plus one entry-point line:

    - ``metric``, ``method``, ``tier`` and ``direction`` (which way is good); ``name``
      (``metric/method``) is set from the first two;
    - ``class Options(PluginOptions)``: its settings (``evaluation.options.<name>``),
      validated when the settings load; read them as ``self.options``;
    - :meth:`load` receives the :class:`PluginContext` (settings, metrics, shared
      models and clients) once, before the first batch;
    - its contract's scoring method, required when the class is defined;
    - :meth:`result` and :meth:`not_applicable` build its results; :attr:`texts` gives
      each text's analysis (tokens, sentences, normalised form, or anything derived once
      per text), shared with the other evaluators.

    Subclasses hold no per-call state, so one instance may score concurrently from
    several threads.
    """

    metric: ClassVar[str]
    method: ClassVar[str]
    name: ClassVar[str]
    """``metric/method``, the name users type; set when a class gives both."""
    tier: ClassVar[Tier] = Tier.CHEAP
    direction: ClassVar[Direction] = Direction.HIGHER_IS_BETTER
    default_enabled: ClassVar[bool] = True
    """Selected when the configuration names no evaluators (and :meth:`missing` is None)."""
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
        metric, method = getattr(cls, "metric", None), getattr(cls, "method", None)
        if metric is None or method is None:
            return  # a base for others (JudgeEvaluator, LexicalEvaluator, ...)
        cls.name = f"{metric}/{method}"
        if not issubclass(cls, Evaluator | ConversationEvaluator):
            raise TypeError(
                f"{cls.__qualname__} ({cls.name}) must subclass Evaluator, BatchEvaluator or "
                "ConversationEvaluator"
            )
        missing = unimplemented(cls)
        if missing:
            batches = issubclass(cls, Evaluator) and cls.score_batch is not Evaluator.score_batch
            hint = ""
            if batches and "score" in missing:
                hint = " (it scores batches: subclass BatchEvaluator)"
            raise TypeError(
                f"{cls.__qualname__} ({cls.name}) must implement {', '.join(missing)}{hint}"
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

    def placement(self) -> tuple[str, str] | None:
        """(device, number format) of the model this evaluator runs, once loaded; None
        when it runs no model."""
        return None

    def error_result(self, exc: BaseException, duration_ms: float | None = None) -> EvalResult:
        return EvalResult(
            metric=self.metric,
            method=self.method,
            label="error",
            error=f"{type(exc).__name__}: {exc}"[:500],
            duration_ms=duration_ms,
            direction=self.direction,
        )


class Evaluator(EvaluatorBase):
    """Turns turn records into one :class:`EvalResult` each: implement :meth:`score`.

    Contract: :meth:`evaluate` is called from the collector's evaluation worker thread
    (never from the intake path), may block, and never raises: whatever ``score`` (or
    ``score_batch``) raises becomes that record's error result.
    """

    applies_to: ClassVar[frozenset[str]] = RECORD_KINDS
    """The record kinds it scores (:data:`ANSWERED` for an answer metric, :data:`AGENT_TURNS`
    for an agent signal); records of another kind get no result of it at all."""

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

    def _evaluate_one_safely(self, record: RagRecord) -> EvalResult:
        start = time.perf_counter()
        try:
            return self.score_batch([record])[0]
        except Exception as exc:
            log.warning("%s failed on trace %s: %r", self.name, record.trace_id, exc)
            return self.error_result(exc, duration_ms=(time.perf_counter() - start) * 1000)

    @abstractmethod
    def score(self, record: RagRecord) -> EvalResult:
        """One record's result (:meth:`result`, :meth:`not_applicable`); may raise, the
        caller turns an exception into the record's error result."""

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        """The i-th record's result at index i: :meth:`score` per record."""
        return [self.score(r) for r in records]


class BatchEvaluator(Evaluator):
    """An :class:`Evaluator` that scores a batch at once (a model, a judge): implement
    :meth:`score_batch`; :meth:`score` is the batch of one."""

    @abstractmethod
    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        """The i-th record's result at index i; may raise (the records are then scored one
        by one, and what still raises becomes that record's error result)."""

    def score(self, record: RagRecord) -> EvalResult:
        return self.score_batch([record])[0]


class ConversationEvaluator(EvaluatorBase):
    """Turns conversation records into one :class:`EvalResult` each: a conversation metric.

    A plug-in like any evaluator (same entry-point group, ``Options``, :meth:`load`,
    :meth:`result`), that implements :meth:`score_conversation` instead of ``score``. The
    collector calls :meth:`evaluate_conversations` when a conversation closes (and again,
    on its revised record, when it resumes); turn records never reach it.
    """

    @abstractmethod
    def score_conversation(self, conversation: ConversationRecord) -> EvalResult:
        """One conversation's result; may raise (the caller makes it an error result)."""

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


AnyEvaluator: TypeAlias = Evaluator | ConversationEvaluator
"""What the ``ragpulse.evaluators`` entry points name: an evaluator of turn records or of
conversations."""
