"""``injection_followed/<method>``: did the app carry out an instruction planted in its context?"""

from typing import Any

from ragpulse import moved


def __getattr__(name: str) -> Any:
    """Names this module held in earlier releases, read where they live now (warns)."""
    return moved.moved_name(__name__, name)
