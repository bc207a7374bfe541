"""What the detector families share: options, presets, loading once, labels, windows,
and the model's queue.

``faithfulness/nli``, ``faithfulness/spans``, ``context_relevance/cross_encoder`` and
``injection/classifier`` each fill two hooks over a
:class:`~ragpulse.evaluators.models.classifier_runtime.Classifier` that this base
loads through the plug-in context (one load per model, backend and head,
shared by every evaluator that names it): :meth:`DetectorEvaluator.plan` says what
one record asks of the model (texts or pairs), :meth:`DetectorEvaluator.finish`
makes its result from their outputs. The base tokenises the inputs of a whole batch
of records in one call and puts them on the model's queue
(:mod:`~ragpulse.evaluators.models.forward_queue`), where they share forward passes
with every other batch and evaluator waiting for that model; a record whose inputs
a failed pass held gets an error result, the others their scores.

Long texts are cut into overlapping token windows (:meth:`DetectorEvaluator.windows`)
that each fit the model with the text they are paired with, never silently cut.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, TypeVar

from pydantic import Field

from ragpulse.errors import ConfigError, ModelUnavailable
from ragpulse.evaluators.base import BatchEvaluator, Scoring, Tier
from ragpulse.evaluators.models.classifier_runtime import Classifier, Head, load_classifier
from ragpulse.evaluators.models.forward_queue import FORWARD_QUEUES, ForwardQueues, Rows
from ragpulse.evaluators.models.loading import missing_extra
from ragpulse.evaluators.models.placement import context_placement
from ragpulse.evaluators.models.presets import Preset, names, preset
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, RagRecord

if TYPE_CHECKING:  # numpy is imported where it is used: deciding which
    import numpy as np  # evaluators run must not pay for it

log = logging.getLogger(__name__)
T = TypeVar("T")
Label = str | int
Input = str | tuple[str, str]
"""One model input: a text, or a (first, second) pair."""

DEFAULT_MAX_TOKENS = 512
MIN_WINDOW_TOKENS = 8


@dataclass(frozen=True)
class Outputs:
    """The model's outputs for one record's inputs, in the order :meth:`plan` gave them:
    logits per input (``(labels,)``, or ``(tokens, labels)`` for a token head) and, for a
    token head, each token's character offsets and sequence (0, 1, None: special)."""

    logits: list[np.ndarray]
    offsets: list[list[tuple[int, int]]]
    sequence_ids: list[list[int | None]]


class DetectorOptions(PluginOptions):
    model: str = Field(
        description="a preset name (see the presets table), a local model directory or a hub "
        "id (hub downloads are off unless HF_HUB_OFFLINE=0)"
    )
    preset: str | None = Field(
        None,
        description="read a local directory with this preset's labels and window (when model "
        "is a path to, say, a copy of hhem-2.1-open)",
    )
    backend: Literal["torch", "onnx"] = Field(
        "torch", description="torch, or onnx: exported once to $RAGPULSE_CACHE_DIR/onnx"
    )
    quantize: bool = Field(False, description="onnx only: int8 dynamic quantisation")
    max_tokens: int | None = Field(
        None, ge=16, description="the model's window in tokens (default: the preset's, or 512)"
    )
    stride: int = Field(32, ge=0, description="tokens shared by consecutive windows")
    batch_size: int = Field(
        16,
        ge=1,
        description="texts or pairs per forward pass at most (on a GPU, when not given: as "
        "many as evaluation.model.max_batch_tokens allows)",
    )
    threads: int | None = Field(None, ge=1, description="onnxruntime intra-op threads")


