"""``(did you mean faithfulness?)``: the closest names to one a user misspelled.

In the core so that every layer can suggest: the plug-in registry for metric names, the
function loader for a module's attributes, the offline gates for slices and figures.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """``" (did you mean faithfulness?)"`` for the closest of ``choices``, or ``""``."""
    close = difflib.get_close_matches(name, sorted(set(choices)), n=3, cutoff=0.75)
    return f" (did you mean {' or '.join(close)}?)" if close else ""
