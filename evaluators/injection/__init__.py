"""``injection/<method>``: instructions aimed at the assistant, in the question or a document.

The rule engine the methods share is :mod:`ragpulse.evaluators.injection_engine`."""

from typing import Any

from ragpulse import moved


def __getattr__(name: str) -> Any:
    """Names this module held in earlier releases, read where they live now (warns)."""
    return moved.moved_name(__name__, name)
