"""Text machinery the cheap evaluators share: tokenising, sentences, one analysis per text
(:mod:`.analyses`) and the token-overlap arithmetic of the lexical metrics (:mod:`.overlap`)."""

from typing import Any

from ragpulse import moved


def __getattr__(name: str) -> Any:
    """Names this module held in earlier releases, read where they live now (warns)."""
    return moved.moved_name(__name__, name)
