"""What our two shipped probes share: options, the trained threshold, loading the weights."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import Field

from ragpulse.evaluators.base import BatchEvaluator, Tier
from ragpulse.evaluators.models.loading import missing_extra
from ragpulse.plugin_context import PluginOptions

if TYPE_CHECKING:  # numpy loads with the weights, not when evaluators are chosen
    from ragpulse.evaluators.models.probe import LinearProbe

DEFAULT_THRESHOLD = 0.5
"""Used only when the weights file carries no threshold of its own."""


class ProbeOptions(PluginOptions):
    threshold: float | None = Field(
        None, gt=0, lt=1, description="where the label flips; unset: the one trained with them"
    )
    weights: str | None = Field(
        None, description="a retrained probe's .npz instead of the shipped one"
    )


class ProbeEvaluator(BatchEvaluator):
    """A logistic-regression probe over MiniLM features, weights shipped in the package."""

    tier = Tier.MODEL
    options: ProbeOptions
    _trained_threshold: float = DEFAULT_THRESHOLD

    @classmethod
    def missing(cls) -> str | None:
        return missing_extra()

    @property
    def threshold(self) -> float:
        """The configured threshold, else the one trained with the weights (known once loaded)."""
        given = self.options.threshold
        return self._trained_threshold if given is None else given

    def load_weights(
        self, shipped_name: str, features: tuple[str, ...], script: str
    ) -> LinearProbe:
        """The configured or shipped weights, checked against ``features``."""
        from ragpulse.evaluators.models.probe import load_probe, shipped

        weights = self.options.weights
        probe = load_probe(Path(weights) if weights else shipped(shipped_name), features, script)
        if probe.threshold is not None:
            self._trained_threshold = probe.threshold
        return probe
