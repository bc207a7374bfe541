"""A logistic-regression head over fixed features: our own small models.

Weights live in a small ``.npz`` shipped in the package (see the model cards
beside them): ``weights``, ``bias``, ``mean`` and ``scale`` (standardisation),
``feature_names``, a ``version`` string and, optionally, the decision ``threshold``
chosen in training. Inference is numpy only; training scripts live in ``training/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

import numpy as np

from ragpulse.errors import ModelUnavailable


@dataclass(frozen=True)
class LinearProbe:
    weights: np.ndarray
    bias: float
    mean: np.ndarray
    scale: np.ndarray
    feature_names: tuple[str, ...]
    version: str
    threshold: float | None = None

    def predict(self, features: np.ndarray) -> np.ndarray:
        """P(positive) per row of ``features`` (n, len(feature_names))."""
        if features.shape[-1] != len(self.feature_names):
            raise ValueError(
                f"expected {len(self.feature_names)} features, got {features.shape[-1]}"
            )
        z = ((features - self.mean) / self.scale) @ self.weights + self.bias
        probabilities: np.ndarray = 1.0 / (1.0 + np.exp(-np.clip(z, -40, 40)))
        return probabilities

    def save(self, path: Path) -> None:
        np.savez_compressed(
            path,
            weights=self.weights.astype(np.float32),
            bias=np.float32(self.bias),
            mean=self.mean.astype(np.float32),
            scale=self.scale.astype(np.float32),
            feature_names=np.array(self.feature_names),
            version=np.array(self.version),
        )

    @classmethod
    def load(cls, path: Path) -> LinearProbe:
        try:
            with np.load(path, allow_pickle=False) as data:
                return cls(
                    weights=data["weights"].astype(np.float64),
                    bias=float(data["bias"]),
                    mean=data["mean"].astype(np.float64),
                    scale=data["scale"].astype(np.float64),
                    feature_names=tuple(str(x) for x in data["feature_names"]),
                    version=str(data["version"]),
                    # float32 on disk: rounded so 0.85 reads back as 0.85
                    threshold=round(float(data["threshold"]), 4)
                    if "threshold" in data.files
                    else None,
                )
        except (OSError, KeyError, ValueError) as exc:
            raise ModelUnavailable(f"cannot read probe weights {path}: {exc}") from exc


def load_probe(path: Path, feature_names: tuple[str, ...], retrain: str) -> LinearProbe:
    """Load ``path`` and check it was trained on the features this ragpulse computes."""
    probe = LinearProbe.load(path)
    if probe.feature_names != tuple(feature_names):
        raise ModelUnavailable(
            f"{path} ({probe.version}) was trained on other features than this ragpulse "
            f"computes; reinstall ragpulse or retrain it with {retrain}"
        )
    return probe


def shipped(name: str) -> Path:
    """Path of a probe shipped in ragpulse.evaluators.models/weights/."""
    return Path(str(files("ragpulse.evaluators.models").joinpath("weights", name)))
