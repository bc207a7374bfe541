"""Plain-function evaluators: ``@ragpulse.evaluator`` turns a function of a record into a metric.

No package and no entry point: name the function as ``module:function`` in
``evaluation.evaluators`` (or ``ragpulse eval --metrics``), with the module
importable from the current directory or ``PYTHONPATH``::

    # my_metrics.py
    import ragpulse

    @ragpulse.evaluator(metric="mentions_price", direction="higher_is_better")
    def mentions_price(record: ragpulse.RagRecord) -> float:
        return 1.0 if "$" in record.answer else 0.0

    # ragpulse.yaml
    evaluation:
      evaluators: [faithfulness, my_metrics:mentions_price]
      options:
        my_metrics:mentions_price: {currency: "$"}   # passed as options=, if it takes it

The function returns a score in [0, 1] (a bool counts as 1/0), ``None`` (not
applicable) or an :class:`~ragpulse.record.EvalResult` (for a label, an
explanation or details). It may take ``options`` (the validated options: the
decorator's ``options=`` model, else a dict) and ``context`` (the
:class:`~ragpulse.plugin_context.PluginContext`: settings, metrics, and
``context.shared(key, factory)`` for anything to build once). The contract is
the built-ins': the function runs on the evaluation worker thread, possibly on
several at once; whatever it raises, and a score outside [0, 1], becomes that
record's error result, never a crash.
"""

from __future__ import annotations

import importlib
import inspect
import math
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from pydantic import ConfigDict

from ragpulse.errors import ConfigError
from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.function_loader import parse_spec, resolve
from ragpulse.options import PluginOptions
from ragpulse.record import Direction, EvalResult, RagRecord

F = TypeVar("F", bound=Callable[..., Any])
ATTRIBUTE = "__ragpulse_evaluator__"
_PASSED = ("options", "context")


class _AnyOptions(PluginOptions):
    """Options of a function that declares no model: any keys, passed on as a dict."""

    model_config = ConfigDict(frozen=True, extra="allow")


class FunctionEvaluator(Evaluator):
    """An :class:`Evaluator` around one decorated function (built by :func:`evaluator`)."""

    default_enabled = False  # on when named
    function: ClassVar[Callable[..., Any]]
    passes: ClassVar[tuple[str, ...]] = ()
    typed_options: ClassVar[bool] = False

    def score(self, record: RagRecord) -> EvalResult:
        kwargs: dict[str, Any] = {}
        if "options" in self.passes:
            kwargs["options"] = self.options if self.typed_options else self.options.model_dump()
        if "context" in self.passes:
            kwargs["context"] = self.context
        return self._as_result(type(self).function(record, **kwargs))

    def _as_result(self, value: Any) -> EvalResult:
        if value is None:
            return self.not_applicable(f"{self.function.__qualname__} returned None")
        if isinstance(value, EvalResult):
            if value.score is not None and not 0.0 <= value.score <= 1.0:
                raise ValueError(f"returned a score of {value.score}, outside [0, 1]")
            return value.model_copy(
                update={"metric": self.metric, "method": self.method, "direction": self.direction}
            )
        if isinstance(value, bool):
            return self.result(float(value))
        if isinstance(value, int | float):
            score = float(value)
            if math.isnan(score) or not 0.0 <= score <= 1.0:
                raise ValueError(f"returned {value!r}: a score must be in [0, 1]")
            return self.result(score)
        raise TypeError(
            f"returned a {type(value).__name__}: return a float in [0, 1], None or an EvalResult"
        )


def evaluator(
    metric: str,
    *,
    method: str | None = None,
    direction: Direction | str = Direction.HIGHER_IS_BETTER,
    tier: Tier | str = Tier.CHEAP,
    options: type[PluginOptions] | None = None,
) -> Callable[[F], F]:
    """Declare ``fn(record, [options], [context])`` an evaluator of ``metric``.

    ``method`` defaults to the function's name; ``direction`` says which way is good
    (``lower_is_better`` for a risk); ``tier`` decides sampling (``cheap``: every
    record, ``model``: the model tier's sample, ``judge``: the judge's). ``options`` is
    a :class:`~ragpulse.options.PluginOptions` model the settings are checked against.
    The function itself is returned unchanged (call it in your own tests).
    """
    try:
        chosen_direction, chosen_tier = Direction(direction), Tier(tier)
    except ValueError as exc:
        raise ConfigError(f"@ragpulse.evaluator(metric={metric!r}): {exc}") from None

    def register(fn: F) -> F:
        if inspect.iscoroutinefunction(fn):
            raise ConfigError(
                f"@ragpulse.evaluator on {fn.__qualname__}: async functions are not supported "
                "(evaluators run on worker threads; call your client synchronously)"
            )
        parameters = inspect.signature(fn).parameters
        attributes = {
            "metric": metric,
            "method": method or fn.__name__,
            "direction": chosen_direction,
            "tier": chosen_tier,
            "function": staticmethod(fn),
            "passes": tuple(p for p in _PASSED if p in parameters),
            "typed_options": options is not None,
            "Options": options or _AnyOptions,
            "__module__": fn.__module__,
            "__doc__": fn.__doc__,
        }
        cls = type(f"FunctionEvaluator[{fn.__qualname__}]", (FunctionEvaluator,), attributes)
        setattr(fn, ATTRIBUTE, cls)
        return fn

    return register


def _evaluators_in(module: Any) -> list[str]:
    """The names of a module's ``@ragpulse.evaluator`` functions."""
    return [
        name
        for name in dir(module)
        if not name.startswith("_") and _evaluator_of(getattr(module, name, None)) is not None
    ]


def _evaluator_of(obj: Any) -> type[FunctionEvaluator] | None:
    cls = getattr(obj, ATTRIBUTE, None)
    return cls if isinstance(cls, type) and issubclass(cls, FunctionEvaluator) else None


def load(spec: str) -> type[FunctionEvaluator]:
    """The evaluator class of a decorated ``module:function``; ConfigError says the fix (a
    misspelled name gets the closest of the module's evaluators, or their list)."""
    cls = _evaluator_of(resolve(spec, "evaluator", _evaluators_in, "its evaluators"))
    if cls is None:
        module = importlib.import_module(parse_spec(spec, "evaluator").module)
        others = _evaluators_in(module)
        listed = f" (its evaluators: {', '.join(others)})" if others else ""
        raise ConfigError(
            f"evaluator {spec!r} is not decorated with @ragpulse.evaluator(metric=...){listed}"
        )
    return cls
