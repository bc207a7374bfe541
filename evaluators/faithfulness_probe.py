"""``faithfulness/probe``: ragpulse's own faithfulness model, on by default with the models extra.

A logistic regression (``weights/faithfulness_probe.npz``, model card beside
it) over features of the answer against the retrieved documents: MiniLM
sentence support (each answer sentence against its best document sentence)
plus the details an embedding misses (novel numbers and names, negation flips,
bigram and local token support). No NLI weights are needed, so it runs
wherever MiniLM does. Score: P(faithful), higher is better.

Cost: one embedding call per batch for every answer and document sentence of
all its records; document sentences are cached by the shared encoder, so
re-retrieved documents are embedded once.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import Field

from ragpulse.evaluators.base import Evaluator, Tier
from ragpulse.evaluators.models.loading import MINILM, missing_extra
from ragpulse.plugin_context import PluginContext, PluginOptions
from ragpulse.record import EvalResult, RagRecord

if TYPE_CHECKING:  # numpy and the features load on first use: choosing evaluators stays cheap
    import numpy as np

    from ragpulse.evaluators.models.faithfulness_features import Prepared
    from ragpulse.evaluators.models.probe import LinearProbe

WEIGHTS = "faithfulness_probe.npz"
DEFAULT_THRESHOLD = 0.5
"""Used only when the weights file carries no threshold of its own."""


class FaithfulnessProbe(Evaluator):
    """P(the answer is supported by the documents), from a small shipped logistic regression."""

    metric = "faithfulness"
    method = "probe"
    tier = Tier.MODEL
    # Opt-in: v2 (no reserved data) beats faithfulness/lexical on SummEdits and HaluEval dialogue
    # but not on ARES NQ (AUROC 0.931 vs 0.971, same rows; model card).
    default_enabled = False

    class Options(PluginOptions):
        threshold: float | None = Field(
            None, gt=0, lt=1, description="P(faithful) labelled 'faithful'; unset: the trained one"
        )
        weights: str | None = Field(
            None, description="a retrained probe's .npz instead of the shipped one"
        )

    options: Options
    _trained_threshold: float = DEFAULT_THRESHOLD

    @property
    def threshold(self) -> float:
        """The configured threshold, else the one trained with the weights (known once loaded)."""
        given = self.options.threshold
        return self._trained_threshold if given is None else given
    _encoder: Any = None
    _probe: LinearProbe | None = None

    @classmethod
    def missing(cls) -> str | None:
        return missing_extra()

    def load(self, context: PluginContext) -> None:
        super().load(context)
        from ragpulse.evaluators.models.encoder import shared_encoder
        from ragpulse.evaluators.models.faithfulness_features import FEATURE_NAMES
        from ragpulse.evaluators.models.probe import load_probe, shipped

        opts = self.options
        path = shipped(WEIGHTS) if opts.weights is None else Path(opts.weights)
        probe = load_probe(path, FEATURE_NAMES, "training/train_faithfulness_probe.py")
        if probe.threshold is not None:
            self._trained_threshold = probe.threshold
        self._encoder = shared_encoder(MINILM, context=context)
        self._probe = probe

    def _score_batch(self, records: Sequence[RagRecord]) -> list[EvalResult]:
        if self._probe is None or self._encoder is None:
            raise RuntimeError("FaithfulnessProbe.load() was not called")
        from ragpulse.evaluators.models.faithfulness_features import prepare

        chunk = self._encoder.chunks
        plans = [
            prepare(r.question, r.answer, [d.content for d in r.documents], chunk) for r in records
        ]
        texts = list(dict.fromkeys(t for p in plans if p.applicable for t in p.texts))
        vectors = dict(zip(texts, self._encoder.embed(texts), strict=True)) if texts else {}
        return [self._one(plan, vectors) for plan in plans]

    def _one(self, plan: Prepared, vectors: dict[str, np.ndarray]) -> EvalResult:
        if not plan.doc_units:
            return self.not_applicable("no documents with text retrieved")
        if not plan.answer_units:
            return self.not_applicable("answer is empty")
        import numpy as np

        from ragpulse.evaluators.models.faithfulness_features import FEATURE_NAMES, featurize

        assert self._probe is not None
        features = featurize(plan, vectors)
        p = float(self._probe.predict(features.values[None, :])[0])
        label = "faithful" if p >= self.threshold else "unfaithful"
        z = (features.values - self._probe.mean) / self._probe.scale * self._probe.weights
        against = [FEATURE_NAMES[i] for i in np.argsort(z)[:3] if z[i] < 0]
        ev = features.evidence
        return self.result(
            p,
            label=label,
            explanation=_explain(p, label, ev),
            threshold=self.threshold,
            features={
                n: round(float(v), 4) for n, v in zip(FEATURE_NAMES, features.values, strict=True)
            },
            lowered_by=against,
            model_version=self._probe.version,
            **ev,
        )


def _explain(p: float, label: str, ev: dict[str, Any]) -> str:
    reasons = []
    if ev["novel_numbers"]:
        reasons.append(f"numbers not in the documents: {', '.join(ev['novel_numbers'][:3])}")
    if ev["novel_entities"]:
        reasons.append(f"names not in the documents: {', '.join(ev['novel_entities'][:3])}")
    if ev["negation_flips"]:
        reasons.append("a negation that its best-matching document sentence lacks (or vice versa)")
    reasons.append(
        f"weakest sentence {ev['weakest_sentence'][:80]!r} matches document "
        f"{ev['weakest_document']} at cosine {ev['weakest_similarity']:.2f}"
    )
    return f"P(faithful) {p:.2f} ({label}): " + "; ".join(reasons)