class DetectorEvaluator(BatchEvaluator):
    """A model-tier evaluator over a Hugging Face classifier; subclasses set ``head``."""

    tier = Tier.MODEL
    default_enabled = False  # opt in: a detector needs its weights
    head: ClassVar[Head] = "sequence"

    class Options(DetectorOptions):
        pass

    options: DetectorOptions
    classifier: Classifier
    preset_used: Preset | None = None
    max_tokens: int = DEFAULT_MAX_TOKENS

    @classmethod
    def missing(cls) -> str | None:
        return missing_extra(("torch", "transformers"))

    @classmethod
    def validate_options(cls, raw: Mapping[str, Any]) -> PluginOptions:
        """The options, with a preset of another family or an unknown ``preset:`` refused
        when the settings load (not when the model does)."""
        options = super().validate_options(raw)
        assert isinstance(options, DetectorOptions)
        preset(options.model, cls.name)
        if options.preset is not None and preset(options.preset, cls.name) is None:
            raise ConfigError(
                f"evaluator {cls.name}: unknown preset {options.preset!r}; "
                f"{cls.name} presets: {', '.join(names(cls.name))}"
            )
        return options

    @property
    def model_name(self) -> str:
        """What the user named (a preset, a path or a hub id): results carry it."""
        return self.options.model

    def extra_load_options(self) -> dict[str, str | None]:
        """Loader arguments of a family (HHEM's foundation, say)."""
        return {}

    def load(self, context: PluginContext) -> None:
        super().load(context)
        opts = self.options
        named = preset(opts.model, self.name)
        self.preset_used = named or preset(opts.preset, self.name)
        location = named.hub_id if named is not None else opts.model
        extra = self.extra_load_options()
        placement = context_placement(context)
        max_batch_tokens = context.settings.evaluation.model.max_batch_tokens
        given = tuple(sorted((k, v) for k, v in extra.items() if v is not None))
        key = ("classifier", self.head, location, opts.backend, opts.quantize, given)
        self.classifier = context.shared(
            key,
            lambda: load_classifier(
                location,
                self.head,
                opts.backend,
                quantize=opts.quantize,
                threads=opts.threads,
                foundation=extra.get("foundation"),
                placement=placement,
                max_batch_tokens=max_batch_tokens,
            ),
        )
        context.shared(FORWARD_QUEUES, ForwardQueues).add(self.classifier.queue)
        wanted = opts.max_tokens or (
            self.preset_used.max_tokens if self.preset_used else DEFAULT_MAX_TOKENS
        )
        limit = self.classifier.max_positions
        # RoBERTa-style position ids start after the padding index: leave room for it.
        self.max_tokens = min(wanted, limit - 2) if limit else wanted
        self.loaded()
        context.shared(("fits", key, self.max_tokens), lambda: self._check_fits())

    def _check_fits(self) -> bool:
        self.classifier.check_fits(self.max_tokens)
        return True

    def placement(self) -> tuple[str, str] | None:
        return self.classifier.placement.device, self.classifier.dtype_name

    def loaded(self) -> None:
        """Check the loaded model (its labels, say); raise ModelUnavailable to disable."""

    # -- labels -----------------------------------------------------------------------
    def label_indices(
        self, given: Sequence[Label] | Label | None, guess: re.Pattern[str], what: str, option: str
    ) -> list[int]:
        """Indices of the labels that mean ``what``: the option, else the preset's, else
        label names matching ``guess``, else label 1 of a two-label model; [] for a
        single-logit model (its sigmoid is the score)."""
        id2label = self.classifier.id2label
        if self.classifier.num_labels == 1:
            return []
        if given is None and self.preset_used is not None and self.preset_used.positive:
            given = list(self.preset_used.positive)
        if given is not None:
            wanted = [given] if isinstance(given, str | int) else list(given)
            found = sorted({i for i, name in id2label.items() for w in wanted if w in (i, name)})
            if not found:
                raise ModelUnavailable(
                    f"{self.name}: {self.model_name} has no label {wanted} (its labels: "
                    f"{id2label}); set {option} to a label name or index"
                )
            return found
        found = [i for i, name in id2label.items() if guess.search(name)]
        if not found and self.classifier.num_labels == 2:
            found = [1]  # LABEL_0 / LABEL_1: 1 is the positive class by convention
        if not found:
            raise ModelUnavailable(
                f"{self.name}: cannot tell which label of {self.model_name} means {what} "
                f"({id2label}); set {option} in evaluation.options"
            )
        return found

    @staticmethod
    def probability(logits: np.ndarray, positive: list[int]) -> np.ndarray:
        """P(positive) per row (or per token): sigmoid of a single logit, else the softmax
        mass of the positive labels."""
        import numpy as np

        if logits.shape[-1] == 1 or not positive:
            result: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(logits[..., 0], -40, 40)))
            return result
        shifted = logits - logits.max(axis=-1, keepdims=True)
        probs = np.exp(shifted)
        probs /= probs.sum(axis=-1, keepdims=True)
        mass: np.ndarray = probs[..., positive].sum(axis=-1)
        return mass

    # -- planning, the queue, results ---------------------------------------------------
    def plan(self, record: RagRecord) -> tuple[list[Input], Any] | EvalResult:
        """What ``record`` asks of the model (its inputs, and any state :meth:`finish`
        needs), or its result already (not applicable, say). May raise: that record's
        error result."""
        raise NotImplementedError

    def finish(self, record: RagRecord, state: Any, outputs: Outputs) -> EvalResult:
        """``record``'s result from the outputs of the inputs :meth:`plan` gave. May raise:
        that record's error result."""
        raise NotImplementedError

    def start(self, records: Sequence[RagRecord], priority: bool = False) -> Scoring:
        """Plan every record, tokenise their inputs (one call per kind: texts, pairs) and
        queue them for the model; the returned scoring's ``results()`` waits for them."""
        began = time.perf_counter()
        planned: list[tuple[list[Input], Any] | EvalResult] = []
        for record in records:
            try:
                planned.append(self.plan(record))
            except Exception as exc:
                log.warning("%s failed on trace %s: %r", self.name, record.trace_id, exc)
                planned.append(self.error_result(exc))
        texts: list[tuple[int, int]] = []  # (record, input) of each text row
        pairs: list[tuple[int, int]] = []
        for ri, plan in enumerate(planned):
            if not isinstance(plan, EvalResult):
                for ii, item in enumerate(plan[0]):
                    (pairs if isinstance(item, tuple) else texts).append((ri, ii))
        token_head = self.head == "token"
        queued: list[tuple[list[tuple[int, int]], Rows, Any]] = []
        for where, pair in ((texts, False), (pairs, True)):
            if not where:
                continue
            items = [planned[ri][0][ii] for ri, ii in where]  # type: ignore[index]
            first = [item[0] if pair else item for item in items]
            second = [item[1] for item in items] if pair else None
            tokens = self.classifier.tokenize(first, second, offsets=token_head)  # type: ignore[arg-type]
            rows = self.classifier.queue.submit(
                tokens.ids, tokens.types, priority=priority, max_rows=self.max_rows
            )
            queued.append((where, rows, tokens))
        return _DetectorScoring(self, records, planned, queued, began)

    def score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        return self.start(records).results()

    @property
    def max_rows(self) -> int | None:
        """Rows per forward pass at most: ``batch_size``; on a GPU, only when it is given
        (else the token budget alone bounds a pass)."""
        given = "batch_size" in self.options.model_fields_set
        if self.classifier.placement.accelerator and not given:
            return None
        return self.options.batch_size

    def windows(self, text: str, budget: int, stride: int | None = None) -> list[tuple[int, int]]:
        """Character spans of ``text`` of at most ``budget`` tokens each, overlapping by
        ``stride`` tokens (the option's by default), covering all of it; [(0, len)] when
        it fits."""
        budget = max(MIN_WINDOW_TOKENS, budget - 2)  # re-tokenising a cut may add a piece
        spans = self.classifier.spans(text)
        if len(spans) <= budget:
            return [(0, len(text))]
        overlap = self.options.stride if stride is None else stride
        step = max(1, budget - min(overlap, budget // 2))
        out = []
        for start in range(0, len(spans), step):
            end = min(start + budget, len(spans))
            last = end == len(spans)
            out.append((spans[start][0] if start else 0, len(text) if last else spans[end - 1][1]))
            if last:
                break
        return out

    def room(self, budget: int, what: str) -> int:
        """``budget`` when a window of text still fits, else ValueError (an error result)."""
        if budget < MIN_WINDOW_TOKENS:
            raise ValueError(
                f"max_tokens {self.max_tokens} leaves {budget} tokens for {what}: raise it"
            )
        return budget

    def split_long(self, text: str, budget: int) -> list[str]:
        """``text`` as pieces of at most ``budget`` tokens (whole, when it fits)."""
        return [text[a:b] for a, b in self.windows(text, budget)]


class _DetectorScoring:
    """A batch on the model's queue: ``results()`` waits for its rows and finishes each
    record (never raises: a record's failure is its error result)."""

    def __init__(
        self,
        evaluator: DetectorEvaluator,
        records: Sequence[RagRecord],
        planned: list[tuple[list[Input], Any] | EvalResult],
        queued: list[tuple[list[tuple[int, int]], Rows, Any]],
        began: float,
    ) -> None:
        self._evaluator, self._records, self._planned = evaluator, records, planned
        self._queued, self._began = queued, began

    def results(self) -> list[EvalResult]:
        ev = self._evaluator
        per_record: dict[int, dict[int, tuple[Any, list[tuple[int, int]], list[int | None]]]] = {}
        failed: dict[int, BaseException] = {}
        for where, rows, tokens in self._queued:
            rows.wait()
            for row, (ri, ii) in enumerate(where):
                error = rows.errors[row]
                if error is not None:
                    failed.setdefault(ri, error)
                    continue
                offsets = tokens.offsets[row] if tokens.offsets is not None else []
                seq = tokens.sequence_ids[row] if tokens.sequence_ids is not None else []
                per_record.setdefault(ri, {})[ii] = (rows.outputs[row], offsets, seq)
        out: list[EvalResult] = []
        for ri, (record, plan) in enumerate(zip(self._records, self._planned, strict=True)):
            if isinstance(plan, EvalResult):
                out.append(plan)
                continue
            if ri in failed:
                log.warning("%s failed on trace %s: %r", ev.name, record.trace_id, failed[ri])
                out.append(ev.error_result(failed[ri]))
                continue
            got = per_record.get(ri, {})
            ordered = [got[ii] for ii in range(len(plan[0]))]
            outputs = Outputs(
                [o for o, _, _ in ordered], [f for _, f, _ in ordered], [q for _, _, q in ordered]
            )
            try:
                out.append(ev.finish(record, plan[1], outputs))
            except Exception as exc:
                log.warning("%s failed on trace %s: %r", ev.name, record.trace_id, exc)
                out.append(ev.error_result(exc))
        per_record_ms = (time.perf_counter() - self._began) * 1000 / max(1, len(out))
        for result in out:
            if result.duration_ms is None:
                object.__setattr__(result, "duration_ms", per_record_ms)
        return out
